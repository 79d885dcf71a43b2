"""Eviction (the steps are in queueing/controller/evict.py): the ledger records its start, the
Workload says Evicted, the pods are stopped; once they and their claims are gone the ledger
releases the quota and the Workload is requeued (with backoff after a PodsReady timeout). Admitted
Workloads are watched for lost nodes, NoExecute-tainted devices and the PodsReady timeout."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from queueing.api.core import Pod
from queueing.api.resource import (
    ResourceClaim,
)
from queueing.api.v1beta1 import (
    ADMITTED,
    EVICTED,
    FINISHED,
    POD_GROUP_LABEL,
    PODS_READY,
    PREEMPTED,
    QUOTA_RESERVED,
    REQUEUED,
    Admission,
    Workload,
)
from queueing.controller import evict as ev
from queueing.controller.base import (
    _dump,
    _epoch,
    _pod_ready,
    _tainted_devices,
    log,
)
from queueing.controller.evict import Evicting
from queueing.controller.plan import (
    fmt_time,
    with_condition,
)
from queueing.controller.source import WorkloadSource
from queueing.faults import fault_point
from queueing.integrations.pod_kinds import kind_of
from queueing.integrations.podgated import gated
from queueing.integrations.podgroup import ended as _ended
from queueing.kube.client import (
    PODS,
    RESOURCE_CLAIMS,
    WORKLOADS,
)
from queueing.kube.writes import is_not_found, retrying
from queueing.ledger.repository import NotAdmitted
from queueing.scheduling.requeue import next_requeue

# pods by Workload UID label, and by (namespace, pod group)
PodIndex = tuple[Callable[[Workload], list[Pod]], dict[tuple[str, str], list[Pod]]]


class Eviction(WorkloadSource):
    def _evicting_from(self, wl: Workload) -> Evicting:
        c = wl.status.condition(EVICTED)
        reason = c.reason if c is not None else ev.PREEMPTED
        message = c.message if c is not None else ""
        started = _epoch(c.last_transition_time) if c is not None else self.clock()
        return Evicting(
            wl.metadata.uid or "",
            wl.key,
            reason,
            message,
            started or self.clock(),
            ev.preemptor_uid_of(message),
        )

    async def _revoke(self, wl: Workload, why: str) -> None:
        now = self.clock()
        conds = with_condition(wl.status.conditions, QUOTA_RESERVED, "False", "Revoked", why, now)
        conds = with_condition(conds, ADMITTED, "False", "Revoked", why, now)
        await self._patch_status(wl, {"conditions": _dump(conds), "admission": None, "reason": "Revoked"})
        job = self._source_of(wl)
        if job is not None and not job.is_suspended():
            await self._suspend(job, f"admission revoked: {why}")

    async def _mark_evicted(
        self, wl: Workload, reason: str, message: str, preemption_reason: str | None = None
    ) -> Workload | None:
        """The Workload says Evicted (and Preempted, for a preemption): what users see."""
        now = self.clock()
        gen = wl.metadata.generation
        conds = with_condition(wl.status.conditions, EVICTED, "True", reason, message, now, gen)
        if preemption_reason is not None:
            conds = with_condition(conds, PREEMPTED, "True", preemption_reason, message, now, gen)
        return await self._patch_status(wl, {"conditions": _dump(conds)})

    async def _start_eviction(
        self,
        wl: Workload,
        reason: str,
        message: str,
        *,
        preemptor: Workload | None = None,
        preemption_reason: str | None = None,
    ) -> None:
        """Step 1: the Workload says Evicted (durable: a restart resumes from it); then stop its pods."""
        uid = wl.metadata.uid or ""
        if uid in self.evicting or uid not in self.admitted or not self.may_act():
            return
        now = self.clock()
        preemptor_uid = preemptor.metadata.uid if preemptor is not None else None
        # the ledger first: a restart resumes an eviction it recorded, even if the status write was lost
        try:
            await self.ledger.begin_eviction(
                uid, at=now, reason=reason, preemptor_uid=preemptor_uid, message=message
            )
        except NotAdmitted:
            return  # released meanwhile (finished): nothing to evict
        fault_point("eviction.after_ledger_start")
        out = await self._mark_evicted(wl, reason, message, preemption_reason)
        self.evicting[uid] = Evicting(uid, wl.key, reason, message, now, preemptor_uid)
        fault_point("eviction.after_mark")
        self.metrics.evicted(self.admitted[uid].cluster_queue, reason)
        log.info("evicting %s: %s", wl.key, message)
        await self.events.emit(out or wl, "Normal", "Preempted" if preemption_reason else "Evicted", message)
        await self._stop_pods(out or wl, message)
        fault_point("eviction.after_stop_pods")
        self._wake_at(now + self.eviction_timeout)
        if not any(self._holders(out or wl, self.admissions[uid])):
            self.wake()  # nothing to wait for: no event will come, the next sync goes on with it

    async def _stop_pods(self, wl: Workload, why: str) -> None:
        """Suspend the object held by suspend (its operator deletes its pods: the Job controller, a
        RayJob's or JobSet's) or delete a pod group's pods."""
        job = self._source_of(wl)
        if job is not None:
            if not job.is_suspended() and not job.finished()[0]:
                # (the planned node in the template is replaced at the next admission: the template
                # may only change while the object is suspended)
                await self._suspend(job, f"evicted: {why}")
            return
        group = wl.labels.get(POD_GROUP_LABEL)
        if group:
            pods = [
                p
                for p in self._groups().get((wl.namespace or "default", group), [])
                if not _ended(p)
                and not p.metadata.deletion_timestamp
                # a pod-gated kind's pod still gated was created again by its controller for the next
                # admission: it holds nothing and stays
                and not (gated(p) and kind_of(p) is not None)
            ]
            if pods:
                # the pods own the Workload: keep it until the eviction is recorded (step 4)
                await self._eviction_finalizer(wl, True)
            for p in pods:
                try:
                    await retrying(
                        lambda p=p: self.kube.delete(PODS, p.name, p.namespace),  # type: ignore[misc]
                        what=f"delete Pod {p.key}",
                    )
                except Exception as e:
                    if not is_not_found(e):
                        raise

    async def _eviction_finalizer(self, wl: Workload, on: bool) -> None:
        """Add or remove :data:`ev.EVICTION_FINALIZER` on a Workload (a no-op when already so)."""
        have = list(wl.metadata.finalizers or [])
        if (ev.EVICTION_FINALIZER in have) == on:
            return
        want = [*have, ev.EVICTION_FINALIZER] if on else [f for f in have if f != ev.EVICTION_FINALIZER]
        try:
            raw = await self._patch(
                WORKLOADS,
                wl.name,
                {"metadata": {"finalizers": want or None}},
                wl.namespace,
                what=f"finalizers of Workload {wl.key}",
            )
        except Exception as e:
            if is_not_found(e):
                return
            raise
        self.workloads.observe(raw)

    def _workload_pods(self, wl: Workload, index: PodIndex | None = None) -> list[Pod]:
        """The pods of a Workload: its Job's (:meth:`_pods_by_workload`: every pod of the Job, also those
        of a Workload whose admission this one took over) or its pod group's (``index``:
        :meth:`_pod_index`, for a pass over many Workloads)."""
        index = index or self._pod_index()
        pods = list(index[0](wl))
        group = wl.labels.get(POD_GROUP_LABEL)
        if group and self._source_of(wl) is None:
            pods += index[1].get((wl.namespace or "default", group), ())
        return pods

    def _pod_index(self) -> PodIndex:
        """The pods of each Workload (:meth:`_pods_by_workload`) and by (namespace, pod group)."""
        by_group: dict[tuple[str, str], list[Pod]] = {}
        for p in self.group_pods.list():
            by_group.setdefault((p.namespace or "default", p.labels.get(POD_GROUP_LABEL) or ""), []).append(p)
        return self._pods_by_workload(), by_group

    def _holders(self, wl: Workload, admission: Admission) -> tuple[list[Pod], list[ResourceClaim]]:
        """The victim's pods that still run and the claims that still hold one of its planned devices."""
        live = [
            p for p in self._workload_pods(wl) if not _ended(p) and not gated(p)
        ]  # a gated pod holds nothing
        planned = ev.planned_devices(admission)
        claims = []
        for c in self.claims.list():
            if c.namespace != wl.namespace or c.status.allocation is None:
                continue
            results = c.status.allocation.devices.results or [] if c.status.allocation.devices else []
            if any((r.driver, r.pool, r.device) in planned for r in results):
                claims.append(c)
        return live, claims

    async def _drive_evictions(self) -> None:
        """Step 2 for every eviction in progress; step 3 and 4 for those whose pods and claims are gone."""
        now = self.clock()
        for uid, e in sorted(self.evicting.items()):
            wl = self._workload_by_uid(uid)
            admission = self.admissions.get(uid)
            if wl is None or admission is None:
                self.evicting.pop(uid, None)
                continue
            live, claims = self._holders(wl, admission)
            if live:
                await self._stop_pods(wl, e.message)  # again after a restart or a user's unsuspend
            live_uids = {p.metadata.uid for p in live}
            shared = ev.shared_claims(admission)
            deallocated: set[str] = set()
            for c in claims:
                users = [r for r in c.status.reserved_for or [] if r.get("uid") in live_uids]
                if c.name in shared and not users and not live:
                    # the controller wrote this allocation (plan binding): it takes it back
                    raw = await self._patch(
                        RESOURCE_CLAIMS,
                        c.name,
                        {"status": {"allocation": None, "reservedFor": None}},
                        c.namespace,
                        subresource="status",
                        what=f"deallocate ResourceClaim {c.key}",
                    )
                    self.claims.observe(raw)
                    deallocated.add(c.key)
            # what it took back is gone now (its write's echo wakes nothing): no waiting for it
            claims = [c for c in claims if c.key not in deallocated]
            if live or claims:
                if not e.stuck and now - e.started >= self.eviction_timeout:
                    e.stuck = True
                    msg = (
                        f"{e.key} did not go away within {self.eviction_timeout:g}s "
                        f"({len(live)} pod(s), {len(claims)} claim(s) left); its preemptor's plan is recomputed"
                    )
                    log.warning("%s", msg)
                    await self.events.emit(wl, "Warning", "EvictionStuck", msg)
                continue
            # step 3: the ledger releases the quota and records the eviction
            with contextlib.suppress(NotAdmitted):  # released before a restart: only the requeue was lost
                await self.ledger.evict(
                    uid, at=now, reason=e.reason, preemptor_uid=e.preemptor_uid, message=e.message
                )
                fault_point("eviction.after_ledger")
            self._recorded[uid] = now  # queued again since the eviction (as the ledger has it)
            self._hold_released(uid)
            self.records.release(uid)  # all but the devices held
            await self._requeue(wl, e)

    async def _requeue(self, wl: Workload, e: Evicting) -> None:
        """Step 4: QuotaReserved/Admitted False and Requeued — at once, or with backoff (or deactivated)
        after a PodsReadyTimeout. A pod group whose pods were deleted is being deleted with them (its
        pods owned it): only its finalizer goes."""
        if wl.metadata.deletion_timestamp:
            await self._eviction_finalizer(wl, False)
            log.info("evicted %s is being deleted (its pods are gone): not requeued", wl.key)
            return
        if e.reason == ev.JOB_CHANGED:  # replaced, not requeued: its Job gets a new Workload
            await self._delete_workload(wl, e.message)
            return
        now = self.clock()
        gen = wl.metadata.generation
        why = f"evicted ({e.reason}): {e.message}"
        conds = with_condition(wl.status.conditions, QUOTA_RESERVED, "False", e.reason, why, now, gen)
        conds = with_condition(conds, ADMITTED, "False", e.reason, why, now, gen)
        if wl.status.condition(PODS_READY) is not None:  # its pods are gone with the admission
            conds = with_condition(conds, PODS_READY, "False", "WaitForStart", "evicted: " + why, now, gen)
        status: dict[str, Any] = {"conditions": conds, "admission": None}
        if e.reason == ev.INACTIVE_WORKLOAD or wl.spec.active is False:
            # as in Kueue: a deactivated workload is not requeued until spec.active is true again
            # (_reactivate); its requeue backoff starts over then
            msg = ev.DEACTIVATED_MESSAGE
            status["conditions"] = with_condition(
                conds, REQUEUED, "False", ev.INACTIVE_WORKLOAD, msg, now, gen
            )
            status["reason"] = msg
            status["requeueState"] = None
            await self._write_requeue(wl, status, "Deactivated", f"quota released; {msg}")
            return
        if e.reason != ev.PODS_READY_TIMEOUT:
            # as in Kueue: only a waitForPodsReady timeout backs off (and counts toward the limit);
            # a preempted (or otherwise evicted) workload is pending again at once, requeueState untouched
            message = f"requeued at once after eviction ({e.reason})"
            status["conditions"] = with_condition(conds, REQUEUED, "True", e.reason, message, now, gen)
            status["reason"] = message
            await self._write_requeue(wl, status, "Requeued", f"quota released; {message}")
            return
        strategy = self.config.wait_for_pods_ready.requeuing_strategy
        count = wl.status.requeue_state.count or 0 if wl.status.requeue_state is not None else 0
        decision = next_requeue(count, now, strategy)
        if decision.deactivate:
            raw = await self._patch(
                WORKLOADS, wl.name, {"spec": {"active": False}}, wl.namespace, what=f"deactivate {wl.key}"
            )
            self.workloads.observe(raw)
            conds = with_condition(
                conds, EVICTED, "True", "DeactivatedDueToRequeuingLimitExceeded", decision.message, now, gen
            )
            status["conditions"] = with_condition(
                conds, REQUEUED, "False", "Deactivated", decision.message, now, gen
            )
            status["reason"] = "Deactivated"
        else:
            assert decision.requeue_at is not None
            status["conditions"] = with_condition(
                conds,
                REQUEUED,
                "True",
                e.reason,
                f"requeued after eviction ({e.reason}); {decision.message}",
                now,
                gen,
            )
            status["reason"] = f"requeued after eviction ({e.reason})"
            status["requeueState"] = {"count": decision.count, "requeueAt": fmt_time(decision.requeue_at)}
            self._wake_at(decision.requeue_at)
        await self._write_requeue(
            wl,
            status,
            "Requeued" if not decision.deactivate else "Deactivated",
            f"quota released; {decision.message}",
        )

    async def _write_requeue(self, wl: Workload, status: dict[str, Any], event: str, message: str) -> None:
        await self._patch_status(wl, {**status, "conditions": _dump(status["conditions"])})
        await self._eviction_finalizer(wl, False)
        fault_point("eviction.after_requeue")
        await self.events.emit(wl, "Normal", event, message)

    async def _write_pods_ready(self, wl: Workload, ready: bool) -> bool:
        """The Workload's ``PodsReady`` condition, kept true to its pods (Kueue's reasons): True once
        all its admitted pods are Ready (or Succeeded); False while they start (``WaitForStart``) or
        after one of them stopped being Ready (``WaitForRecovery``). Written only when it changes.
        Returns whether all its pods were Ready once (the condition says so across a restart)."""
        cur = wl.status.condition(PODS_READY)
        if ready:
            want = ("True", "Recovered" if cur is not None and cur.reason == "WaitForRecovery" else "Started")
            message = "All pods reached readiness and the workload is running"
        else:
            was_ready = cur is not None and (cur.status == "True" or cur.reason == "WaitForRecovery")
            want = ("False", "WaitForRecovery" if was_ready else "WaitForStart")
            message = "Not all pods are ready or succeeded"
        if (cur is not None and (cur.status, cur.reason) == want) or (
            cur is not None and ready and cur.status == "True"
        ):
            return want[0] == "True" or want[1] == "WaitForRecovery"
        conds = with_condition(
            wl.status.conditions, PODS_READY, want[0], want[1], message, self.clock(), wl.metadata.generation
        )
        await self._patch_status(wl, {"conditions": _dump(conds)})
        return want[0] == "True" or want[1] == "WaitForRecovery"

    async def _replace(self) -> None:
        """Workloads that no longer match their Job (``_to_replace``) are replaced, as Kueue's
        jobframework does: deleted (a new one is made for the Job), after an eviction if admitted."""
        todo, self._to_replace = self._to_replace, {}
        for key, why in sorted(todo.items()):
            wl = self.workloads.get_key(key)
            if wl is None or wl.metadata.deletion_timestamp:
                continue
            uid = wl.metadata.uid or ""
            if uid in self.admitted:
                if uid not in self.evicting:
                    await self._start_eviction(wl, ev.JOB_CHANGED, f"{why}: it is replaced")
                continue
            await self._delete_workload(wl, why)

    async def _delete_workload(self, wl: Workload, why: str) -> None:
        """Delete a (not admitted) Workload that no longer matches its object; it gets a new one."""
        log.info("replacing %s: %s", wl.key, why)
        await self.events.emit(wl, "Normal", "Replaced", f"{why}: it is deleted and made again")
        job = self._source_of(wl)
        if job is not None:
            await self.events.emit(
                job.object, "Normal", "WorkloadReplaced", f"{why}: it is deleted and made again"
            )
        try:
            await retrying(
                lambda: self.kube.delete(
                    WORKLOADS, wl.name, wl.namespace, preconditions={"uid": wl.metadata.uid or ""}
                ),
                what=f"delete Workload {wl.key}",
            )
        except Exception as e:
            if not is_not_found(e):
                raise
        self.workloads.forget(wl.name, wl.namespace)

    async def _reactivate(self, keys: list[str]) -> bool:
        """``spec.active`` true again on a Workload deactivated after an eviction (``InactiveWorkload``, or
        the requeuing limit's ``Deactivated``): ``Requeued=True Reactivated``, its backoff starts over
        (as Kueue's workload controller does). True when one was written."""
        wrote = False
        for key in keys:
            wl = self.workloads.get_key(key)
            if wl is None or wl.spec.active is False or wl.status.is_true(FINISHED):
                continue
            c = wl.status.condition(REQUEUED)
            if c is None or c.status != "False" or c.reason not in (ev.INACTIVE_WORKLOAD, "Deactivated"):
                continue
            now = self.clock()
            msg = "The workload was reactivated"
            conds = with_condition(
                wl.status.conditions, REQUEUED, "True", ev.REACTIVATED, msg, now, wl.metadata.generation
            )
            await self._patch_status(wl, {"conditions": _dump(conds), "requeueState": None, "reason": None})
            await self.events.emit(wl, "Normal", ev.REACTIVATED, f"{msg}: it is pending again")
            wrote = True
        return wrote

    async def _check_admitted(self) -> None:
        """waitForPodsReady and lost placements: evict an admitted Workload whose pods are not all
        Ready within the timeout, whose planned node is gone, or whose planned device is tainted
        NoExecute."""
        wfpr = self.config.wait_for_pods_ready
        index = self._pod_index() if self.admitted else None
        nodes = {n.name for n in self.nodes.list()}
        tainted = _tainted_devices(self.slices.list())
        now = self.clock()
        for uid in sorted(self.admitted):
            if uid in self.evicting or uid in self.status_todo:
                continue
            wl = self._workload_by_uid(uid)
            admission = self.admissions.get(uid)
            if wl is None or admission is None or wl.status.is_true(FINISHED):
                continue
            if wl.spec.active is False:  # Kueue's stop: evicted, not requeued until reactivated
                await self._start_eviction(wl, ev.INACTIVE_WORKLOAD, ev.DEACTIVATED_MESSAGE)
                continue
            gone = sorted(ev.planned_nodes(admission) - nodes)
            if gone and nodes:
                await self._start_eviction(
                    wl, ev.NODE_LOST, f"planned node(s) {', '.join(gone)} no longer exist"
                )
                continue
            bad = sorted(ev.planned_devices(admission) & tainted)
            if bad:
                names = ", ".join("/".join(d) for d in bad)
                await self._start_eviction(
                    wl, ev.DEVICE_TAINTED, f"planned device(s) {names} are tainted with effect NoExecute"
                )
                continue
            want = sum(psa.count or len(psa.placements or []) for psa in admission.pod_set_assignments)
            pods = [p for p in self._workload_pods(wl, index) if not p.metadata.deletion_timestamp]
            ready = sum(1 for p in pods if _pod_ready(p))  # Ready, or Succeeded
            all_ready = bool(want) and ready >= want
            # waitForPodsReady: the timeout holds until the PodsReady condition was True once
            if await self._write_pods_ready(wl, all_ready):
                self.pods_ready_seen.add(uid)
            if not wfpr.enable or uid in self.pods_ready_seen:
                continue
            job = self._source_of(wl)
            timeout = ev.pods_ready_timeout(
                wl, wfpr.timeout, job.object.annotations if job is not None else None
            )
            deadline = self.admitted[uid].admission_time + timeout
            if now >= deadline:
                await self._start_eviction(
                    wl,
                    ev.PODS_READY_TIMEOUT,
                    f"Exceeded the PodsReady timeout {timeout:g}s: {ready} of {want} pod(s) Ready",
                )
            else:
                self._wake_at(deadline)
