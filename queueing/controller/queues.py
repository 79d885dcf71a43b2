"""ClusterQueue and LocalQueue status from the controller's admissions (no I/O).

Per ClusterQueue: ``pendingWorkloads``, ``reservingWorkloads`` and ``admittedWorkloads`` (admission is
immediate here: both count the workloads holding quota), ``flavorsReservation`` and ``flavorsUsage``
(per flavor and resource of the spec: total, and what is borrowed beyond the nominal quota) and the
``Active`` condition. Per LocalQueue the same counts and usage (without borrowing), and ``Active``:
False with reason ``Stopped`` under a ``stopPolicy``, ``ClusterQueueIsInactive`` (the ClusterQueue's
reason) or ``ClusterQueueDoesNotExist``, as Kueue's LocalQueue says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from queueing.api.quantity import format_amount
from queueing.api.v1beta1 import (
    ACTIVE,
    ClusterQueue,
    ClusterQueueStatus,
    LocalQueue,
    LocalQueueStatus,
)
from queueing.controller.plan import with_condition
from queueing.scheduling.snapshot import AdmittedWorkload

__all__ = ["queue_statuses"]


def _q(v: Fraction, resource: str) -> str:
    """An amount as kubectl prints it (``16Gi`` of memory, ``500m`` of cpu)."""
    return format_amount(v, resource)


def _flavors(
    order: Sequence[tuple[str, str]],
    used: Mapping[tuple[str, str], Fraction],
    nominal: Mapping[tuple[str, str], Fraction] | None,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    by_flavor: dict[str, list[dict[str, Any]]] = {}
    for flavor, resource in order:
        total = used.get((flavor, resource), Fraction(0))
        entry: dict[str, Any] = {"name": resource, "total": _q(total, resource)}
        if nominal is not None:
            borrowed = max(Fraction(0), total - nominal.get((flavor, resource), Fraction(0)))
            entry["borrowed"] = _q(borrowed, resource)
        if flavor not in by_flavor:
            by_flavor[flavor] = []
            out.append({"name": flavor, "resources": by_flavor[flavor]})
        by_flavor[flavor].append(entry)
    return out


def queue_statuses(
    cluster_queues: Sequence[ClusterQueue],
    local_queues: Sequence[LocalQueue],
    admitted: Sequence[AdmittedWorkload],
    pending_by_local_queue: Mapping[str, int],
    inactive: Mapping[str, str],
    now: float,
    terminating: Mapping[tuple[str, str], str] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(ClusterQueue name -> status, LocalQueue ``ns/name`` -> status), in the API's wire form.
    ``terminating``: (kind, name) -> the message of a queue object being deleted that admitted
    workloads hold (``Active=False Terminating``, see controller/in_use.py)."""
    terminating = terminating or {}
    lq_of = {lq.key: lq for lq in local_queues}
    cq_used: dict[str, dict[tuple[str, str], Fraction]] = {}
    cq_count: dict[str, int] = {}
    lq_used: dict[str, dict[tuple[str, str], Fraction]] = {}
    lq_count: dict[str, int] = {}
    for a in admitted:
        cq_count[a.cluster_queue] = cq_count.get(a.cluster_queue, 0) + 1
        u = cq_used.setdefault(a.cluster_queue, {})
        lu = lq_used.setdefault(a.workload.queue_key, {})
        lq_count[a.workload.queue_key] = lq_count.get(a.workload.queue_key, 0) + 1
        for k, v in a.usage.items():
            u[k] = u.get(k, Fraction(0)) + v
            lu[k] = lu.get(k, Fraction(0)) + v
    cq_pending: dict[str, int] = {}
    for key, n in pending_by_local_queue.items():
        lq = lq_of.get(key)
        if lq is not None:
            cq_pending[lq.spec.cluster_queue] = cq_pending.get(lq.spec.cluster_queue, 0) + n
    cq_out: dict[str, dict[str, Any]] = {}
    cq_order: dict[str, list[tuple[str, str]]] = {}
    for cq in cluster_queues:
        order = [
            (fq.name, r.name) for g in cq.spec.resource_groups or [] for fq in g.flavors for r in fq.resources
        ]
        cq_order[cq.name] = order
        nominal = {
            (fq.name, r.name): r.nominal_quota.value
            for g in cq.spec.resource_groups or []
            for fq in g.flavors
            for r in fq.resources
        }
        flavors = _flavors(order, cq_used.get(cq.name, {}), nominal)
        why = inactive.get(cq.name)
        held = terminating.get(("ClusterQueue", cq.name))
        if held:
            conds = with_condition(cq.status.conditions, ACTIVE, "False", "Terminating", held, now)
        elif why:
            reason = why.split(":", 1)[0] or "Inactive"
            conds = with_condition(cq.status.conditions, ACTIVE, "False", reason, why, now)
        else:
            conds = with_condition(
                cq.status.conditions, ACTIVE, "True", "Ready", "Can admit new workloads", now
            )
        n = cq_count.get(cq.name, 0)
        status = {
            "conditions": [c.to_dict() for c in conds],
            "pendingWorkloads": cq_pending.get(cq.name, 0),
            "reservingWorkloads": n,
            "admittedWorkloads": n,
            "flavorsReservation": flavors,
            "flavorsUsage": flavors,
        }
        cq_out[cq.name] = ClusterQueueStatus.model_validate(status).to_dict()
    lq_out: dict[str, dict[str, Any]] = {}
    for lq in local_queues:
        order = cq_order.get(lq.spec.cluster_queue, [])
        flavors = _flavors(order, lq_used.get(lq.key, {}), None)
        cq_why = inactive.get(lq.spec.cluster_queue)
        held = terminating.get(("LocalQueue", lq.key))
        if held:
            conds = with_condition(lq.status.conditions, ACTIVE, "False", "Terminating", held, now)
        elif lq.spec.stop_policy != "None":  # Kueue's LocalQueue: Active=False Stopped
            conds = with_condition(
                lq.status.conditions,
                ACTIVE,
                "False",
                "Stopped",
                f"LocalQueue is stopped (stopPolicy {lq.spec.stop_policy})",
                now,
            )
        elif cq_why:  # inactive, or rejected by the model (then it is not among cluster_queues)
            conds = with_condition(
                lq.status.conditions,
                ACTIVE,
                "False",
                "ClusterQueueIsInactive",
                f"ClusterQueue {lq.spec.cluster_queue} is inactive: {cq_why}",
                now,
            )
        elif lq.spec.cluster_queue not in cq_order:
            conds = with_condition(
                lq.status.conditions,
                ACTIVE,
                "False",
                "ClusterQueueDoesNotExist",
                f"ClusterQueue {lq.spec.cluster_queue} does not exist",
                now,
            )
        else:
            conds = with_condition(
                lq.status.conditions, ACTIVE, "True", "Ready", "Can submit new workloads", now
            )
        n = lq_count.get(lq.key, 0)
        status = {
            "conditions": [c.to_dict() for c in conds],
            "pendingWorkloads": pending_by_local_queue.get(lq.key, 0),
            "reservingWorkloads": n,
            "admittedWorkloads": n,
            "flavorsReservation": flavors,
            "flavorsUsage": flavors,
        }
        lq_out[lq.key] = LocalQueueStatus.model_validate(status).to_dict()
    return cq_out, lq_out
