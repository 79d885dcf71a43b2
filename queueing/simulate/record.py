"""``queueing simulate --ledger URL``: write a finished simulation into the ledger.

The simulation's history is replayed through the ledger's repository API with the virtual clock as
``at=`` (epoch seconds: the wall-clock start of the run plus the virtual offset): ``start_run(mode=
"simulation")``, the cohorts, ClusterQueues (quota) and LocalQueues, then in time order
``add_workload`` at each arrival, ``admit`` (charges, flavors, planned node and devices per pod),
``evict`` (reason, preemptor) and ``finish``, and ``stop_run``. The schema is migrated to head first.
Workload UIDs are derived from the run id and the job (a UUID), so one ledger can hold several runs of
the same scenario.
``queueing report ... --url URL`` then reports on the simulated history.

The ledger checks every admission with the scheduling core's own quota model (the same cohorts,
parents and own quotas are written to it), so a write it refuses means the simulation and the ledger
disagree: :class:`LedgerRefused` is raised (``queueing simulate`` exits 2 with its one-line message).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from queueing.api.quantity import Quantity
from queueing.ledger.migrate import upgrade_async
from queueing.ledger.quota import quota_specs
from queueing.ledger.repository import Ledger, LedgerError
from queueing.ledger.state import (
    AdmissionRequest,
    Charge,
    ClusterQueueSpec,
    CohortSpec,
    LocalQueueSpec,
    PlannedDevice,
    PodPlan,
    WorkloadSpec,
)
from queueing.scheduling.dra_placer import DraPlacer, DraPlan
from queueing.simulate.engine import SimEvent, SimResult
from queueing.simulate.scenario import Scenario

__all__ = ["LedgerRefused", "RecordResult", "record"]


class LedgerRefused(LedgerError):
    """The ledger refused a write of the simulated history (it disagrees with the simulation)."""


@dataclass
class RecordResult:
    run_id: str
    written: int = 0


def _memory(placer: DraPlacer, key: tuple[str, str, str]) -> Quantity | None:
    dev = placer.cluster.inventory.devices.get(key)
    if dev is None:
        return None
    for published, cap in dev.capacity.values():
        if published == "memory":
            return Quantity.from_value(cap.value.value, "BinarySI")
    return None


def _admission(ev: SimEvent, uid: str, placer: DraPlacer) -> AdmissionRequest:
    adm = ev.admission
    assert adm is not None
    a = adm.assignment
    charges = tuple(Charge(f, r, Quantity.from_value(v)) for (f, r), v in sorted(a.usage.items()) if v)
    flavors: dict[str, str] = {}
    for m in a.flavors.values():
        flavors.update(m)
    for f, r in a.usage:
        flavors.setdefault(r, f)
    pods: list[PodPlan] = []
    plan = a.placement.detail
    if isinstance(plan, DraPlan):
        for pp in plan.pods:
            devices = tuple(
                PlannedDevice("/".join(k), plan.device_classes.get(k, ""), _memory(placer, k))
                for k in pp.devices
            )
            pods.append(PodPlan(pp.index, pp.node, devices, pp.pod_set, pp.pod))
    return AdmissionRequest(uid, adm.cluster_queue, charges, tuple(pods), flavors)


async def record(
    result: SimResult, scenario: Scenario, placer: DraPlacer, url: str, *, start_epoch: float
) -> RecordResult:
    ledger = Ledger.from_url(url)
    try:
        await upgrade_async(ledger.engine)
        t0 = start_epoch
        run_id = await ledger.start_run(
            identity="queueing-simulate",
            mode="simulation",
            at=t0,
            details={"jobs": len(scenario.jobs), "events": len(result.events)},
        )
        out = RecordResult(run_id)
        q = scenario.queues
        for c in q.cohorts:
            await ledger.upsert_cohort(CohortSpec(c.name, c.parent, quota_specs(c.quotas())), at=t0)
        for cq in q.cluster_queues:
            await ledger.upsert_cluster_queue(
                ClusterQueueSpec(
                    cq.name, quota_specs(cq.quotas()), cq.cohort, Quantity.from_value(cq.fair_weight)
                ),
                at=t0,
            )
        for lq in q.local_queues:
            await ledger.upsert_local_queue(LocalQueueSpec(lq.namespace, lq.name, lq.cluster_queue), at=t0)
        jobs = {j.key: j for j in scenario.jobs}
        # one UID per run and job: a ledger may hold several runs of one scenario
        uid = {j.key: str(uuid.uuid5(uuid.UUID(run_id), j.info.uid or j.key)) for j in scenario.jobs}
        # arrivals interleaved with the events (an arrival goes before events at the same time)
        timeline: list[tuple[float, int, int, object]] = [
            (j.arrival, 0, i, j) for i, j in enumerate(scenario.jobs) if j.arrival <= result.summary.time
        ]
        timeline += [(e.time, 1, i, e) for i, e in enumerate(result.events)]
        timeline.sort(key=lambda x: (x[0], x[1], x[2]))
        for t, kind, _, item in timeline:
            at = t0 + t
            try:
                if kind == 0:
                    j = jobs[item.key]  # type: ignore[attr-defined]
                    info = j.info
                    await ledger.add_workload(
                        WorkloadSpec(
                            uid[j.key],
                            info.namespace,
                            info.name,
                            info.queue_name,
                            info.priority,
                            {
                                "kind": j.kind,
                                "podSets": [{"name": p.name, "count": p.count} for p in info.pod_sets],
                                "durationSeconds": j.duration,
                            },
                        ),
                        at=at,
                    )
                    out.written += 1
                    continue
                assert isinstance(item, SimEvent)
                e = item
                if e.event == "Admitted":
                    await ledger.admit(_admission(e, uid[e.job], placer), at=at)
                elif e.event == "Evicted":
                    await ledger.evict(
                        uid[e.job],
                        at=at,
                        reason=e.reason,
                        preemptor_uid=uid.get(e.preemptor) if e.preemptor else None,
                        message=f"preempted by {e.preemptor}" if e.preemptor else e.reason,
                    )
                elif e.event == "Finished":
                    await ledger.finish(uid[e.job], at=at)
                else:
                    continue
                out.written += 1
            except LedgerError as err:
                what = getattr(item, "event", "arrival")
                await ledger.stop_run(run_id, at=at)
                raise LedgerRefused(
                    f"ledger refused {what} of {getattr(item, 'job', getattr(item, 'key', '?'))} at {t:g}s: {err}"
                ) from err
        await ledger.stop_run(run_id, at=t0 + result.summary.time)
        return out
    finally:
        await ledger.close()
