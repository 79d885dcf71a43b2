"""``queueing explain NAMESPACE/WORKLOAD``: why a workload is pending, running or was evicted.

    queueing explain NAMESPACE/WORKLOAD [--kubeconfig FILE] [--context NAME] [--url LEDGER_URL]

From the cluster: the Workload's state, conditions (pending reason, eviction, requeue), requeue
backoff and, when admitted, its plan (node and devices per pod); for a workload that is not admitted
also its queue (does the LocalQueue exist, which ClusterQueue, is that queue active or stopped) and its
position among the pending workloads of its ClusterQueue and LocalQueue (the controller's admission
order from its visibility API when that answers, else the queue order without fair sharing:
priority, then creation time), and for a deactivated one how to reactivate it. From the
ledger: its admissions (when, where, which devices, how each ended) and evictions (why, by which
preemptor), and the workloads it preempted. ``WORKLOAD`` may also be the name of a queued Job (its Workload is
``job-NAME``). When the ledger cannot be read, what the cluster says is printed all the same, with one
line saying the ledger is unreachable (exit code 0). Exit codes: 0 explained, 1 no such workload, 2
on errors (cluster unreachable, bad arguments).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import Any

HELP = "Explain why a workload is pending or was evicted (from the cluster and the ledger)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", metavar="NAMESPACE/WORKLOAD", help="the Workload (or its Job's name)")
    parser.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then $KUBECONFIG)"
    )
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context")
    parser.add_argument(
        "--url",
        metavar="LEDGER_URL",
        help="ledger database URL (default: $QUEUEING_DATABASE_URL, else the default)",
    )


class _NotFound(Exception):
    pass


def run(args: argparse.Namespace) -> int:
    ns, sep, name = args.workload.partition("/")
    if not sep or not ns or not name:
        print(f"queueing explain: expected NAMESPACE/WORKLOAD, got {args.workload!r}", file=sys.stderr)
        return 2
    try:
        text = asyncio.run(_explain(ns, name, args))
    except _NotFound as e:
        print(f"queueing explain: {e}", file=sys.stderr)
        return 1
    except _Failed as e:
        print(f"queueing explain: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


class _Failed(Exception):
    pass


async def _explain(ns: str, name: str, args: argparse.Namespace) -> str:
    from queueing.api.v1beta1 import Workload
    from queueing.kube.client import WORKLOADS, KubeClient, load_api_client
    from queueing.kube.writes import is_not_found

    try:
        api = await load_api_client(args.kubeconfig, args.context)
    except Exception as e:
        raise _Failed(f"cannot load the cluster configuration: {e}") from None
    try:
        kube = KubeClient(api, timeout=20.0)
        raw = None
        for candidate in (name, f"job-{name}"):
            try:
                raw = await kube.get(WORKLOADS, candidate, ns)
                break
            except Exception as e:
                if not is_not_found(e):
                    raise _Failed(f"cannot read Workload {ns}/{candidate}: {_short(e)}") from None
        if raw is None:
            raise _NotFound(f"Workload {ns}/{name} not found (nor job-{name})")
        wl = Workload.model_validate(raw)
        queues = await _queues(kube, wl)
        owner_created = await _owner_created(kube, wl)
    finally:
        await api.close()
    try:
        history: dict[str, Any] | None = await _ledger_history(wl.metadata.uid or "", args.url)
        unreachable = None
    except _Failed as e:
        history, unreachable = None, str(e)
    return render(wl, history, queues, owner_created=owner_created, ledger_error=unreachable)


async def _owner_created(kube: Any, wl: Any) -> str | None:
    """The creation time of the Workload's Job (what its wait is measured from), None if unknown."""
    from queueing.kube.client import JOBS

    owner = next((o for o in wl.metadata.owner_references or [] if o.controller and o.kind == "Job"), None)
    if owner is None:
        return None
    try:
        job = await kube.get(JOBS, owner.name, wl.namespace or "default")
    except Exception:
        return None
    meta = job.get("metadata") or {}
    return meta.get("creationTimestamp") if meta.get("uid") == owner.uid else None


