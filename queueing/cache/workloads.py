"""``PendingWorkloads``: the pending Workloads as a scheduling cycle reads them, kept by deltas.

Kueue keeps ``pkg/queue`` for this. The controller hands every change of a Workload to
:meth:`PendingWorkloads.mark` (its key; the Workloads informer's mirror does it), and the keys of
workloads whose admission it took or gave back (its own record changed, not the object). Before a
cycle, :meth:`PendingWorkloads.refresh` looks at the marked keys only: a Workload that is pending
(the caller's ``eligible``) gets its :class:`~queueing.scheduling.snapshot.WorkloadInfo` built once
per version of the object and of the context it reads (``context_changed``: DeviceClasses,
ResourceClaimTemplates, priority classes; a ResourceClaim named by a pod set marks the Workloads
that name it), and stays in one long-lived :class:`~queueing.scheduling.backlog.Backlog`, its runs
kept sorted between cycles; one that is not pending any more leaves it.

What the cycle and the controller read: ``backlog`` (``ClusterSnapshot.backlog``), ``objects``
(key -> the pending Workload), ``invalid`` (key -> why its WorkloadInfo cannot be built), and
``nominated`` (keys whose QuotaReserved condition says Preempting: they go first).

Verify mode (Invariant 6): :meth:`PendingWorkloads.check` builds the same state from scratch from
every Workload and raises :class:`~queueing.dra.verify.VerifyError` on any difference.

Pure: no I/O, no clock (the caller's functions read the objects and build the infos).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from queueing.api.v1beta1 import QUOTA_RESERVED, Workload
from queueing.dra.verify import VerifyError
from queueing.scheduling.backlog import Backlog
from queueing.scheduling.from_api import FromApiError
from queueing.scheduling.snapshot import WorkloadInfo

__all__ = ["PendingWorkloads", "is_preempting", "named_claims"]


def is_preempting(wl: Workload) -> bool:
    """A preemptor whose plan was carried out: its last reason is Preempting (it goes first)."""
    c = wl.status.condition(QUOTA_RESERVED)
    return c is not None and c.status == "False" and c.reason == "Preempting"


def named_claims(wl: Workload) -> set[str]:
    """The ResourceClaims (``namespace/name``) the Workload's pod sets name (their spec is read)."""
    ns = wl.namespace or "default"
    return {
        f"{ns}/{c.resource_claim_name}"
        for ps in wl.spec.pod_sets
        for c in ps.claim_refs()
        if c.resource_claim_name
    }


@dataclass(frozen=True)
class _Entry:
    token: tuple[str | None, int]  # (resourceVersion, context version) it was built for
    workload: Workload
    info: WorkloadInfo | None  # None: invalid
    error: str | None
    preempting: bool
    claims: frozenset[str]


