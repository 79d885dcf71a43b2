"""Queue objects: the ledger's copies of the ClusterQueues, LocalQueues and Cohorts, their status
(at most once per period), a Warning Event on those the model rejects, and the resource-in-use
finalizer of those being deleted (controller/in_use.py)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from typing import Any

from queueing.api.v1beta1 import (
    RESOURCE_IN_USE_FINALIZER,
    TERMINATING,
    ClusterQueue,
    Cohort,
    LocalQueue,
    ResourceFlavor,
)
from queueing.controller.admission import AdmissionExecutor
from queueing.controller.base import (
    _status_dict,
)
from queueing.controller.in_use import ObjectKey, holders_message, used_by
from queueing.controller.isolation import invalid_cluster_queues, invalid_status, refusal_message
from queueing.controller.plan import with_condition
from queueing.controller.queues import queue_statuses
from queueing.dra.verify import VerifyError
from queueing.kube.client import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    Resource,
)
from queueing.kube.writes import describe_error, each, is_invalid, is_not_found, retrying
from queueing.ledger.errors import is_data_error
from queueing.ledger.quota import quota_specs
from queueing.ledger.state import ClusterQueueSpec as LedgerClusterQueue
from queueing.ledger.state import CohortSpec as LedgerCohort
from queueing.ledger.state import LocalQueueSpec as LedgerLocalQueue
from queueing.ledger.state import QuotaSpec
from queueing.scheduling.from_api import (
    queue_specs,
)
from queueing.scheduling.quota import cohort_cycles

log = logging.getLogger("queueing.controller")


class QueueSync(AdmissionExecutor):
    async def _report_invalid_queues(self) -> None:
        """A ClusterQueue, Cohort, LocalQueue or ResourceFlavor that the API holds but the model rejects is
        left out, as if absent: a Warning Event on it names the field. A Cohort on a parent cycle gets one
        too (its ClusterQueues say it in their Active condition). Once per message."""
        for informer in (self.cluster_queues, self.cohorts, self.local_queues, self.flavors):
            for ref, msg in informer.invalid_objects():
                await self.events.emit(ref, "Warning", f"Invalid{ref.kind or 'Object'}", msg)
        cohorts = {c.name: c for c in queue_specs(self.cohorts.list()).cohorts}
        for name, cycle in cohort_cycles(cohorts).items():
            obj = self.cohorts.get(name)
            if obj is not None:
                why = f"Cohort {name} is on a parent cycle: {cycle}; its ClusterQueues are inactive"
                await self.events.emit(obj, "Warning", "CohortCycle", why)

    async def _sync_ledger_queues(self) -> None:
        now = self.clock()
        await self._sync_ledger_cohorts(now)
        for cq in self.cluster_queues.list():
            spec = LedgerClusterQueue(
                cq.name,
                tuple(
                    QuotaSpec(fq.name, r.name, r.nominal_quota, r.borrowing_limit, r.lending_limit)
                    for g in cq.spec.resource_groups or []
                    for fq in g.flavors
                    for r in fq.resources
                ),
                cohort=cq.spec.cohort_name or None,
                **(
                    {"fair_sharing_weight": cq.spec.fair_sharing.weight}
                    if cq.spec.fair_sharing is not None and cq.spec.fair_sharing.weight is not None
                    else {}
                ),
            )
            if self._ledger_cqs.get(cq.name) != spec:
                # isolation: data the ledger refuses stays with this ClusterQueue (inactive)
                write = functools.partial(self.ledger.upsert_cluster_queue, spec, at=now)
                await self.quarantine.store(cq, write)
                self._ledger_cqs[cq.name] = spec
        self.quarantine.forget_missing("ClusterQueue", (cq.name for cq in self.cluster_queues.list()))
        for lq in self.local_queues.list():
            lspec = LedgerLocalQueue(lq.namespace or "default", lq.name, lq.spec.cluster_queue)
            key = (lspec.namespace, lspec.name)
            if self._ledger_lqs.get(key) != lspec:
                try:
                    await self.ledger.upsert_local_queue(lspec, at=now)
                except Exception as e:  # isolation: its Jobs then wait with the ledger's refusal
                    if not is_data_error(e):
                        raise
                    log.warning("the ledger cannot store LocalQueue %s: %s", lq.key, refusal_message(e))
                self._ledger_lqs[key] = lspec

    async def _sync_ledger_cohorts(self, now: float) -> None:
        """The Cohorts (parent, own quota) as the core sees them, in the ledger: its quota check is the
        core's model over the whole tree. A cohort the ledger holds without a Cohort object (deleted)
        is written back as implicit: no parent, no quota of its own."""
        want = {
            c.name: LedgerCohort(c.name, c.parent, quota_specs(c.quotas()))
            for c in queue_specs(self.cohorts.list()).cohorts
        }
        if not self._ledger_cqs:  # the first sync after start() or resync(): compare with the ledger
            self._ledger_cohorts = await self.ledger.cohorts()
        for name in self._ledger_cohorts.keys() - want.keys():
            want[name] = LedgerCohort(name)
        self.quarantine.forget_missing("Cohort", (c.name for c in self.cohorts.list()))
        for name, spec in sorted(want.items()):
            if self._ledger_cohorts.get(name) != spec:
                obj = self.cohorts.get(name)
                write = functools.partial(self.ledger.upsert_cohort, spec, at=now)
                # isolation: data the ledger refuses stays with this Cohort (its ClusterQueues inactive)
                await (write() if obj is None else self.quarantine.store(obj, write))
                self._ledger_cohorts[name] = spec

    async def _hold_all_in_use(self) -> None:
        """At the start of leading: every queue object the recovered admissions use carries the
        resource-in-use finalizer (admissions made before it existed, or by an older version)."""
        used = used_by(self.admitted.values(), self.cluster_queues.list(), self.cohorts.list())
        for key in sorted(used):
            await self._hold(key)  # (one being deleted already is left as it is)

    async def _release_in_use(self) -> None:
        """Queue objects being deleted that carry the resource-in-use finalizer: removed once no admitted
        workload uses them (the API server then deletes them); until then their status names the
        workloads that hold them (ClusterQueue, LocalQueue: ``Active=False Terminating``, written with
        the rest of their status; ResourceFlavor, Cohort: ``Terminating=True ResourceInUse``)."""
        if self.verify:  # the index kept by deltas against a scan of every queue object
            scan = {
                (o.kind or type(o).KIND, o.key)
                for i in (self.cluster_queues, self.local_queues, self.flavors, self.cohorts)
                for o in i.list()
                if o.metadata.deletion_timestamp
            }
            kept = {
                k
                for k in self._deleting
                if k[0] in ("ClusterQueue", "LocalQueue", "ResourceFlavor", "Cohort")
            }
            if kept != scan:
                raise VerifyError("queue objects being deleted", sorted(kept), sorted(scan), "kept by deltas")
        used: dict[ObjectKey, list[str]] | None = None
        terminating: dict[ObjectKey, str] = {}
        for kind, informer in (
            ("ClusterQueue", self.cluster_queues),
            ("LocalQueue", self.local_queues),
            ("ResourceFlavor", self.flavors),
            ("Cohort", self.cohorts),
        ):
            objs: list[Any] = [
                o
                for k in sorted(key for kd, key in self._deleting if kd == kind)
                if (o := informer.get_key(k)) is not None
            ]
            objs += [ref for ref, _ in informer.invalid_objects() if ref.metadata.deletion_timestamp]
            for obj in objs:
                if not obj.metadata.deletion_timestamp or RESOURCE_IN_USE_FINALIZER not in (
                    obj.metadata.finalizers or []
                ):
                    continue
                if used is None:
                    used = used_by(self.admitted.values(), self.cluster_queues.list(), self.cohorts.list())
                key: ObjectKey = (kind, obj.key if kind == "LocalQueue" else obj.name)
                holders = used.get(key)
                _, res, name, ns = self._queue_object(key)
                if holders:
                    msg = holders_message(kind, key[1], holders)
                    terminating[key] = msg
                    if kind in ("ResourceFlavor", "Cohort") and isinstance(obj, ResourceFlavor | Cohort):
                        await self._terminating_condition(obj, res, msg)
                    continue
                try:
                    raw = await retrying(
                        lambda informer=informer, res=res, name=name, ns=ns: self._finalizers_patch(  # type: ignore[misc]
                            informer, res, name, ns, add=False
                        ),
                        what=f"finalizer of {kind} {key[1]}",
                    )
                except Exception as e:
                    if is_not_found(e):
                        continue
                    if not is_invalid(e):
                        raise
                    log.warning("%s %s: finalizer not removed: %s", kind, key[1], describe_error(e))
                    continue
                log.info("%s %s: no admitted workload uses it any more; its deletion goes on", kind, key[1])
                informer.observe(raw)
        self._terminating = terminating

    async def _terminating_condition(self, obj: ResourceFlavor | Cohort, res: Resource, msg: str) -> None:
        cur = obj.status.conditions or []
        if any(c.type == TERMINATING and c.status == "True" and c.message == msg for c in cur):
            return
        conds = with_condition(cur, TERMINATING, "True", "ResourceInUse", msg, self.clock())
        try:
            raw = await self._patch(
                res,
                obj.name,
                {"status": {"conditions": [c.to_dict() for c in conds]}},
                subresource="status",
                what=f"status of {obj.kind or type(obj).KIND} {obj.name}",
            )
        except Exception as e:
            if is_not_found(e):
                return
            raise
        (self.flavors if isinstance(obj, ResourceFlavor) else self.cohorts).observe(raw)

    def _pending_by_local_queue(self) -> dict[str, int]:
        """Pending Workloads per LocalQueue (``namespace/name``), counted from the pending set kept by
        deltas (brought in step first: the same refresh the next cycle would make), not from a pass
        over every Workload the informer holds (finished ones included). Verify mode counts that pass
        too and fails on a difference."""
        counts = Counter(wl.local_queue_key for wl in self._refresh_pending().objects.values())
        if self.verify:
            general = Counter(
                wl.local_queue_key for wl in self.workloads.list() if self._pending_eligible(wl)
            )
            if counts != general:
                raise VerifyError("pending Workloads per LocalQueue", counts, general, "kept by deltas")
        return dict(counts)

    async def _queue_status(self) -> None:
        wait = self._queue_status_at + self.queue_status_period - time.monotonic()
        if wait > 0:
            if self._queue_status_handle is None:

                def fire() -> None:
                    self._queue_status_handle = None
                    self._wake.set()

                self._queue_status_handle = asyncio.get_running_loop().call_later(wait, fire)
            return
        pending_by_lq = self._pending_by_local_queue()
        cq_status, lq_status = queue_statuses(
            self.cluster_queues.list(),
            self.local_queues.list(),
            list(self.admitted.values()),
            pending_by_lq,
            self.inactive_cluster_queues,
            self.clock(),
            self._terminating,
        )

        # isolation: a ClusterQueue the model rejects says so in its status (once per message)
        invalid_cqs = invalid_cluster_queues(self.cluster_queues.invalid_objects())
        for name in self._invalid_status.keys() - invalid_cqs.keys():
            del self._invalid_status[name]
        for name, why in invalid_cqs.items():
            if self._invalid_status.get(name) != why:
                try:
                    await self._patch(
                        CLUSTER_QUEUES,
                        name,
                        {"status": invalid_status(why, self.clock())},
                        subresource="status",
                        what=f"status of ClusterQueue {name}",
                    )
                except Exception as e:
                    if is_invalid(e):  # its own spec breaks the CRD's rules: the Warning Event says why
                        log.warning("ClusterQueue %s: status not written: %s", name, describe_error(e))
                    elif not is_not_found(e):
                        raise
                self._invalid_status[name] = why

        # the writes side by side (one queue's status never waits for another's)
        async def write_cq(cq: ClusterQueue) -> None:
            raw = await self._patch(
                CLUSTER_QUEUES,
                cq.name,
                {"status": cq_status[cq.name]},
                subresource="status",
                what=f"status of ClusterQueue {cq.name}",
            )
            self.cluster_queues.observe(raw)
            self._queue_status_at = time.monotonic()

        async def write_lq(lq: LocalQueue) -> None:
            raw = await self._patch(
                LOCAL_QUEUES,
                lq.name,
                {"status": lq_status[lq.key]},
                lq.namespace,
                subresource="status",
                what=f"status of LocalQueue {lq.key}",
            )
            self.local_queues.observe(raw)
            self._queue_status_at = time.monotonic()

        cqs = [
            cq
            for cq in self.cluster_queues.list()
            if (want := cq_status.get(cq.name)) is not None and want != _status_dict(cq)
        ]
        lqs = [
            lq
            for lq in self.local_queues.list()
            if (want := lq_status.get(lq.key)) is not None and want != _status_dict(lq)
        ]
        await each(cqs, write_cq, limit=self.write_concurrency)
        await each(lqs, write_lq, limit=self.write_concurrency)