async def _queues(kube: Any, wl: Any) -> dict[str, Any] | None:
    """The Workload's LocalQueue and ClusterQueue and the pending Workloads that compete with it; None
    when they cannot be read (e.g. no permission to list them): the rest is explained anyway."""
    from queueing.api.v1beta1 import ClusterQueue, LocalQueue, Workload
    from queueing.kube.client import CLUSTER_QUEUES, LOCAL_QUEUES, WORKLOADS

    try:
        lqs = [LocalQueue.model_validate(o) for o in (await kube.list(LOCAL_QUEUES)).get("items") or []]
        cqs = [ClusterQueue.model_validate(o) for o in (await kube.list(CLUSTER_QUEUES)).get("items") or []]
        wls = [Workload.model_validate(o) for o in (await kube.list(WORKLOADS)).get("items") or []]
    except Exception:
        return None
    # the controller's own order, when its visibility API answers (else the estimate in _queue_lines)
    visibility = None
    lq = next((q for q in lqs if q.key == wl.local_queue_key), None)
    if lq is not None:
        path = (
            f"/apis/visibility.queueing.dra.io/v1beta1/clusterqueues/{lq.spec.cluster_queue}/pendingworkloads"
        )
        try:
            visibility = (await kube.request("GET", path, {"limit": 100000})).get("items") or []
        except Exception:
            visibility = None
    return {"local_queues": lqs, "cluster_queues": cqs, "workloads": wls, "visibility": visibility}


def _short(e: Exception) -> str:
    status = getattr(e, "status", None)
    reason = getattr(e, "reason", None)
    return f"{status} {reason}" if status else str(e).splitlines()[0]


async def _ledger_history(uid: str, url: str | None) -> dict[str, Any]:
    from sqlalchemy import or_, select
    from sqlalchemy.exc import SQLAlchemyError

    from queueing.ledger import models as m
    from queueing.ledger.engine import LedgerConfigError, create_engine, database_url

    try:
        engine = create_engine(database_url(url))
    except LedgerConfigError as e:
        raise _Failed(str(e)) from None
    try:
        async with engine.connect() as c:
            adms = (
                await c.execute(
                    select(m.Admission).where(m.Admission.workload_uid == uid).order_by(m.Admission.id)
                )
            ).all()
            pods: dict[int, list[Any]] = {}
            if adms:
                for p in (
                    await c.execute(
                        select(m.AdmissionPod)
                        .where(m.AdmissionPod.admission_id.in_([a.id for a in adms]))
                        .order_by(m.AdmissionPod.admission_id, m.AdmissionPod.pod_index)
                    )
                ).all():
                    pods.setdefault(p.admission_id, []).append(p)
            evictions = (
                await c.execute(
                    select(m.Eviction)
                    .where(or_(m.Eviction.workload_uid == uid, m.Eviction.preemptor_uid == uid))
                    .order_by(m.Eviction.evicted_at_ms)
                )
            ).all()
            others = {e.workload_uid for e in evictions} | {
                e.preemptor_uid for e in evictions if e.preemptor_uid
            }
            names = {
                r.uid: f"{r.namespace}/{r.name}"
                for r in (await c.execute(select(m.Workload).where(m.Workload.uid.in_(others)))).all()
            }
            row = (await c.execute(select(m.Workload).where(m.Workload.uid == uid))).first()
    except (SQLAlchemyError, OSError) as e:
        msg = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
        raise _Failed(f"ledger: {msg}") from None
    finally:
        await engine.dispose()
    return {"admissions": adms, "pods": pods, "evictions": evictions, "names": names, "row": row}


