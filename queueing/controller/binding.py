"""Plan binding: an admitted Workload's object (a Job or another integrated kind held by suspend) is
started in one write (per pod set: placement gate, planned node, admitted count) and its pods get their planned nodes and, in Full mode, their claims the planned
allocation; in NodeOnly/Auto mode kube-scheduler's allocations are checked against the plan, and the
devices of a released admission are held until those allocations are confirmed."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from queueing.api.core import FINISHED_POD_PHASES, Pod
from queueing.api.resource import (
    DeviceRequestAllocationResult,
    ResourceClaim,
)
from queueing.api.v1beta1 import (
    GATE_ADMISSION,
    GATE_PLACEMENT,
    HOSTNAME_LABEL,
    PLACEMENT_INDEX_ANNOTATION,
    POD_GROUP_LABEL,
    POD_SET_LABEL,
    WORKLOAD_UID_LABEL,
    Admission,
    Workload,
)
from queueing.controller import evict as ev
from queueing.controller.base import (
    ControllerBase,
    _allocated_results,
    _gated,
    _pod_set_of,
    log,
)
from queueing.controller.plan import (
    DeviceIndex,
    admission_json,
    allocation_for,
    is_implicit_claim,
    ledger_pods,
    needs_gate,
    plan_summary,
    pod_claim_name,
    without_nulls,
)
from queueing.dra.binding import (
    BindingDecision,
    UpstreamView,
    choose_binding,
    describe_devices,
    device_results,
)
from queueing.faults import fault_point
from queueing.integrations.base import PodSetStart, SuspendableJob
from queueing.kube.client import (
    PODS,
    RESOURCE_CLAIMS,
)
from queueing.kube.writes import each, retrying
from queueing.ledger.repository import LedgerError
from queueing.scheduling.from_api import _device as allocated_device  # one conversion
from queueing.scheduling.from_api import (
    recorded_plan,
)
from queueing.scheduling.placer import Placement


class PlanBinding(ControllerBase):
    def _forget_binding(self, uid: str) -> None:
        self._bindings.pop(uid, None)
        self._verified.pop(uid, None)

    def _awaiting_allocation(self, but: str = "") -> set[str]:
        """Nodes of admissions bound node only whose claims kube-scheduler has not allocated yet."""
        mode = self.config.plan_binding_mode
        if mode == "Full":
            return set()
        nodes: set[str] = set()
        # one pass over the records (asked at every release: going through the views, a lookup per
        # field and admission, was most of it)
        for rec in self.records.by_uid.values():
            adm = rec.admission
            if adm is None or rec.uid == but or rec.verified is adm:
                continue
            if mode == "Auto" and (rec.binding is None or not rec.binding[1].node_only):
                continue  # bound Full, or not decided yet (the decision sees the cluster as it is then)
            nodes |= ev.planned_nodes(adm)
        return nodes

    def _hold_released(self, uid: str) -> None:
        """Hold until confirmed: an admission is released while one bound node only on the same node
        waits for kube-scheduler, which may give it a device released now instead of its planned one.
        The released placements on such nodes stay held until every admission bound node only there is
        confirmed (its allocation checked and recorded) or gone, or ``nodeOnlyConfirmTimeout`` passes."""
        adm = self.admissions.get(uid)
        if adm is None:
            return
        waiting = self._awaiting_allocation(but=uid)
        placements = [
            p for psa in adm.pod_set_assignments for p in psa.placements or [] if p.node_name in waiting
        ]
        if placements:
            self._held[uid] = (self.clock() + self.config.node_only_confirm_timeout, placements)

    def _held_claims(self) -> list[ResourceClaim]:
        """The held devices as allocated claims for the placer (only the placer sees them). A hold ends
        when no admission bound node only on its node awaits its allocation, or at its deadline."""
        if not self._held:
            return []
        now = self.clock()
        waiting = self._awaiting_allocation()
        out: list[ResourceClaim] = []
        for uid, (deadline, placements) in list(self._held.items()):
            keep = [p for p in placements if p.node_name in waiting] if now < deadline else []
            if not keep:
                del self._held[uid]
                continue
            self._held[uid] = (deadline, keep)
            self._wake_at(deadline)
            for p in keep:
                for i, c in enumerate(p.claims or []):
                    if not c.devices:
                        continue
                    out.append(
                        ResourceClaim.model_validate(
                            {
                                "metadata": {"name": f"held-{uid}-{p.index}-{i}", "namespace": "held"},
                                "status": {
                                    "allocation": {
                                        "devices": {
                                            "results": [without_nulls(d.to_dict()) for d in c.devices]
                                        }
                                    }
                                },
                            }
                        )
                    )
        return out

    def _binding(self, wl: Workload, admission: Admission) -> BindingDecision:
        """Node only or Full for this admission. ``Auto`` asks :func:`choose_binding` once per
        admission, before any of its pods is released (until then its claims are not allocated, so
        asking again after a restart is as valid as the first answer)."""
        mode = self.config.plan_binding_mode
        if mode != "Auto":
            return BindingDecision(mode == "NodeOnly", f"planBindingMode {mode}")
        uid = wl.metadata.uid or ""
        hit = self._bindings.get(uid)
        if hit is not None and hit[0] is admission:
            return hit[1]
        if self._upstream is None:
            self._upstream = UpstreamView(
                self.nodes.list(),
                self.slices.list(),
                self.device_classes.list(),
                self.claims.list(),
                self.templates.list(),
                cache=self._selectors,
            )
        decision = choose_binding(
            admission,
            {ps.name: ps.claim_refs() for ps in wl.spec.pod_sets},
            wl.namespace or "default",
            self._upstream,
        )
        log.debug(
            "plan binding of %s: %s (%s)",
            wl.key,
            "node only" if decision.node_only else "Full",
            decision.reason,
        )
        self._bindings[uid] = (admission, decision)
        return decision

    async def _bind(self) -> None:
        self._upstream = None  # what kube-scheduler sees now (built when a decision needs it)
        pods_of = self._pods_by_workload()
        groups = self._groups()

        async def bind(uid: str) -> None:
            wl = self._workload_by_uid(uid)
            admission = self.admissions.get(uid)
            if wl is None or admission is None:
                return
            job = await self._start_suspended(wl, admission)
            pods = pods_of(wl)
            if any(_gated(p) for p in pods):
                await self._bind_pods(wl, admission, pods)
            group = wl.labels.get(POD_GROUP_LABEL)
            if group and job is None:
                members = groups.get((wl.namespace or "default", group), [])
                if any(_gated(p, GATE_ADMISSION) for p in members):
                    await self._bind_pods(
                        wl, admission, members, GATE_ADMISSION, functools.partial(_pod_set_of, wl)
                    )
                pods = members
            if self.config.plan_binding_mode != "Full" and self._verified.get(uid) is not admission:
                await self._check_allocations(wl, admission, pods)

        # workload after workload in UID order (binding decisions are taken in that order: the
        # semaphore is first come, first served), their writes side by side
        await each(
            [u for u in sorted(self.admitted) if u not in self.status_todo and u not in self.evicting],
            bind,
            limit=self.write_concurrency,
        )

    async def _start_suspended(self, wl: Workload, admission: Admission) -> SuspendableJob | None:
        """The admitted Workload's object held by suspend (its adapter, None for a pod group), started
        if it is suspended and not finished. The admission executor calls it as soon as the Workload's
        status holds (a Job starts while the rest of its cycle's admissions are written); the bind
        step calls it for every admission (a start that failed or had to wait)."""
        job = self._source_of(wl)
        if job is not None and job.is_suspended() and not job.finished()[0]:
            await self._start_job(wl, job, admission)
        return job

    def _template_claims(self, wl: Workload, pod_set: str) -> bool:
        ps = wl.pod_set(pod_set)
        return ps is not None and any(c.resource_claim_template_name for c in ps.claim_refs())

    async def _allocate(self, claim: ResourceClaim, placement: Any, node: str) -> bool:
        """Write the planned allocation into a claim (Full mode). False when the claim already holds a
        different allocation (someone else allocated it: the plan cannot be bound as made)."""
        if claim.status.allocation is not None:
            planned = {(d.driver, d.pool, d.device) for d in placement.devices}
            have = {(r.driver, r.pool, r.device) for r in _allocated_results(claim)}
            return planned == have
        body = allocation_for(claim.spec, placement, node, {c.name: c for c in self.device_classes.list()})
        raw = await retrying(
            lambda: self.kube.patch(
                RESOURCE_CLAIMS,
                claim.name,
                {"status": {"allocation": body}},
                claim.namespace,
                subresource="status",
            ),
            what=f"allocation of ResourceClaim {claim.key}",
        )
        self.claims.observe(raw)
        self.stats.claims_allocated += 1
        fault_point("bind.after_claim_allocation")
        return True

    async def _start_job(self, wl: Workload, job: SuspendableJob, admission: Admission) -> None:
        """Unsuspend an admitted object in one write, per pod set: pod template labels (our pods
        informer), the placement gate when needed, the planned node when every pod of the pod set has
        the same one, the admitted count (partial admission). Shared claims get their allocation first
        (Full mode)."""
        ns = wl.namespace or "default"
        if not admission.pod_set_assignments:
            return
        binding = self._binding(wl, admission)
        full = not binding.node_only
        if full:
            for psa in admission.pod_set_assignments:
                for p in psa.placements or []:
                    for c in p.claims or []:
                        if c.resource_claim_name and not is_implicit_claim(c):
                            claim = self.claims.get(c.resource_claim_name, ns)
                            if claim is None:
                                return  # wait for it (the claims informer wakes us)
                            await self._allocate(claim, c, p.node_name)
        starts: dict[str, PodSetStart] = {}
        for psa in admission.pod_set_assignments:
            nodes = {p.node_name for p in psa.placements or []}
            ps = wl.pod_set(psa.name)
            starts[psa.name] = PodSetStart(
                name=psa.name,
                labels={WORKLOAD_UID_LABEL: wl.metadata.uid or "", POD_SET_LABEL: psa.name},
                node=next(iter(nodes)) if len(nodes) == 1 else None,
                keep_hostname=ps is not None and HOSTNAME_LABEL in (ps.template.spec.node_selector or {}),
                gate=needs_gate(admission, psa.name, full, self._template_claims(wl, psa.name)),
                count=psa.count,
            )
        patch = job.start_patch(starts)
        obj = job.object
        src = self.sources[obj.kind or "Job"]
        fault_point("bind.before_start_job")
        raw = await retrying(
            lambda: self.kube.patch(
                src.resource, obj.name, patch.body, obj.namespace, patch_type=patch.patch_type
            ),
            what=f"start {src.kind} {obj.key}",
        )
        src.informer.observe(raw)
        fault_point("bind.after_start_job")
        how = ""
        if self.config.plan_binding_mode == "Auto":
            how = f"; plan binding: {'node only' if binding.node_only else 'Full'} ({binding.reason})"
        await self.events.emit(
            obj,
            "Normal",
            "Started",
            f"Admitted by ClusterQueue {admission.cluster_queue}; plan: {plan_summary(admission)}{how}",
        )

    async def _bind_pods(
        self,
        wl: Workload,
        admission: Admission,
        pods: list[Pod],
        gate: str = GATE_PLACEMENT,
        pod_set_of: Callable[[Pod], str | None] | None = None,
    ) -> None:
        """Give each gated pod a planned pod of its pod set: allocate its claims (Full mode), then pin
        its node and remove ``gate`` in one write."""
        ns = wl.namespace or "default"
        default_ps = admission.pod_set_assignments[0].name if admission.pod_set_assignments else "main"
        full = not self._binding(wl, admission).node_only

        def ps_of(p: Pod) -> str:
            return (pod_set_of(p) if pod_set_of else p.labels.get(POD_SET_LABEL)) or default_ps

        live = [
            p
            for p in pods
            if not p.metadata.deletion_timestamp and (p.status.phase or "") not in FINISHED_POD_PHASES
        ]
        used: dict[str, set[int]] = {}
        for p in live:
            idx = p.annotations.get(PLACEMENT_INDEX_ANNOTATION)
            if idx is not None and idx.isdigit():
                used.setdefault(ps_of(p), set()).add(int(idx))
        for pod in sorted(live, key=lambda p: p.name):
            if not _gated(pod, gate):
                continue
            ps_name = ps_of(pod)
            psa = next((a for a in admission.pod_set_assignments if a.name == ps_name), None)
            if psa is None or not psa.placements:
                continue
            taken = used.setdefault(ps_name, set())
            placement = None
            given = pod.annotations.get(PLACEMENT_INDEX_ANNOTATION)
            completion = pod.annotations.get("batch.kubernetes.io/job-completion-index")
            for want in (given, completion):
                if want is not None and want.isdigit():
                    placement = next((p for p in psa.placements if p.index == int(want)), None)
                    if placement is not None and (want == given or placement.index not in taken):
                        break
                    placement = None
            if placement is None:
                placement = next((p for p in psa.placements if p.index not in taken), None)
            if placement is None:
                log.warning("pod %s of %s has no free placement (more pods than planned)", pod.key, wl.key)
                continue
            taken.add(placement.index)
            if full:
                ready = True
                for c in placement.claims or []:
                    if is_implicit_claim(c):
                        continue
                    name = c.resource_claim_name or pod_claim_name(pod, c.name)
                    claim = self.claims.get(name, ns) if name else None
                    if claim is None:
                        ready = False  # the resourceclaim controller has not created it yet
                        break
                    if not await self._allocate(claim, c, placement.node_name):
                        await self.events.emit(
                            wl,
                            "Warning",
                            "PlanNotBound",
                            f"ResourceClaim {claim.key} is allocated to other devices than planned",
                        )
                if not ready:
                    continue
            meta: dict[str, Any] = {"annotations": {PLACEMENT_INDEX_ANNOTATION: str(placement.index)}}
            spec: dict[str, Any] = {"schedulingGates": [{"$patch": "delete", "name": gate}]}
            if (pod.spec.node_selector or {}).get(HOSTNAME_LABEL) != placement.node_name:
                spec["nodeSelector"] = {HOSTNAME_LABEL: placement.node_name}
            raw = await self._patch(
                PODS,
                pod.name,
                {"metadata": meta, "spec": spec},
                pod.namespace,
                patch_type="strategic",
                what=f"bind Pod {pod.key}",
            )
            labels = (raw.get("metadata") or {}).get("labels") or {}
            for informer, label in ((self.pods, WORKLOAD_UID_LABEL), (self.group_pods, POD_GROUP_LABEL)):
                if label in labels:  # the informer that watches it (a pod group's pods: group_pods)
                    informer.observe(raw)
            self.stats.pods_ungated += 1
            fault_point("bind.after_pod")

    async def _check_allocations(self, wl: Workload, admission: Admission, pods: list[Pod]) -> None:
        """kube-scheduler allocated the claims of pods bound node only: the devices must be the plan's.
        When they are not (a device was released between the plan and the allocation), the Workload's
        plan and the controller's record take the allocated devices — what the pods hold — and a
        Warning Event says so. Done once every planned pod's claims are allocated."""
        ns = wl.namespace or "default"
        by_index: dict[tuple[str, int], Pod] = {}
        for pod in pods:
            if not pod.spec.node_name or pod.metadata.deletion_timestamp or _gated(pod, GATE_ADMISSION):
                continue
            ps = pod.labels.get(POD_SET_LABEL)
            if ps is None and len(admission.pod_set_assignments) == 1:
                ps = admission.pod_set_assignments[0].name
            psa = next((a for a in admission.pod_set_assignments if a.name == ps), None)
            if psa is None or not psa.placements:
                continue
            raw = pod.annotations.get(PLACEMENT_INDEX_ANNOTATION) or pod.annotations.get(
                "batch.kubernetes.io/job-completion-index"
            )
            if raw is not None and raw.isdigit():
                by_index.setdefault((psa.name, int(raw)), pod)
            elif len(psa.placements) == 1:
                by_index.setdefault((psa.name, psa.placements[0].index), pod)
        complete = True
        differs: list[str] = []
        # (pod set, placement, claim) positions whose allocated devices are not the plan's, and those
        # devices: the plan is copied only when there are any (this runs for every admission at
        # every sync until its claims are allocated, and most checks find nothing to change)
        allocated: list[tuple[int, int, int, list[DeviceRequestAllocationResult]]] = []
        for si, psa in enumerate(admission.pod_set_assignments):
            for pi, pl in enumerate(psa.placements or []):
                bound = by_index.get((psa.name, pl.index))
                for ci, c in enumerate(pl.claims or []):
                    if is_implicit_claim(c):
                        continue
                    name = c.resource_claim_name or (
                        pod_claim_name(bound, c.name) if bound is not None else None
                    )
                    claim = self.claims.get(name, ns) if name else None
                    if claim is None or claim.status.allocation is None:
                        complete = False
                        continue
                    got = _allocated_results(claim)
                    if device_results(got) == device_results(c.devices):
                        continue
                    differs.append(
                        f"ResourceClaim {claim.key} (claim {c.name} of pod {psa.name}[{pl.index}] on "
                        f"{pl.node_name}) got {describe_devices(got)}, planned {describe_devices(c.devices)}"
                    )
                    allocated.append((si, pi, ci, got))
        if differs:
            new = admission.model_copy(deep=True)
            for si, pi, ci, got in allocated:
                placements = new.pod_set_assignments[si].placements or []
                (placements[pi].claims or [])[ci].devices = [allocated_device(r) for r in got]
            new.planned_devices = new.count_planned_devices()
            uid = wl.metadata.uid or ""
            try:  # the ledger first: its plan rows (charges stay: devices of the same classes) and the
                # status it keeps follow the allocated devices
                await self.ledger.rebind(
                    uid,
                    ledger_pods(new, self._claim_specs(wl), DeviceIndex(self.slices.list())),
                    admission_json(new),
                )
            except LedgerError as e:
                log.warning("the ledger did not take the allocated devices of %s: %s", wl.key, e)
            self.admissions[uid] = new
            self._status_check.add(uid)  # compared again at the next sync, should this write fail
            out = await self._patch_status(wl, {"admission": admission_json(new)})
            if out is None:
                return
            a = self.admitted.get(uid)
            if a is not None:
                old = a.placement if isinstance(a.placement, Placement) else Placement(nodes=())
                self.admitted[uid] = dataclasses.replace(
                    a, placement=dataclasses.replace(old, detail=recorded_plan(new))
                )
            await self.events.emit(
                wl,
                "Warning",
                "AllocationDiffers",
                "kube-scheduler allocated other devices than planned: "
                + "; ".join(differs)
                + ". The plan and the ledger now record the allocated devices.",
            )
            admission = new
        if complete:
            self._verified[wl.metadata.uid or ""] = admission
            if self._held:
                self._wake.set()  # devices held for this binding may be plannable again
