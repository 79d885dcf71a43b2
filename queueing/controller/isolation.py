"""Isolation by object: an error that comes from one object's data stays with that object.

The controller runs one loop for everyone; without this, one ClusterQueue whose quota the ledger cannot
store (``nominalQuota: "1e100"`` overflows ``NUMERIC(38, 9)``) or one selector whose evaluation fails in
an unexpected way would fail every sync, and no Job of any queue would be admitted. Here:

* :class:`Quarantine` — queue objects (ClusterQueue, Cohort) whose data the ledger refused. The refusal
  is recorded with a message naming the field; the object's last accepted version (what the ledger
  still enforces) keeps standing in for it in the scheduling cycle, so the usage of what it admitted
  before keeps counting, and its ClusterQueues — every ClusterQueue of a refused Cohort's subtree —
  are inactive with reason ``LedgerRejected`` (their Jobs wait with that message, the status says it).
  Refused again only when the object changes; the next accepted write lifts it.
* ClusterQueues the model rejects (:func:`invalid_cluster_queues`) are inactive too, reason
  ``InvalidSpec`` with the model's message naming the field, written on their status
  (:func:`invalid_status`); an empty placeholder in the cycle (:func:`with_placeholders`) tells their
  Jobs why instead of "doesn't exist".
* :func:`quota_errors` — the check of an object's amounts against the ledger's column, before any
  write, with the field's path (``spec.resourceGroups[0].flavors[0].resources[0].nominalQuota``).
* :func:`isolate_cycle` — the scheduling cycle is pure and evaluates every pending workload; if it
  raises for a reason the cores did not turn into a per-workload reason (a bug, or an engine limit not
  handled yet), the workloads that make it fail are found by bisection (the cycle run on halves), given
  a pending reason that names the error, and the cycle runs for everyone else. Verify mode's
  ``VerifyError`` is never caught (a difference between a fast path and the general computation is a bug
  that must stop the test).

A ledger outage is not a data error (``queueing.ledger.errors.is_outage``): it pauses all admission and
is handled by the loop (:class:`OutageLog`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from queueing.api.base import KubeObject
from queueing.api.v1beta1 import ACTIVE, ClusterQueue, Cohort, ResourceGroup
from queueing.controller.plan import fmt_time
from queueing.dra.verify import VerifyError
from queueing.ledger.errors import amount_error, is_data_error, is_outage, short_reason
from queueing.scheduling.from_api import QueueSpecs
from queueing.scheduling.snapshot import ClusterQueueSpec as SchedClusterQueue

__all__ = [
    "INVALID_SPEC",
    "LEDGER_REJECTED",
    "OutageLog",
    "Quarantine",
    "invalid_cluster_queues",
    "invalid_status",
    "isolate_cycle",
    "quota_errors",
    "refusal_message",
    "with_placeholders",
]

log = logging.getLogger("queueing.controller.isolation")

LEDGER_REJECTED = "LedgerRejected"

Q = TypeVar("Q", ClusterQueue, Cohort)
T = TypeVar("T")


def _groups_errors(groups: Iterable[ResourceGroup] | None) -> list[str]:
    out = []
    for gi, g in enumerate(groups or []):
        for fi, fq in enumerate(g.flavors):
            for ri, r in enumerate(fq.resources):
                for wire, value in (
                    ("nominalQuota", r.nominal_quota),
                    ("borrowingLimit", r.borrowing_limit),
                    ("lendingLimit", r.lending_limit),
                ):
                    why = amount_error(value) if value is not None else None
                    if why is not None:
                        out.append(f"spec.resourceGroups[{gi}].flavors[{fi}].resources[{ri}].{wire}: {why}")
    return out


def quota_errors(obj: ClusterQueue | Cohort) -> list[str]:
    """The amounts of a ClusterQueue or Cohort that the ledger cannot store, each with its field path."""
    out = _groups_errors(obj.spec.resource_groups)
    fs = obj.spec.fair_sharing
    if fs is not None and fs.weight is not None and (why := amount_error(fs.weight)) is not None:
        out.append(f"spec.fairSharing.weight: {why}")
    return out


@dataclass
class Quarantine:
    """Queue objects the ledger refused: ``(kind, name) -> message`` (the message names the field)."""

    # told of each refusal (the controller puts a Warning Event on the object)
    report: Callable[[ClusterQueue | Cohort, str], Awaitable[object]] | None = None
    rejected: dict[tuple[str, str], str] = field(default_factory=dict)
    # the last version of each object the ledger accepted (stands in for a refused one in the cycle)
    _accepted: dict[tuple[str, str], Any] = field(default_factory=dict)

    async def store(self, obj: ClusterQueue | Cohort, write: Callable[[], Awaitable[object]]) -> bool:
        """Write ``obj`` to the ledger (``write``) unless its amounts do not fit; a refusal of its data
        is kept with it (False). An outage, or an error that says nothing about the data, is raised."""
        key = (obj.kind or type(obj).KIND, obj.name)
        problems = quota_errors(obj)
        if not problems:
            try:
                await write()
            except Exception as e:
                if is_outage(e) or not is_data_error(e):
                    raise
                problems = [f"the ledger refused it: {refusal_message(e)}"]
        if problems:
            msg = f"{key[0]} {obj.name}: " + "; ".join(problems)
            if self.rejected.get(key) != msg:
                log.warning("the ledger cannot store %s; it is inactive until fixed", msg)
            self.rejected[key] = msg
            if self.report is not None:
                await self.report(obj, msg)
            return False
        self.rejected.pop(key, None)
        self._accepted[key] = obj
        return True

    def forget_missing(self, kind: str, present: Iterable[str]) -> None:
        """Objects of ``kind`` deleted from the cluster are not refused any more."""
        keep = set(present)
        for key in [k for k in (*self.rejected, *self._accepted) if k[0] == kind and k[1] not in keep]:
            self.rejected.pop(key, None)
            self._accepted.pop(key, None)

    def for_cycle(self, objects: Sequence[Q]) -> list[Q]:
        """``objects`` with each refused one replaced by its last accepted version, or — when this process
        saw none accepted — by itself without quota (it is inactive: it admits nothing, and lends
        nothing it could not store)."""
        out: list[Q] = []
        for o in objects:
            key = (o.kind or type(o).KIND, o.name)
            if key not in self.rejected:
                out.append(o)
            elif key in self._accepted:
                out.append(self._accepted[key])
            else:
                out.append(_without_quota(o))
        return out

    def inactive(self, cluster_queues: Iterable[ClusterQueue], cohorts: Iterable[Cohort]) -> dict[str, str]:
        """ClusterQueue name -> ``LedgerRejected: <message>`` for each refused ClusterQueue and each one
        in the subtree of a refused Cohort."""
        if not self.rejected:
            return {}
        parent = {c.name: c.spec.parent_name for c in cohorts}
        out: dict[str, str] = {}
        for cq in cluster_queues:
            msg = self.rejected.get(("ClusterQueue", cq.name))
            seen: set[str] = set()
            node = cq.spec.cohort_name
            while msg is None and node and node not in seen:
                seen.add(node)
                msg = self.rejected.get(("Cohort", node))
                node = parent.get(node)
            if msg is not None:
                out[cq.name] = f"{LEDGER_REJECTED}: {msg}"
        return out


INVALID_SPEC = "InvalidSpec"


def invalid_cluster_queues(invalid: Iterable[tuple[KubeObject, str]]) -> dict[str, str]:
    """ClusterQueues the model rejects (the informer's ``invalid_objects()``) -> ``InvalidSpec: <message
    naming the field>``: inactive, as the ledger's refusals are, rather than absent."""
    return {ref.name: f"{INVALID_SPEC}: {msg}" for ref, msg in invalid if ref.name}


def with_placeholders(specs: QueueSpecs, inactive: Mapping[str, str]) -> QueueSpecs:
    """``specs`` with an empty ClusterQueue (no quota, no cohort, no namespace) for each inactive name
    it lacks (one the model rejects): its Jobs are told why it is inactive instead of "doesn't exist"."""
    have = {cq.name for cq in specs.cluster_queues}
    missing = [
        SchedClusterQueue(name, namespace_selector=None) for name in sorted(inactive) if name not in have
    ]
    if not missing:
        return specs
    return dataclasses.replace(
        specs, cluster_queues=tuple(sorted((*specs.cluster_queues, *missing), key=lambda c: c.name))
    )


def invalid_status(message: str, now: float) -> dict[str, Any]:
    """The status written on a ClusterQueue the model rejects (its other fields cannot be computed)."""
    return {
        "conditions": [
            {
                "type": ACTIVE,
                "status": "False",
                "reason": INVALID_SPEC,
                "message": message,
                "lastTransitionTime": fmt_time(now),
            }
        ]
    }


def _without_quota(obj: Q) -> Q:
    """``obj`` with every amount 0 and no limits (the same flavors and resources)."""
    raw = obj.to_dict()
    spec = raw.get("spec") or {}
    for g in spec.get("resourceGroups") or []:
        for fq in g.get("flavors") or []:
            for r in fq.get("resources") or []:
                r["nominalQuota"] = "0"
                r.pop("borrowingLimit", None)
                r.pop("lendingLimit", None)
    spec.pop("fairSharing", None)
    return type(obj).model_validate(raw)


def refusal_message(e: BaseException) -> str:
    """A refusal of data in one line: the ledger's own (already one clear line), or the database's
    words (``numeric field overflow``) without SQL or parameters."""
    from queueing.ledger.repository import LedgerError

    if isinstance(e, LedgerError):
        return str(e)
    orig = getattr(e, "orig", None)
    text = str(orig if orig is not None else e).strip().splitlines()
    first = text[0] if text else type(e).__name__
    for cut in ("[SQL:", "(Background on this error"):
        first = first.split(cut, 1)[0].strip()
    return first or short_reason(e)


# ------------------------------------------------------------------ the scheduling cycle
def isolate_cycle(
    run: Callable[[Sequence[T] | None], Any],
    pending: Callable[[], Sequence[T]],
    key: Callable[[T], str],
) -> tuple[Any, dict[str, str]]:
    """``run(None)`` (the cycle over everything pending, as prepared); when it raises (anything but
    ``VerifyError``), find the workloads of ``pending()`` that make it fail — bisection, ``run(subset)``
    on halves — and run it once more without them. Returns (the result, workload key -> why it was left
    out). With nothing that fails alone, the error is not about one workload's data and is raised."""
    try:
        return run(None), {}
    except VerifyError:
        raise
    except Exception as first:
        error: Exception = first
    items = list(pending())
    bad: dict[str, str] = {}

    def fails(subset: Sequence[T]) -> Exception | None:
        try:
            run(subset)
        except VerifyError:
            raise
        except Exception as e:
            return e
        return None

    def bisect(subset: Sequence[T], e: Exception) -> None:
        if len(subset) == 1:
            bad[key(subset[0])] = f"evaluating this workload failed: {type(e).__name__}: {_one_line(e)}"
            return
        mid = len(subset) // 2
        for half in (subset[:mid], subset[mid:]):
            he = fails(half)
            if he is not None:
                bisect(half, he)

    if items and fails(items) is not None:
        bisect(items, error)
    if not bad:
        raise error
    return run([p for p in items if key(p) not in bad]), bad


def _one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return (lines[0] if lines else "")[:300]


# ------------------------------------------------------------------ ledger outage
@dataclass
class OutageLog:
    """A ledger outage logged twice: one line on entry, one on recovery with a summary of the retries —
    never a traceback per try. Any other failure of a sync is logged with its traceback once per
    distinct error, then one line a minute while it repeats."""

    logger: logging.Logger = field(default_factory=lambda: log)
    repeat_every: float = 60.0
    clock: Callable[[], float] = time.monotonic
    since: float | None = None  # the outage's start (None: the ledger answers)
    retries: int = 0
    first_error: str = ""
    _last_error: tuple[str, str] | None = None
    _last_logged: float = 0.0
    _repeats: int = 0

    @property
    def in_outage(self) -> bool:
        return self.since is not None

    def failed(self, e: BaseException) -> bool:
        """Log a failed sync; True when it is a ledger outage."""
        if is_outage(e):
            if self.since is None:
                self.since = self.clock()
                self.retries = 0
                self.first_error = short_reason(e)
                self.logger.warning(
                    "ledger unreachable (%s): admission paused for every queue; retrying", self.first_error
                )
            else:
                self.retries += 1
            return True
        sig = (type(e).__name__, _one_line(e))
        now = self.clock()
        if sig != self._last_error:
            self._last_error, self._last_logged, self._repeats = sig, now, 0
            self.logger.error("sync failed; retrying", exc_info=e)
        else:
            self._repeats += 1
            if now - self._last_logged >= self.repeat_every:
                self.logger.error("sync still failing: %s: %s (%d more times)", sig[0], sig[1], self._repeats)
                self._last_logged, self._repeats = now, 0
        return False

    def succeeded(self) -> None:
        """A sync completed: an outage in progress is over."""
        self._last_error = None
        if self.since is None:
            return
        took = self.clock() - self.since
        self.logger.warning(
            "ledger reachable again after %.1fs (%s; %d retries); admission resumed",
            took,
            self.first_error,
            self.retries,
        )
        self.since = None
        self.retries = 0