def _ts(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _rfc3339_ms(ts: str | None) -> int | None:
    if not ts:
        return None
    try:
        return round(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def queued_since_ms(wl: Any, history: dict[str, Any] | None, owner_created: str | None = None) -> int | None:
    """Since when the workload waits: the ledger's ``queued_at`` (its Job's creation, or its last
    eviction), else as the cluster shows it (``queued_since``: the same definition)."""
    from queueing.scheduling.from_api import queued_since

    row = history["row"] if history is not None else None
    if row is not None and row.state == "pending":
        return int(row.queued_at_ms)
    return _rfc3339_ms(queued_since(wl, owner_created))


def _pending(wl: Any) -> bool:
    """Waiting for admission and competing for it: not finished, not holding quota, not deactivated,
    not being deleted, not found inadmissible by the controller (e.g. its LocalQueue is stopped)."""
    st = wl.status
    qr = st.condition("QuotaReserved")
    return not (
        st.is_true("Finished")
        or st.is_true("QuotaReserved")
        or wl.spec.active is False
        or wl.metadata.deletion_timestamp
        or (qr is not None and qr.reason == "Inadmissible")
    )


def _queue_lines(wl: Any, queues: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """Where the workload waits: its LocalQueue and ClusterQueue (missing, stopped, inactive); and its
    position among the pending workloads of both, in queue order without fair sharing."""
    ns = wl.namespace or "default"
    prio = f", priority {wl.spec.priority}" if wl.spec.priority is not None else ""
    head = f"  Queue:     LocalQueue {ns}/{wl.spec.queue_name}"
    if queues is None:
        return [head + prio], []
    lq = next((q for q in queues["local_queues"] if q.key == f"{ns}/{wl.spec.queue_name}"), None)
    if lq is None:
        return [head + f" (does not exist: create it, or move the workload to another queue){prio}"], []
    cq_name = lq.spec.cluster_queue
    cq = next((q for q in queues["cluster_queues"] if q.name == cq_name), None)
    out = [head + f" -> ClusterQueue {cq_name}" + (" (does not exist)" if cq is None else "") + prio]
    if lq.spec.stop_policy != "None":
        out.append(f"             the LocalQueue is stopped (stopPolicy {lq.spec.stop_policy})")
    if cq is not None:
        if cq.spec.stop_policy != "None":
            out.append(f"             the ClusterQueue is stopped (stopPolicy {cq.spec.stop_policy})")
        active = next((c for c in cq.status.conditions or [] if c.type == "Active"), None)
        if active is not None and active.status != "True":
            out.append(f"             the ClusterQueue is inactive ({active.reason}): {active.message}")
    if not _pending(wl):
        return out, []
    visible = queues.get("visibility")
    if visible is not None:
        # the controller's admission order (its visibility API, visibility.queueing.dra.io)
        order = [
            (i["metadata"].get("namespace", ""), i["metadata"]["name"], i.get("localQueueName"))
            for i in visible
        ]
        in_cq = [f"{n}/{name}" for n, name, _ in order]
        in_lq = [f"{n}/{name}" for n, name, q in order if n == ns and q == wl.spec.queue_name]
        how = "the controller's admission order, from its visibility API"
    else:
        cq_of = {q.key: q.spec.cluster_queue for q in queues["local_queues"] if q.spec.stop_policy == "None"}
        # the order of ClusterQueue heads (queueing.scheduling.ordering.priority_key without fair sharing)
        pending = sorted(
            (w for w in queues["workloads"] if _pending(w)),
            key=lambda w: (-(w.spec.priority or 0), w.metadata.creation_timestamp or "", w.key),
        )
        in_cq = [w.key for w in pending if cq_of.get(w.local_queue_key) == cq_name]
        in_lq = [
            w.key
            for w in pending
            if (w.namespace or "default") == ns and w.spec.queue_name == wl.spec.queue_name
        ]
        how = "by priority, then creation time; fair sharing can reorder"
    if wl.key not in in_cq:
        return out, []
    ahead = in_cq[: in_cq.index(wl.key)]
    position = [
        f"  Position:  {len(ahead) + 1} of {len(in_cq)} pending in ClusterQueue {cq_name}, "
        f"{in_lq.index(wl.key) + 1} of {len(in_lq)} in LocalQueue {ns}/{wl.spec.queue_name} ({how})"
    ]
    if ahead:
        position.append(
            f"             ahead of it: {', '.join(ahead[:5])}" + (" ..." if len(ahead) > 5 else "")
        )
    return out, position


def render(
    wl: Any,
    history: dict[str, Any] | None,
    queues: dict[str, Any] | None = None,
    *,
    owner_created: str | None = None,
    ledger_error: str | None = None,
) -> str:
    """The explanation as text (pure: the Workload model, the ledger rows (None: the ledger could not
    be read, ``ledger_error`` says why) and, when they could be read, the queues and Workloads of the
    cluster)."""
    st = wl.status
    out: list[str] = []
    uid = wl.metadata.uid or ""
    out.append(f"Workload {wl.key} (uid {uid})")
    queue, position = _queue_lines(wl, queues)
    out.extend(queue)

    def cond(t: str) -> Any:
        return st.condition(t)

    qr, ev, rq, fin = cond("QuotaReserved"), cond("Evicted"), cond("Requeued"), cond("Finished")
    if fin is not None and fin.status == "True":
        state = f"Finished ({fin.reason}): {fin.message}"
    elif wl.spec.active is False:
        state = "Deactivated (spec.active is false): it will not be admitted until reactivated"
    elif ev is not None and ev.status == "True" and qr is not None and qr.status == "True":
        state = f"Being evicted ({ev.reason}): {ev.message}; waiting for its pods and claims to go"
    elif qr is not None and qr.status == "True" and st.admission is not None:
        state = f"Admitted to ClusterQueue {st.admission.cluster_queue}"
    else:
        why = (
            f"{qr.reason}: {qr.message}"
            if qr is not None
            else "not looked at yet (is the controller running?)"
        )
        state = f"Pending — {why}"
    out.append(f"  State:     {state}")
    if wl.spec.active is False and (fin is None or fin.status != "True"):
        out.append(
            f"  Reactivate: kubectl patch workload {wl.name} -n {wl.namespace or 'default'} "
            """--type merge -p '{"spec":{"active":true}}'"""
        )
    elif qr is not None and qr.status != "True" and (fin is None or fin.status != "True"):
        never = history is not None and not history["admissions"]
        out.append(
            f"  Waiting:   since {_ts(queued_since_ms(wl, history, owner_created))}"
            + (", never admitted" if never else "")
            + f"; reason {qr.reason} since {qr.last_transition_time}"
        )
    out.extend(position)
    if ev is not None and ev.status == "True" and not state.startswith("Being evicted"):
        out.append(f"  Evicted:   {ev.reason}: {ev.message} (at {ev.last_transition_time})")
    if st.requeue_state is not None and st.requeue_state.count:
        when = st.requeue_state.requeue_at or "-"
        out.append(f"  Requeued:  {st.requeue_state.count} time(s); eligible again from {when}")
    elif rq is not None and rq.status == "True":
        out.append(f"  Requeued:  {rq.message}")
    if st.admission is not None and qr is not None and qr.status == "True":
        from queueing.controller.plan import plan_summary

        out.append(f"  Plan:      {plan_summary(st.admission, limit=16)}")
    if st.conditions:
        out.append("  Conditions:")
        for c in st.conditions:
            out.append(f"    {c.type}={c.status}  {c.reason}  {c.message}  (since {c.last_transition_time})")

    out.append("History (ledger):")
    if history is None:
        out.append(f"  the ledger is unreachable ({ledger_error}): the above is the cluster's view only")
        return "\n".join(out) + "\n"
    adms = history["admissions"]
    names = history["names"]
    if history["row"] is None:
        out.append("  the ledger does not know this workload (the controller has not seen it yet)")
    elif not adms:
        out.append(f"  never admitted; queued since {_ts(history['row'].queued_at_ms)}")
    for a in adms:
        pods = history["pods"].get(a.id, [])
        devices = [d for p in pods for d in _devices(p.devices_json)]
        nodes = sorted({p.node for p in pods})
        line = (
            f"  {_ts(a.admitted_at_ms)}  admitted #{a.attempt} to ClusterQueue {a.cluster_queue}: "
            f"{len(pods)} pod(s) on {', '.join(nodes) or '-'}, {len(devices)} device(s)"
        )
        out.append(line)
        if devices:
            out.append(
                f"                       devices: {', '.join(devices[:12])}"
                + (" ..." if len(devices) > 12 else "")
            )
        if a.released_at_ms is not None:
            out.append(f"  {_ts(a.released_at_ms)}  released ({a.release_reason})")
    for e in history["evictions"]:
        if e.workload_uid == uid:
            by = f" by {names.get(e.preemptor_uid, e.preemptor_uid)}" if e.preemptor_uid else ""
            out.append(
                f"  {_ts(e.evicted_at_ms)}  evicted ({e.reason}){by}: {e.message}; "
                f"freed {e.freed_device_count} of {e.planned_device_count} planned device(s)"
            )
        else:
            out.append(
                f"  {_ts(e.evicted_at_ms)}  preempted {names.get(e.workload_uid, e.workload_uid)} "
                f"({e.reason}, ClusterQueue {e.victim_cluster_queue})"
            )
    return "\n".join(out) + "\n"


def _devices(text: str) -> list[str]:
    try:
        items = json.loads(text)
    except ValueError:
        return []
    out = []
    for d in items:
        if isinstance(d, dict):
            out.append(str(d.get("device") or d))
        else:
            out.append(str(d))
    return out
