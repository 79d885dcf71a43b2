"""The scheduling cycle and the admission executor: the pending set (kept by deltas) and the cluster
cache's placer go into one cycle; its admissions are committed ledger first (one transaction), then
the Workloads' statuses; its preemptions start evictions; pending Workloads get their reasons (only
those that changed)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
import time
from typing import Any

from queueing.api.v1beta1 import (
    ADMITTED,
    EVICTED,
    FINISHED,
    PODS_READY,
    PREEMPTED,
    QUOTA_RESERVED,
    RESOURCE_IN_USE_FINALIZER,
    Admission,
    Condition,
    Workload,
)
from queueing.cache.reasons import pending_groups
from queueing.cache.workloads import PendingWorkloads
from queueing.controller import evict as ev
from queueing.controller.base import (
    REASON_MAX,
    _dump,
    _epoch,
    log,
)
from queueing.controller.eviction import Eviction
from queueing.controller.in_use import ObjectKey, terminating_cluster_queues, uses
from queueing.controller.isolation import (
    invalid_cluster_queues,
    isolate_cycle,
    refusal_message,
    with_placeholders,
)
from queueing.controller.plan import (
    DeviceIndex,
    admission_json,
    ledger_request,
    plan_summary,
    with_condition,
)
from queueing.dra.verify import VerifyError
from queueing.faults import fault_point
from queueing.gcpolicy import paused
from queueing.kube.client import (
    CLUSTER_QUEUES,
    COHORTS,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    ApiException,
    Resource,
)
from queueing.kube.informer import Informer
from queueing.kube.writes import describe_error, each, is_conflict, is_invalid, is_not_found, retrying
from queueing.ledger.errors import is_data_error
from queueing.ledger.reconcile import status_diverges
from queueing.ledger.repository import AlreadyAdmitted
from queueing.scheduling.backlog import Backlog
from queueing.scheduling.cycle import Admission as CycleAdmission
from queueing.scheduling.cycle import PendingReason, inactive_cluster_queues, run_cycle
from queueing.scheduling.dra_placer import DraPlacer
from queueing.scheduling.fairshare import weighted_shares
from queueing.scheduling.from_api import (
    ApiContext,
    admission_status,
    queue_specs,
    workload_info,
)
from queueing.scheduling.preemption import PlanMemo
from queueing.scheduling.snapshot import AdmittedWorkload, ClusterSnapshot, WorkloadInfo


class AdmissionExecutor(Eviction):
    def _pending_eligible(self, wl: Workload) -> bool:
        """Whether the cycle considers the Workload: not admitted (by the controller's record), not
        finished or being deleted, and not holding quota elsewhere (revoked at start if the ledger
        does not know it)."""
        return not (
            (wl.metadata.uid or "") in self.admitted
            or wl.metadata.deletion_timestamp
            or wl.status.is_true(FINISHED)
            or wl.status.is_true(QUOTA_RESERVED)
        )

    def _workload_info(self, wl: Workload, ctx: ApiContext) -> WorkloadInfo:
        rs = wl.status.requeue_state
        backoff = _epoch(rs.requeue_at) if rs is not None and rs.requeue_at else None
        if backoff is not None and backoff > self.clock():
            self._wake_at(backoff)
        return workload_info(
            wl,
            ctx,
            creation_time=_epoch(wl.metadata.creation_timestamp),
            backoff_until=backoff or None,
        )

    def _refresh_pending(self) -> PendingWorkloads:
        """The pending set in step with the deltas since the last cycle (see PendingWorkloads)."""
        self._note_admitted()
        ctx = self._context()
        changed = self.pending.refresh(
            self.workloads.get_key,
            self.workloads.list,
            self._pending_eligible,
            functools.partial(self._workload_info, ctx=ctx),
        )
        for key in changed:
            self.reasons.forget(key)  # compared with the Workload as it is now (_set_pending)
        self._reactivated.extend(changed)  # spec.active true again: Requeued (_reactivate)
        return self.pending

    # dashboard: the pending workloads as the last cycle saw them, and key -> why invalid (read-only)
    def pending_infos(self) -> tuple[list[WorkloadInfo], dict[str, str]]:
        return list(self.pending.backlog), dict(self.pending.invalid)

    def _queue_specs(self) -> Any:
        if self._specs is None:
            self._specs = queue_specs(
                [
                    *self.flavors.list(),
                    *self.topologies.list(),
                    *self.cluster_queues.list(),
                    *self.cohorts.list(),
                    *self.local_queues.list(),
                    *self.namespaces.list(),
                ]
            )
        return self._specs

    async def _schedule(self) -> None:
        pw = self._refresh_pending()
        if self._reactivated:
            keys, self._reactivated = self._reactivated, []
            if await self._reactivate(keys):  # their new versions, before any reason is written
                pw = self._refresh_pending()
                self._reactivated.clear()
        by_key, invalid = pw.objects, pw.invalid
        specs = self._queue_specs()
        # isolation: a queue object the ledger refused is scheduled as last accepted, and inactive; a
        # ClusterQueue the model rejects is inactive too (an empty placeholder)
        refused = {
            **invalid_cluster_queues(self.cluster_queues.invalid_objects()),
            **self.quarantine.inactive(self.cluster_queues.list(), self.cohorts.list()),
            # a ClusterQueue being deleted, or one whose flavor or Cohort is, admits nothing new
            **(
                terminating_cluster_queues(
                    self.cluster_queues.list(), self.cohorts.list(), self.flavors.list()
                )
                if self._deleting
                else {}
            ),
        }
        if refused:  # (rare: the specs are built again without the memo)
            specs = with_placeholders(
                queue_specs(
                    [
                        *self.flavors.list(),
                        *self.quarantine.for_cycle(self.cluster_queues.list()),
                        *self.quarantine.for_cycle(self.cohorts.list()),
                        *self.local_queues.list(),
                        *self.namespaces.list(),
                    ]
                ),
                refused,
            )
        for key, msg in list(invalid.items()):
            self._reasons_todo[key] = PendingReason(None, "Inadmissible", msg)
        draining = any(q.stop_policy == "HoldAndDrain" for q in specs.cluster_queues) or any(
            q.stop_policy == "HoldAndDrain" for q in specs.local_queues
        )
        if not len(pw.backlog) and not (draining and self.admitted):
            # no cycle to run, but a queue on a cohort cycle, stopped or missing a flavor is inactive all
            # the same
            self.inactive_cluster_queues = inactive_cluster_queues(
                ClusterSnapshot(
                    cluster_queues=specs.cluster_queues,
                    cohorts=specs.cohorts,
                    flavors=specs.flavors,
                    inactive=refused,
                )
            )
            self._pending_metrics({}, by_key)
            return
        admitted = tuple(self._as_admitted(uid, a) for uid, a in self.admitted.items())
        now = self.clock()
        snapshot = ClusterSnapshot(
            cluster_queues=specs.cluster_queues,
            cohorts=specs.cohorts,
            local_queues=specs.local_queues,
            flavors=specs.flavors,
            backlog=pw.prepare(now),
            admitted=admitted,
            # a preemptor whose plan was carried out goes first (read from the Workload, so that it
            # holds across a restart)
            nominated=frozenset(pw.nominated),
            namespaces=specs.namespaces,
            local_queue_usage=self.lq_usage,
            cluster_queue_usage=self.cq_usage,
            inactive=refused,
        )
        placer = self._placer()
        if self.cache.changes != self._memo_changes:
            # the preemption questions that failed hold for the placer as it was (the rest of the
            # memo is checked against the queue objects by identity)
            self._memo.plans = PlanMemo()
            self._memo_changes = self.cache.changes
        t0 = time.perf_counter()
        scheduling = self.config.scheduling()
        if self.verify:
            scheduling = scheduling.model_copy(update={"verify": True})
        # isolation: a workload whose evaluation raises is left out (with its reason), the rest go on
        with paused():  # no automatic collection walks the long-lived state during the cycle (gcpolicy)
            result, failed = isolate_cycle(
                lambda some: run_cycle(
                    snapshot
                    if some is None
                    else dataclasses.replace(snapshot, backlog=Backlog(some, released=now)),
                    placer,
                    now,
                    scheduling,
                    memo=self._memo,
                ),
                lambda: list(snapshot.backlog or ()),
                lambda w: w.key,
            )
        spent = time.perf_counter() - t0
        for key, why in failed.items():
            self._reasons_todo[key] = PendingReason(None, "Inadmissible", why)
        self.stats.cycles += 1
        if len(pw.backlog):
            self.metrics.admission_attempt("success" if result.admissions else "inadmissible", spent)
            self.metrics.allocator(spent, allocated=bool(result.admissions or result.preemptions))
        self.inactive_cluster_queues = dict(result.inactive_cluster_queues)
        for cq_name, share in weighted_shares(
            snapshot.cluster_queues, snapshot.cohorts, snapshot.admitted
        ).items():
            self.metrics.set_weighted_share(cq_name, share)
        for store, pens in (
            (self.lq_usage, result.local_queue_penalties),
            (self.cq_usage, result.cluster_queue_penalties),
        ):
            for k, pen in pens.items():
                u = store.setdefault(k, {})
                for r, v in pen.items():
                    u[r] = u.get(r, 0.0) + v
        if not self.may_act():
            log.warning("not the leader any more: the cycle's decisions are dropped")
            return
        devices = DeviceIndex(self.slices.list())
        await self._admit_all(
            [(wl, adm) for adm in result.admissions if (wl := by_key.get(adm.key)) is not None], now, devices
        )
        admitted_by_key = {a.key: uid for uid, a in self.admitted.items()}
        by_uid = self._workload_by_uid
        for plan in result.preemptions:
            wl = by_key.get(plan.preemptor)
            if wl is None:
                continue
            for victim in plan.victims:
                vuid = admitted_by_key.get(victim.key)
                vwl = by_uid(vuid) if vuid else None
                if vuid is None or vwl is None or vuid in self.evicting:
                    continue  # already being evicted (a stuck victim is not evicted twice)
                msg = ev.preemption_message(wl.key, wl.metadata.uid or "", plan.cluster_queue, victim.reason)
                await self._start_eviction(
                    vwl, ev.PREEMPTED, msg, preemptor=wl, preemption_reason=victim.reason
                )
                self.metrics.preempted(plan.cluster_queue, victim.reason)
            await self._set_pending(wl, PendingReason(plan.cluster_queue, "Preempting", plan.message))
        for drain in result.evictions:  # HoldAndDrain
            vuid = admitted_by_key.get(drain.key)
            vwl = by_uid(vuid) if vuid else None
            if vuid is not None and vwl is not None and vuid not in self.evicting:
                await self._start_eviction(vwl, drain.reason, drain.message)
        # the reasons that changed since the last ones reported (compared by groups: a run of
        # workloads shares one reason object), each as written to its workload: written after the
        # admissions' starts (_write_reasons). The rest of a run whose head did not fit has the
        # head's reason: when only its numbers moved (how many more are needed, how many fit), the
        # message it shows stays (as Kueue rewrites only the workloads it tried); a head's is rewritten
        tried = {key for _, key, _ in pending_groups(result.pending) if key is not None}
        for key, reason in self.reasons.changes(result.pending, pw.backlog):
            wl = by_key.get(key)
            if wl is None:
                continue
            mine = reason.for_workload(key)
            if key not in tried and _numbers_moved(wl, mine):
                self._reasons_todo.pop(key, None)
                continue
            self._reasons_todo[key] = mine
        self._pending_metrics(result.pending, by_key)

    def _as_admitted(self, uid: str, a: AdmittedWorkload) -> AdmittedWorkload:
        """How the core sees an admitted workload: a victim being evicted is ``evicting`` (counted as
        going away, never chosen again); a stuck one (past the eviction timeout) holds its resources and
        is shown with the highest priority, so the preemptor's recomputed plan neither counts on it
        nor picks it again (by priority; ``reclaimWithinCohort: Any`` could still name it, and it is
        then waited for)."""
        e = self.evicting.get(uid)
        if e is None:
            return a
        if not e.stuck:
            return dataclasses.replace(a, evicting=True)
        return dataclasses.replace(a, workload=dataclasses.replace(a.workload, priority=2**31 - 1))

    def _placer(self) -> DraPlacer:
        """The cluster cache's placer, with what the controller holds: the claims the placer sees as
        the cluster's own leave out a per-pod claim allocated with devices of an admitted plan (the
        plan holds those devices already; counted twice, evicting its workload would not free them
        for the eviction planner), and include the devices held after a release (``_held_claims``).
        The admissions are the controller's own record, so what it just committed counts at once
        (Kueue's "assume"), before any watch echoes it."""
        self.cache.sync_holds(self.admissions, ev.planned_devices)
        self.cache.set_extra_claims(self._held_claims())
        return self.cache.placer()

    def _pending_metrics(self, pending: Any, by_key: dict[str, Workload]) -> None:
        """Gauges: pending (active / inadmissible) and admitted per ClusterQueue; quota usage.

        Inadmissible as in Kueue's ``pending_workloads``: a workload tried and not admitted waits in
        its ClusterQueue's inadmissible list (``Pending``), as does one in requeue backoff or one its
        queue refuses (``Inadmissible``: a missing or stopped queue, a namespace not selected, an
        invalid Workload); a StrictFIFO queue keeps the workloads that did not fit active (Kueue
        requeues them at once), and so is a preemptor waiting for its victims."""
        cq_of_lq = {lq.key: lq.spec.cluster_queue for lq in self.local_queues.list()}
        counts: dict[str, list[int]] = {cq.name: [0, 0] for cq in self.cluster_queues.list()}
        strict = {cq.name for cq in self.cluster_queues.list() if cq.spec.queueing_strategy == "StrictFIFO"}
        # workload key -> (its reason's ClusterQueue, inadmissible), by groups (no message rendered)
        reason_of: dict[str, tuple[str | None, bool]] = dict.fromkeys(self.pending.invalid, (None, True))
        for ws, one, pr in pending_groups(pending):
            bad = pr.reason in ("Inadmissible", "Deactivated", "Backoff") or (
                pr.reason == "Pending" and pr.cluster_queue not in strict
            )
            keys = [w.key for w in ws] if ws is not None else [one] if one is not None else []
            reason_of.update(dict.fromkeys(keys, (pr.cluster_queue, bad)))
        for key, wl in by_key.items():
            rcq, bad = reason_of.get(key, (None, False))
            cq = rcq or cq_of_lq.get(wl.local_queue_key)
            if cq is None or cq not in counts:
                continue
            counts[cq][1 if bad else 0] += 1
        admitted: dict[str, int] = dict.fromkeys(counts, 0)
        usage: dict[tuple[str, str, str], Any] = {}
        for a in self.admitted.values():
            admitted[a.cluster_queue] = admitted.get(a.cluster_queue, 0) + 1
            for (flavor, resource), amount in a.usage.items():
                k = (a.cluster_queue, flavor, resource)
                usage[k] = usage.get(k, 0) + amount
        for cq, (active, inadmissible) in counts.items():
            self.metrics.set_pending(cq, active=active, inadmissible=inadmissible)
        for cq, n in admitted.items():
            self.metrics.set_admitted_active(cq, n)
        for cq_obj in self.cluster_queues.list():
            name = cq_obj.name
            for g in cq_obj.spec.resource_groups or []:
                for fq in g.flavors:
                    for r in fq.resources:
                        self.metrics.set_nominal_quota(name, fq.name, r.name, r.nominal_quota)
                        self.metrics.set_usage(
                            name, fq.name, r.name, float(usage.get((name, fq.name, r.name), 0))
                        )

    async def _admit_all(
        self, admits: list[tuple[Workload, CycleAdmission]], now: float, devices: DeviceIndex
    ) -> None:
        """Carry out a cycle's admissions, in batches of ``admissions_per_transaction`` in the cycle's
        order (the first Jobs start while the later batches are committed): per batch the ledger
        first, all of it in one transaction (one at a time when the batch is refused, so that a
        refusal stays with its workload), then the Workloads' statuses and the Jobs' starts,
        independent writes run side by side."""
        if not admits or not self.may_act():
            return
        admits = await self._hold_in_use(admits, now)
        n = max(1, self.admissions_per_transaction)
        for i in range(0, len(admits), n):
            if not self.may_act():
                return
            await self._admit_batch(admits[i : i + n], now, devices)

    async def _admit_batch(
        self, admits: list[tuple[Workload, CycleAdmission]], now: float, devices: DeviceIndex
    ) -> None:
        todo = [(wl, adm, admission_status(adm)) for wl, adm in admits]
        self._upstream = None  # the binding decisions of their starts see the cluster as it is now
        reqs = [
            ledger_request(wl.metadata.uid or "", adm, a, self._claim_specs(wl), devices)
            for wl, adm, a in todo
        ]
        for _ in todo:
            fault_point("admission.before_ledger")
        await each([wl for wl, _, _ in todo], self._record, limit=self.write_concurrency)
        if len(todo) > 1:
            try:
                await self.ledger.admit_many(reqs, at=now)
            except Exception as e:  # isolation: one of them is refused (its data, or already admitted):
                if not is_data_error(e):  # each on its own below, the refusal stays with its workload
                    raise
            else:
                for wl, adm, a in todo:
                    self._admitted(wl, adm, a, now)
                await each(
                    todo,
                    lambda t: self._write_admission(t[0], t[2], now, start=True),
                    limit=self.write_concurrency,
                )
                return
        for (wl, adm, a), req in zip(todo, reqs, strict=True):
            await self._admit(wl, adm, a, req, now)

    def _queue_object(self, key: ObjectKey) -> tuple[Informer[Any], Resource, str, str | None]:
        """The informer, API resource, name and namespace of a queue object (see in_use.py)."""
        kind, name = key
        if kind == "LocalQueue":
            ns, _, lq = name.partition("/")
            return self.local_queues, LOCAL_QUEUES, lq, ns
        by_kind: dict[str, tuple[Informer[Any], Resource]] = {
            "ClusterQueue": (self.cluster_queues, CLUSTER_QUEUES),
            "ResourceFlavor": (self.flavors, RESOURCE_FLAVORS),
            "Cohort": (self.cohorts, COHORTS),
        }
        informer, res = by_kind[kind]
        return informer, res, name, None

    async def _hold_in_use(
        self, admits: list[tuple[Workload, CycleAdmission]], now: float
    ) -> list[tuple[Workload, CycleAdmission]]:
        """Before the ledger commits: every queue object an admission uses carries the resource-in-use
        finalizer, so that a deletion from now on waits for the workload. An admission through an
        object being deleted (or that could not get the finalizer) is left pending for the next cycle,
        which sees it terminating."""
        cohort_of = {cq.name: cq.spec.cohort_name or None for cq in self.cluster_queues.list()}
        parent = {c.name: c.spec.parent_name or None for c in self.cohorts.list()}
        held: dict[ObjectKey, bool] = {}
        keep: list[tuple[Workload, CycleAdmission]] = []
        for wl, adm in admits:
            ok = True
            for key in uses(adm.admitted(now), cohort_of, parent):
                if key not in held:
                    held[key] = await self._hold(key)
                ok = ok and held[key]
            if ok:
                keep.append((wl, adm))
            else:
                log.info("%s is not admitted now: a queue object it uses is being deleted", wl.key)
                self._wake.set()
        return keep

    async def _hold(self, key: ObjectKey) -> bool:
        informer, res, name, ns = self._queue_object(key)
        obj = informer.get(name, ns)
        if obj is None:  # an implicit Cohort (no object), or gone since the cycle (nothing to hold)
            return True
        if obj.metadata.deletion_timestamp:
            return False
        if RESOURCE_IN_USE_FINALIZER in (obj.metadata.finalizers or []):
            return True
        try:
            raw = await retrying(
                lambda: self._finalizers_patch(informer, res, name, ns, add=True),
                what=f"finalizer of {key[0]} {key[1]}",
            )
        except Exception as e:
            if not (is_invalid(e) or is_not_found(e) or is_conflict(e)):
                raise
            # changed meanwhile, or being deleted (no finalizer may be added then): the next cycle
            log.info("%s %s: finalizer not added: %s", key[0], key[1], describe_error(e))
            return False
        informer.observe(raw)
        return True

    async def _finalizers_patch(
        self, informer: Informer[Any], res: Resource, name: str, ns: str | None, *, add: bool
    ) -> dict[str, Any]:
        """Add or remove the resource-in-use finalizer, against the object's version as the informer
        holds it now (a conflict is retried after the watch brought the newer one)."""
        obj = informer.get(name, ns)
        if obj is None:
            raise ApiException(status=404, reason="NotFound")
        have = [f for f in obj.metadata.finalizers or [] if f != RESOURCE_IN_USE_FINALIZER]
        want = [*have, RESOURCE_IN_USE_FINALIZER] if add else have
        body = {"metadata": {"finalizers": want or None, "resourceVersion": obj.metadata.resource_version}}
        raw: dict[str, Any] = await self.kube.patch(res, name, body, ns)
        return raw

    async def _admit(
        self, wl: Workload, adm: CycleAdmission, admission: Admission, req: Any, now: float
    ) -> None:
        uid = wl.metadata.uid or ""
        if not self.may_act():
            return
        try:
            await self.ledger.admit(req, at=now)
        except AlreadyAdmitted:
            # the ledger holds an admission this process does not know (a write lost before a
            # restart): the ledger's record is replaced by this cycle's plan
            log.warning("Workload %s was already admitted in the ledger; re-admitting", wl.key)
            await self.ledger.release(uid, at=now, reason="Readmitted", final_state="pending")
            await self.ledger.admit(req, at=now)
        except Exception as e:  # isolation: the ledger or the database refusing this workload's data
            if not is_data_error(e):
                raise
            log.warning("the ledger refused to admit %s: %s", wl.key, refusal_message(e))
            await self._set_pending(
                wl, PendingReason(adm.cluster_queue, "Pending", f"ledger: {refusal_message(e)}")
            )
            return
        self._admitted(wl, adm, admission, now)
        await self._write_admission(wl, admission, now, start=True)

    def _admitted(self, wl: Workload, adm: CycleAdmission, admission: Admission, now: float) -> None:
        """What the controller keeps once the ledger holds an admission."""
        uid = wl.metadata.uid or ""
        self.admitted[uid] = adm.admitted(now)
        self.admissions[uid] = admission
        self.pending_reasons.pop(wl.key, None)
        self.status_todo.add(uid)
        self.stats.admissions += 1
        fault_point("admission.after_ledger")
        # since it was queued, as the ledger has it (its Job's creation, or its last eviction)
        waited = now - self._recorded.get(uid, self._queued_at_of(wl))
        self.metrics.quota_reserved(adm.cluster_queue, waited)
        self.metrics.admitted(adm.cluster_queue, waited)

    def _admission_conditions(
        self, wl: Workload, cq: str, now: float, *, again: bool = True
    ) -> list[Condition]:
        """QuotaReserved and Admitted True (``again``: a requeued workload's Evicted and Preempted
        False)."""
        gen = wl.metadata.generation
        conds = with_condition(
            wl.status.conditions,
            QUOTA_RESERVED,
            "True",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq}",
            now,
            gen,
        )
        conds = with_condition(
            conds, ADMITTED, "True", "Admitted", f"The workload is admitted by ClusterQueue {cq}", now, gen
        )
        if again:  # a new admission (not a repair from the ledger, whose pods may run already)
            # PodsReady (kept true to the pods by the eviction reconciler): its pods start now, in this write
            conds = with_condition(
                conds, PODS_READY, "False", "WaitForStart", "Not all pods are ready or succeeded", now, gen
            )
        for done in (EVICTED, PREEMPTED) if again else ():  # a requeued workload admitted again
            if wl.status.is_true(done):
                conds = with_condition(conds, done, "False", "Admitted", "admitted again", now, gen)
        return conds

    async def _write_admission(
        self, wl: Workload, admission: Admission, now: float, *, start: bool = False
    ) -> None:
        """The admission's Workload status (the ledger holds it already), its Event, and with
        ``start`` its object's start right after (each admission of a batch on its own: a Job
        starts while the others' statuses are still being written)."""
        uid = wl.metadata.uid or ""
        cq = admission.cluster_queue
        conds = self._admission_conditions(wl, cq, now)
        try:
            out = await self._patch_status(
                wl,
                {
                    "conditions": _dump(conds),
                    "admission": admission_json(admission),
                    "reason": None,
                },
            )
        except Exception as e:
            # the ledger holds the admission: keep trying (status_todo) without holding up the others
            log.warning("status of Workload %s not written yet: %s", wl.key, describe_error(e))
            self.stats.errors += 1
            self._retry_later()
            return
        self.status_todo.discard(uid)
        if out is None:  # deleted meanwhile: _forget_deleted releases it
            return
        fault_point("admission.after_status")
        await self.events.emit(
            wl, "Normal", "Admitted", f"Admitted by ClusterQueue {cq}; plan: {plan_summary(admission)}"
        )
        if start and uid not in self.evicting and self.admissions.get(uid) is admission:
            try:
                await self._start_suspended(out, admission)
            except Exception as e:  # the bind step tries again (the others' writes go on)
                log.warning("%s not started yet: %s", wl.key, describe_error(e))
                self._retry_later()

    async def _repair_admission(self, wl: Workload, admission: Admission, why: str) -> None:
        """The Workload's status disagrees with the ledger's open admission: it is rewritten from it
        (``status.admission``, QuotaReserved and Admitted True; an eviction in progress keeps its
        Evicted condition). Recovery repairs, it does not revoke."""
        conds = self._admission_conditions(wl, admission.cluster_queue, self.clock(), again=False)
        out = await self._patch_status(
            wl, {"conditions": _dump(conds), "admission": admission_json(admission), "reason": None}
        )
        self.stats.repaired += 1
        msg = f"status rewritten from the ledger's admission ({why}); plan: {plan_summary(admission)}"
        log.warning("Workload %s: %s", wl.key, msg)
        await self.events.emit(out or wl, "Warning", "StatusRepaired", msg)

    def _diverged(self, uid: str) -> tuple[Workload, Admission, str] | None:
        """An admitted Workload whose status no longer shows the controller's record of its admission
        (the ledger's), with how it differs; None when it agrees (or is not the controller's to
        repair now: its admission status is still being written, it finished, it is being deleted)."""
        wl = self._workload_by_uid(uid)
        adm = self.admissions.get(uid)
        if (
            wl is None
            or adm is None
            or uid not in self.admitted
            or uid in self.status_todo
            or wl.status.is_true(FINISHED)
            or wl.metadata.deletion_timestamp
        ):
            return None
        why = status_diverges(
            admission_json(wl.status.admission),
            wl.status.is_true(QUOTA_RESERVED),
            wl.status.is_true(ADMITTED),
            admission_json(adm) or {},
        )
        return None if why is None else (wl, adm, why)

    async def _repair_statuses(self) -> None:
        """Admitted Workloads whose status changed since the last sync (by their deltas): one that no
        longer shows the ledger's admission gets it written again. Verify mode checks every admitted
        Workload: none diverged without a delta."""
        todo, self._status_check = self._status_check, set()
        if self.verify:
            general = sorted(u for u in self.admitted if self._diverged(u) is not None)
            fast = sorted(u for u in general if u in todo)
            if fast != general:
                raise VerifyError("status repair by Workload deltas", fast, general)
        for uid in sorted(todo):
            found = self._diverged(uid)
            if found is not None:
                await self._repair_admission(*found)

    async def _write_pending_status(self) -> None:
        """Admissions whose status write did not hold yet (the ledger has them): write again."""
        for uid in sorted(self.status_todo):
            wl = self._workload_by_uid(uid)
            adm = self.admissions.get(uid)
            if wl is None or adm is None:
                self.status_todo.discard(uid)
                continue
            await self._write_admission(wl, adm, self.clock())

    async def _write_reasons(self) -> None:
        """The pending reasons the cycles gave (only those that changed), written after the cycle's
        admissions and their starts: at most ``reasons_per_sync`` per sync, oldest first (the rest in
        the next sync, which follows at once), side by side. A Workload admitted, finished or gone
        meanwhile is skipped; one whose write failed keeps its place."""
        todo = self._reasons_todo
        if not todo:
            return
        batch = list(itertools.islice(todo.items(), self.reasons_per_sync))

        async def write(item: tuple[str, PendingReason]) -> None:
            key, reason = item
            wl = self.workloads.get_key(key)
            if wl is not None and self._pending_eligible(wl):
                await self._set_pending(wl, reason)
            if todo.get(key) is reason:
                del todo[key]

        await each(batch, write, limit=self.write_concurrency)
        if todo:
            self._wake.set()

    async def _set_pending(self, wl: Workload, reason: PendingReason) -> None:
        shown, text = _pending_shown(wl, reason)
        if shown == text and wl.status.reason == text[:REASON_MAX]:
            return
        conds = with_condition(
            wl.status.conditions,
            QUOTA_RESERVED,
            "False",
            reason.reason,
            text,
            self.clock(),
            wl.metadata.generation,
        )
        out = await self._patch_status(wl, {"conditions": _dump(conds), "reason": text[:REASON_MAX]})
        if out is None:  # deleted meanwhile: nothing is kept about it (and no Event for a gone object)
            return
        self.pending_reasons[wl.key] = reason
        await self.events.emit(out, "Normal", reason.reason, text)


_NUMBER = re.compile(r"\d+")


def _pending_shown(wl: Workload, reason: PendingReason) -> tuple[str | None, str]:
    """The message the Workload shows for this pending reason (None: it shows another reason, or
    none), and the reason's own message."""
    cur = wl.status.condition(QUOTA_RESERVED)
    text = reason.message or reason.reason
    same = cur is not None and cur.status == "False" and cur.reason == reason.reason
    return (cur.message or "") if cur is not None and same else None, text


def _numbers_moved(wl: Workload, reason: PendingReason) -> bool:
    """The Workload shows this pending reason already but for its numbers (same reason, the same
    words in its message)."""
    shown, text = _pending_shown(wl, reason)
    return shown is not None and shown != text and _NUMBER.sub("#", shown) == _NUMBER.sub("#", text)
