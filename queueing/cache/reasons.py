"""Pending reasons between cycles: report only the ones that changed (``ReasonChanges``).

A cycle gives every pending workload a reason, mostly one reason object for a whole run of
workloads (``PendingReasons.groups``). A caller that runs cycle after cycle (the simulator, the
controller) writes a reason only when it differs from the workload's last one; comparing every
workload's reason in every cycle would cost what the backlog costs, so the comparison goes by
groups (see :meth:`ReasonChanges.changes`). Verify mode compares every workload by value too.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import compress, count, islice
from operator import attrgetter, is_not, itemgetter

from queueing.scheduling.backlog import Backlog
from queueing.scheduling.cycle import PendingReason, PendingReasons
from queueing.scheduling.snapshot import WorkloadInfo

__all__ = ["ReasonChanges", "pending_groups"]

_key = attrgetter("key")


def _agree(pws: Sequence[WorkloadInfo], j: int, ws: Sequence[WorkloadInfo], n: int) -> int:
    """How many of ``ws[:n]`` agree with ``pws[j:j + n]`` in order: the index of the first pair
    that differs, else ``n``. Mostly all do: a list comparison answers that at C speed (it compares
    by identity first; a pair of distinct but equal workloads also agrees, and may, as a reason goes
    by the workload's key and equal workloads have equal keys); only when it fails are the pairs
    searched one by one for the first one that is not the same object."""
    if pws[j : j + n] == (ws if len(ws) == n else ws[:n]):
        return n
    # (map stops at the shorter of the two: after n pairs)
    return next(compress(count(), map(is_not, islice(pws, j, None), ws)), n)


def pending_groups(
    pending: Mapping[str, PendingReason],
) -> Iterator[tuple[Sequence[WorkloadInfo] | None, str | None, PendingReason]]:
    """A cycle's pending reasons as groups (see ``PendingReasons.groups``), from any mapping."""
    if isinstance(pending, PendingReasons):
        yield from pending.groups()
    else:
        for key, pr in pending.items():
            yield None, key, pr


class ReasonChanges:
    """The last pending reason of every pending workload, to report only changes; and the
    workloads whose last reason is Preempting (nominated for the next cycle)."""

    # how far a group's first workload may have moved in last cycle's group of its run (admitted
    # heads) for the comparison below to look for it
    _SHIFT = 64

    def __init__(self, verify: bool = False) -> None:
        self.last: dict[str, PendingReason] = {}
        self.nominated: set[str] = set()
        # fit signature (a run) -> its group in the last cycle (``PendingReasons.set_all`` keeps
        # the lists it is given unchanged, so they are kept here as they are)
        self._groups: dict[str, tuple[Sequence[WorkloadInfo], PendingReason]] = {}
        # key -> the fit signature of the group its reason came from (to forget that group too)
        self._run_of: dict[str, str] = {}
        self.verify = verify  # also compare every workload's reason with its last one (``_check``)

    def forget(self, key: str) -> None:
        """Forget the last reason of ``key``: the next cycle reports its reason whatever it is.
        The group it was last reported in is forgotten too (else the next cycle could skip it
        as part of an unchanged group)."""
        self.last.pop(key, None)
        self.nominated.discard(key)
        sig = self._run_of.pop(key, None)
        if sig is not None:
            self._groups.pop(sig, None)

    def changes(
        self, pending: Mapping[str, PendingReason], present: Backlog
    ) -> list[tuple[str, PendingReason]]:
        """This cycle's reasons that differ from the last ones (of workloads still pending), in key
        order; remembers them. A reason is mostly shared by a whole run of workloads (a group):
        the part of a group that was last cycle's group of the same run, in the same order with
        an equal reason, has not changed and is skipped; the rest is compared once per distinct
        last reason object, and an equal reason is adopted so that the group shares one object
        again next time."""
        changed: list[tuple[str, PendingReason]] = []
        last = self.last
        run_of = self._run_of
        before = dict(last) if self.verify else None
        groups: dict[str, tuple[Sequence[WorkloadInfo], PendingReason]] = {}
        for ws, one, pr in pending_groups(pending):
            if ws is None:
                # a single workload's reason (most entries are): compared on its own
                if one is None:
                    continue
                was = last.get(one)
                if was is not pr and (was is None or was != pr) and one in present:
                    self._report(changed, one, pr)
                last[one] = pr
                if run_of:
                    run_of.pop(one, None)
                continue
            todo: Sequence[WorkloadInfo] = ws
            head = ws[0]
            sig = head.fit_signature
            prev = self._groups.get(sig)
            groups[sig] = (ws, pr)
            if prev is not None and (prev[1] is pr or prev[1] == pr):
                pws = prev[0]
                if pws[0] is head:  # no head of the run left it since (most runs)
                    j: int | None = 0
                else:
                    j = next((i for i in range(1, min(len(pws), self._SHIFT)) if pws[i] is head), None)
                if j is not None:
                    n = min(len(pws) - j, len(ws))
                    todo = ws[_agree(pws, j, ws, n) :]
            keys: list[str] = list(map(_key, todo))
            if not keys:
                continue
            run_of.update(dict.fromkeys(keys, sig))
            lasts = list(map(last.get, keys))
            distinct = dict(zip(map(id, lasts), lasts, strict=True))
            other = {i for i, x in distinct.items() if x is not pr and (x is None or x != pr)}
            if other:
                for key, was in zip(keys, lasts, strict=True):
                    if id(was) in other and key in present:
                        self._report(changed, key, pr)
            last.update(dict.fromkeys(keys, pr))
        self._groups = groups
        changed.sort(key=itemgetter(0))
        if before is not None:
            self._check(before, pending, present, changed)
        return changed

    def _report(self, changed: list[tuple[str, PendingReason]], key: str, pr: PendingReason) -> None:
        """``key``'s reason changed to ``pr``: reported, and nominated while it is Preempting."""
        changed.append((key, pr))
        if pr.reason == "Preempting":
            self.nominated.add(key)
        else:
            self.nominated.discard(key)

    def _check(
        self,
        before: Mapping[str, PendingReason],
        pending: Mapping[str, PendingReason],
        present: Backlog,
        changed: list[tuple[str, PendingReason]],
    ) -> None:
        """Verify mode: ``changes`` skips the parts of groups that agree with last cycle's; the
        general computation compares every workload's reason with its last one by value."""
        want: list[tuple[str, PendingReason]] = []
        for ws, one, pr in pending_groups(pending):
            for key in [w.key for w in ws] if ws is not None else [one] if one is not None else []:
                if self.last.get(key) != pr:
                    raise RuntimeError(f"verify: pending reasons: {key} is remembered with another reason")
                if key in present and before.get(key) != pr:
                    want.append((key, pr))
        want.sort(key=itemgetter(0))
        if want != changed:
            raise RuntimeError(
                "verify: pending reasons: changes reported "
                f"{[k for k, _ in changed]}, changed by value {[k for k, _ in want]}"
            )