class PendingWorkloads:
    """See the module docstring."""

    def __init__(self, *, verify: bool = False) -> None:
        self.verify = verify
        self.backlog = Backlog()
        self.objects: dict[str, Workload] = {}  # key -> pending Workload (valid or not)
        self.invalid: dict[str, str] = {}  # key -> why it cannot be scheduled
        self.nominated: set[str] = set()
        self.builds = 0  # WorkloadInfos built (for tests and benchmarks)
        self._entries: dict[str, _Entry] = {}
        self._dirty: set[str] = set()
        self._forced: set[str] = set()  # built again even at the same version (a claim they name changed)
        self._all_dirty = True
        self._context = 0
        self._claim_users: dict[str, set[str]] = {}  # claim key -> keys of Workloads naming it

    # ---- deltas -----------------------------------------------------------------------------
    def mark(self, key: str) -> None:
        """The Workload ``key`` changed (or whether the caller holds its admission did)."""
        self._dirty.add(key)

    def mark_all(self) -> None:
        """Look at every Workload again (after a restart of the controller's record)."""
        self._all_dirty = True

    def context_changed(self) -> None:
        """What every WorkloadInfo reads besides its Workload changed (classes, templates, priority
        classes): each is built again at the next refresh."""
        self._context += 1
        self._all_dirty = True

    def claim_changed(self, claim_key: str) -> None:
        """A ResourceClaim (``namespace/name``) changed: the Workloads that name it are built again."""
        for key in self._claim_users.get(claim_key, ()):
            self._dirty.add(key)
            self._forced.add(key)

    # ---- refresh ------------------------------------------------------------------------------
    def refresh(
        self,
        get: Callable[[str], Workload | None],
        every: Callable[[], Iterable[Workload]],
        eligible: Callable[[Workload], bool],
        build: Callable[[Workload], WorkloadInfo],
    ) -> list[str]:
        """Bring the state in step with the marked Workloads: ``get(key)`` reads one (None: gone),
        ``every()`` all (after ``mark_all``), ``eligible`` says whether it is pending, ``build``
        makes its WorkloadInfo (raising :class:`FromApiError` for bad input). Returns the keys that
        left or joined the pending set, or changed in it, in key order."""
        if self._all_dirty:
            self._all_dirty = False
            self._dirty.clear()
            objs = {w.key: w for w in every()}
            keys = sorted(objs.keys() | self._entries.keys())
            lookup: Callable[[str], Workload | None] = objs.get
        else:
            keys = sorted(self._dirty)
            self._dirty.clear()
            lookup = get
        changed: list[str] = []
        for key in keys:
            wl = lookup(key)
            if wl is not None and eligible(wl):
                if self._put(key, wl, build):
                    changed.append(key)
            elif self._drop(key):
                changed.append(key)
        self._forced.clear()
        if self.verify:
            self.check(every(), eligible, build)
        return changed

    def _put(self, key: str, wl: Workload, build: Callable[[Workload], WorkloadInfo]) -> bool:
        token = (wl.metadata.resource_version, self._context)
        old = self._entries.get(key)
        if old is not None and old.token == token and token[0] is not None and key not in self._forced:
            self.objects[key] = wl  # the same version (a re-list): the same info
            return False
        entry = self._entry(wl, token, build)
        self._drop(key)
        self._entries[key] = entry
        self.objects[key] = wl
        if entry.info is not None:
            self.backlog.add(entry.info)
        else:
            assert entry.error is not None
            self.invalid[key] = entry.error
        if entry.preempting:
            self.nominated.add(key)
        for c in entry.claims:
            self._claim_users.setdefault(c, set()).add(key)
        return True

    def _entry(
        self, wl: Workload, token: tuple[str | None, int], build: Callable[[Workload], WorkloadInfo]
    ) -> _Entry:
        self.builds += 1
        try:
            info: WorkloadInfo | None = build(wl)
            error = None
        except FromApiError as e:
            info, error = None, str(e)
        return _Entry(token, wl, info, error, is_preempting(wl), frozenset(named_claims(wl)))

    def _drop(self, key: str) -> bool:
        old = self._entries.pop(key, None)
        if old is None:
            return False
        self.objects.pop(key, None)
        self.invalid.pop(key, None)
        self.nominated.discard(key)
        self.backlog.remove(key)
        for c in old.claims:
            users = self._claim_users.get(c)
            if users is not None:
                users.discard(key)
                if not users:
                    del self._claim_users[c]
        return True

    def prepare(self, now: float) -> Backlog:
        """The backlog for a cycle at ``now``: backoffs over by then released. A clock that went
        back (a test's, or after a restart) gets the backlog sorted again from its workloads."""
        if now < self.backlog.released:
            self.backlog = Backlog(list(self.backlog), released=now)
        else:
            self.backlog.release(now)
        return self.backlog

    # ---- verify mode --------------------------------------------------------------------------
    def check(
        self,
        workloads: Iterable[Workload],
        eligible: Callable[[Workload], bool],
        build: Callable[[Workload], WorkloadInfo],
    ) -> None:
        """Build the pending state from scratch from ``workloads`` and compare (verify mode)."""
        infos: dict[str, WorkloadInfo] = {}
        invalid: dict[str, str] = {}
        nominated: set[str] = set()
        for wl in workloads:
            if not eligible(wl):
                continue
            try:
                infos[wl.key] = build(wl)
            except FromApiError as e:
                invalid[wl.key] = str(e)
            if is_preempting(wl):
                nominated.add(wl.key)
        have = {w.key: w for w in self.backlog}
        for what, fast, general in (
            ("pending workloads", have, infos),
            ("invalid workloads", self.invalid, invalid),
            ("nominated workloads", self.nominated, nominated),
            ("pending objects", set(self.objects), infos.keys() | invalid.keys()),
        ):
            if fast != general:
                raise VerifyError(f"PendingWorkloads ({what})", *_diff(fast, general), "kept by deltas")
        scratch = Backlog(infos.values(), released=self.backlog.released)
        runs = {q: {s: [w.key for w in r] for s, r in rs.items()} for q, rs in self.backlog.queues.items()}
        want = {q: {s: [w.key for w in r] for s, r in rs.items()} for q, rs in scratch.queues.items()}
        if runs != want or set(self.backlog.held) != set(scratch.held):
            raise VerifyError("PendingWorkloads (backlog runs)", runs, want, "kept by deltas")


def _diff(fast: object, general: object) -> tuple[object, object]:
    """The entries that differ (at most five), as (fast, general)."""
    if isinstance(fast, dict) and isinstance(general, dict):
        keys = sorted(k for k in fast.keys() | general.keys() if fast.get(k) != general.get(k))[:5]
        return {k: fast.get(k) for k in keys}, {k: general.get(k) for k in keys}
    if isinstance(fast, set) and isinstance(general, set):
        return sorted(fast - general)[:5], sorted(general - fast)[:5]
    return fast, general
