"""``kubectl queueing``: the daily tools of a Kueue user (``kueuectl``), with queueing's names.

Installed as the console script ``kubectl-queueing``, so ``kubectl`` finds it on ``PATH`` as a plugin::

    kubectl queueing list workloads [-n NS | -A] [--clusterqueue CQ] [--localqueue LQ] [--status pending|admitted|finished] [-o wide]
    kubectl queueing list clusterqueues [--active true|false] [-o wide]
    kubectl queueing list localqueues [-n NS | -A] [--clusterqueue CQ] [-o wide]
    kubectl queueing stop workload|localqueue|clusterqueue NAME [-n NS] [--keep-already-running]
    kubectl queueing resume workload|localqueue|clusterqueue NAME [-n NS]
    kubectl queueing explain NAME [-n NS] [--url LEDGER_URL]
    kubectl queueing create clusterqueue NAME [--cohort C] [--nominal-quota FLAVOR:RES=Q;RES=Q,...]
        [--borrowing-limit ...] [--lending-limit ...] [--queuing-strategy S] [--namespace-selector K=V,...]
        [--reclaim-within-cohort P] [--preemption-within-cluster-queue P] [--dry-run client] [-o yaml|json]
    kubectl queueing create localqueue NAME -c CQ [-n NS] [--ignore-unknown-cq] [--dry-run client] [-o yaml|json]

Like kubectl it uses the kubeconfig in ``--kubeconfig``, else ``$KUBECONFIG``, else ``~/.kube/config``
(else the in-cluster service account), and the context's namespace unless ``-n`` says otherwise.

``list`` prints the columns the API server prints for the kind (the CRDs' printer columns, asked for
as a server-side Table); ``list workloads`` adds ``CLUSTERQUEUE`` and ``POSITION``: a pending
workload's position in its ClusterQueue, from the visibility API (``visibility.queueing.dra.io``),
which numbers them, from 0, in the order the controller admits them; pending workloads are listed in
that order, after the others. ``stop`` sets ``spec.active: false`` on a Workload, ``stopPolicy:
HoldAndDrain`` on a queue (``Hold`` with ``--keep-already-running``); ``resume`` undoes it.
``explain`` is ``queueing explain NS/NAME``. Exit codes: 0 done, 1 the object does not exist, 2 bad
arguments or the cluster could not be reached or refused.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = ["build_parser", "main", "parse_quota"]

PROG = "kubectl queueing"
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
VISIBILITY = "/apis/visibility.queueing.dra.io/v1beta1"
KINDS = {
    "workload": "workloads", "workloads": "workloads", "wl": "workloads",
    "clusterqueue": "clusterqueues", "clusterqueues": "clusterqueues", "cq": "clusterqueues",
    "localqueue": "localqueues", "localqueues": "localqueues", "lq": "localqueues",
}  # fmt: skip


class Failed(Exception):
    """A message for stderr and an exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------------------------ arguments
def _kind(value: str) -> str:
    if value.lower() not in KINDS:
        raise argparse.ArgumentTypeError(f"unknown kind {value!r}: workload, localqueue or clusterqueue")
    return KINDS[value.lower()]


def _common(p: argparse.ArgumentParser, namespaced: bool = True) -> None:
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context")
    if namespaced:
        p.add_argument("-n", "--namespace", metavar="NS", help="namespace (default: the context's)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Queues and workloads of queueing.dra.io.")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND")

    ls = sub.add_parser("list", help="list workloads, clusterqueues or localqueues")
    ls.add_argument("kind", type=_kind, metavar="workloads|clusterqueues|localqueues")
    _common(ls)
    ls.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    ls.add_argument("-c", "--clusterqueue", metavar="CQ", help="only those of this ClusterQueue")
    ls.add_argument("-q", "--localqueue", metavar="LQ", help="workloads: only those of this LocalQueue")
    ls.add_argument("--status", choices=("pending", "admitted", "finished"), help="workloads: only these")
    ls.add_argument(
        "--active", choices=("true", "false"), help="clusterqueues: only active (or inactive) ones"
    )
    ls.add_argument("-o", "--output", choices=("wide",), help="wide: every printer column")

    for verb, doc in (
        ("stop", "stop admitting to a queue, or deactivate a workload"),
        ("resume", "undo stop"),
    ):
        p = sub.add_parser(verb, help=doc)
        p.add_argument("kind", type=_kind, metavar="workload|localqueue|clusterqueue")
        p.add_argument("name", metavar="NAME")
        _common(p)
        if verb == "stop":
            p.add_argument(
                "--keep-already-running",
                action="store_true",
                help="queues: stopPolicy Hold (admitted workloads keep running) instead of HoldAndDrain",
            )

    ex = sub.add_parser("explain", help="why a workload is pending or was evicted (queueing explain)")
    ex.add_argument("name", metavar="NAME", help="the Workload, or its Job's name")
    _common(ex)
    ex.add_argument(
        "--url", metavar="LEDGER_URL", help="ledger database URL (default: $QUEUEING_DATABASE_URL)"
    )

    cr = sub.add_parser("create", help="create a clusterqueue or localqueue")
    crs = cr.add_subparsers(dest="kind", metavar="clusterqueue|localqueue")
    cq = crs.add_parser("clusterqueue", aliases=["cq"], help="create a ClusterQueue")
    cq.add_argument("name", metavar="NAME")
    _common(cq, namespaced=False)
    cq.add_argument("--cohort", metavar="COHORT", help="the Cohort it belongs to")
    for flag, what in (
        ("--nominal-quota", "nominal quota"),
        ("--borrowing-limit", "borrowing limit"),
        ("--lending-limit", "lending limit"),
    ):
        cq.add_argument(
            flag, metavar="FLAVOR:RESOURCE=Q;...,...", action="append", default=[],
            help=f"{what} per flavor and resource, e.g. 'h200:gpu.nvidia.com=16;cpu=128,default:memory=1Ti'",
        )  # fmt: skip
    cq.add_argument("--queuing-strategy", choices=("BestEffortFIFO", "StrictFIFO"))
    cq.add_argument(
        "--namespace-selector", metavar="K=V,...", help="namespaces that may submit (default: all)"
    )
    cq.add_argument("--reclaim-within-cohort", choices=("Never", "LowerPriority", "Any"))
    cq.add_argument(
        "--preemption-within-cluster-queue", choices=("Never", "LowerPriority", "LowerOrNewerEqualPriority")
    )
    lq = crs.add_parser("localqueue", aliases=["lq"], help="create a LocalQueue")
    lq.add_argument("name", metavar="NAME")
    _common(lq)
    lq.add_argument(
        "-c", "--clusterqueue", required=True, metavar="CQ", help="the ClusterQueue it submits to"
    )
    lq.add_argument(
        "-i", "--ignore-unknown-cq", action="store_true", help="create it even if CQ does not exist"
    )
    for p in (cq, lq):
        p.add_argument("--dry-run", choices=("none", "client", "server"), default="none")
        p.add_argument("-o", "--output", choices=("yaml", "json", "name"))
    return parser


# ------------------------------------------------------------------------------------ quota flags
def parse_quota(values: Sequence[str], flag: str) -> dict[str, dict[str, str]]:
    """``["alpha:cpu=9;memory=36Gi,beta:cpu=18"]`` -> ``{"alpha": {"cpu": "9", "memory": "36Gi"},
    "beta": {"cpu": "18"}}`` (kueuectl's format; flavors and resources in the order given)."""
    from queueing.api.quantity import Quantity

    out: dict[str, dict[str, str]] = {}
    for value in values:
        for part in filter(None, (s.strip() for s in value.split(","))):
            flavor, sep, resources = part.partition(":")
            if not sep or not flavor:
                raise Failed(f"{flag}: {part!r}: expected FLAVOR:RESOURCE=QUANTITY[;RESOURCE=QUANTITY...]")
            for item in filter(None, (s.strip() for s in resources.split(";"))):
                res, eq, qty = item.partition("=")
                if not eq or not res:
                    raise Failed(f"{flag}: {part!r}: {item!r} is not RESOURCE=QUANTITY")
                try:
                    Quantity.parse(qty)
                except ValueError as e:
                    raise Failed(f"{flag}: {flavor}:{res}: {e}") from None
                out.setdefault(flavor, {})[res] = qty
    return out


def cluster_queue_object(args: argparse.Namespace) -> dict[str, Any]:
    nominal = parse_quota(args.nominal_quota, "--nominal-quota")
    limits = {
        "borrowingLimit": parse_quota(args.borrowing_limit, "--borrowing-limit"),
        "lendingLimit": parse_quota(args.lending_limit, "--lending-limit"),
    }
    for field, by_flavor in limits.items():
        for flavor, res in by_flavor.items():
            for r in res:
                if r not in nominal.get(flavor, {}):
                    flag = "--borrowing-limit" if field == "borrowingLimit" else "--lending-limit"
                    raise Failed(f"{flag}: {flavor}:{r}: no --nominal-quota for this flavor and resource")
    # flavors covering the same resources share one resource group (as kueuectl builds them)
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for flavor, res in nominal.items():
        resources = []
        for r, q in res.items():
            entry: dict[str, Any] = {"name": r, "nominalQuota": q}
            for field, by_flavor in limits.items():
                if r in by_flavor.get(flavor, {}):
                    entry[field] = by_flavor[flavor][r]
            resources.append(entry)
        groups.setdefault(tuple(res), []).append({"name": flavor, "resources": resources})
    spec: dict[str, Any] = {"namespaceSelector": {}}
    if args.namespace_selector:
        labels = {}
        for kv in filter(None, args.namespace_selector.split(",")):
            k, eq, v = kv.partition("=")
            if not eq or not k:
                raise Failed(f"--namespace-selector: {kv!r} is not KEY=VALUE")
            labels[k] = v
        spec["namespaceSelector"] = {"matchLabels": labels}
    if args.cohort:
        spec["cohortName"] = args.cohort
    if args.queuing_strategy:
        spec["queueingStrategy"] = args.queuing_strategy
    preemption = {}
    if args.reclaim_within_cohort:
        preemption["reclaimWithinCohort"] = args.reclaim_within_cohort
    if args.preemption_within_cluster_queue:
        preemption["withinClusterQueue"] = args.preemption_within_cluster_queue
    if preemption:
        spec["preemption"] = preemption
    spec["resourceGroups"] = [{"coveredResources": list(k), "flavors": v} for k, v in groups.items()]
    return {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": args.name},
        "spec": spec,
    }


# ------------------------------------------------------------------------------------ cluster access
def _kubeconfig_file(args: argparse.Namespace) -> str | None:
    if args.kubeconfig:
        return str(args.kubeconfig)
    for p in filter(None, os.environ.get("KUBECONFIG", "").split(os.pathsep)):
        if Path(p).exists():
            return p
    home = Path("~/.kube/config").expanduser()
    return str(home) if home.exists() else None


def _context_namespace(path: str | None, context: str | None) -> str:
    if path is None:
        ns_file = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        return ns_file.read_text().strip() if ns_file.exists() else "default"
    try:
        cfg = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return "default"
    name = context or cfg.get("current-context")
    for c in cfg.get("contexts") or []:
        if c.get("name") == name:
            return str((c.get("context") or {}).get("namespace") or "default")
    return "default"


class Cluster:
    """The API calls of the plugin (a :class:`queueing.kube.client.KubeClient` underneath)."""

    def __init__(self, kube: Any, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace

    async def table(
        self, plural: str, namespace: str | None, label_selector: str | None = None
    ) -> dict[str, Any]:
        """The server-side Table (printer columns) with the full objects (``includeObject=Object``)."""
        from queueing.kube.client import queueing_resource

        res = queueing_resource(plural, "", plural != "clusterqueues")
        query = [("includeObject", "Object")]
        if label_selector:
            query.append(("labelSelector", label_selector))
        resp = await self.kube.api.call_api(
            res.path(namespace), "GET", query_params=query, header_params={"Accept": TABLE_ACCEPT},
            auth_settings=["BearerToken"], _preload_content=False, _request_timeout=30,
        )  # fmt: skip
        try:
            data = await resp.read()
            if not 200 <= resp.status <= 299:
                raise Failed(f"cannot list {plural}: {_api_message(resp.status, data)}")
        finally:
            resp.release()
        table: dict[str, Any] = json.loads(data)
        if table.get("kind") != "Table":  # a server without Table support: the List itself
            raise Failed(f"cannot list {plural}: the API server answered {table.get('kind')}, not a Table")
        return table

    async def pending(self, cluster_queue: str) -> tuple[list[dict[str, Any]], str | None]:
        """The visibility API's pending workloads of a ClusterQueue, or ([], why not)."""
        from queueing.kube.writes import is_not_found

        path = f"{VISIBILITY}/clusterqueues/{cluster_queue}/pendingworkloads"
        try:
            got = await self.kube.request("GET", path, {"limit": 100000})
        except Exception as e:
            if is_not_found(e) and "clusterqueue" in (getattr(e, "body", "") or ""):
                return [], None  # the ClusterQueue does not exist (yet): nothing pending in it
            return [], f"{getattr(e, 'status', '')} {getattr(e, 'reason', '') or e}".strip()
        return list(got.get("items") or []), None


def _api_message(status: int, data: bytes) -> str:
    try:
        body = json.loads(data)
        return f"{status} {body.get('reason', '')}: {body.get('message', '')}"
    except ValueError:
        return f"{status} {data[:200].decode('utf-8', 'replace')}"


def _error(e: Exception) -> Failed:
    body = getattr(e, "body", None)
    status = getattr(e, "status", None)
    if status is not None:
        msg = body or ""
        with contextlib.suppress(ValueError):
            msg = json.loads(body or "").get("message", body)
        return Failed(f"{msg or getattr(e, 'reason', '')} ({status})", 1 if status == 404 else 2)
    return Failed(str(e))


# ------------------------------------------------------------------------------------ list
def _cond(obj: dict[str, Any], type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def workload_status(obj: dict[str, Any]) -> str:
    """pending | admitted | finished (a workload being evicted still holds its quota: admitted)."""
    if _cond(obj, "Finished"):
        return "finished"
    if _cond(obj, "QuotaReserved"):
        return "admitted"
    return "pending"


def render(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """kubectl's table layout: columns left-aligned, three spaces apart."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "   ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]
    ]
    return "\n".join(lines) + "\n"


def _columns(table: dict[str, Any], wide: bool) -> list[int]:
    return [i for i, c in enumerate(table.get("columnDefinitions") or []) if wide or not c.get("priority")]


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


async def list_command(cluster: Cluster, args: argparse.Namespace) -> str:
    ns = None if args.all_namespaces else (args.namespace or cluster.namespace)
    wide = args.output == "wide"
    if args.kind == "clusterqueues":
        table = await cluster.table("clusterqueues", None)
        cols = _columns(table, wide)
        header = [table["columnDefinitions"][i]["name"].upper() for i in cols]
        rows = []
        for row in table.get("rows") or []:
            obj = row.get("object") or {}
            if args.clusterqueue and obj.get("metadata", {}).get("name") != args.clusterqueue:
                continue
            if args.active is not None and _cond(obj, "Active") != (args.active == "true"):
                continue
            rows.append([_cell(row["cells"][i]) for i in cols])
        return render(header, rows) if rows else "No resources found\n"
    if args.kind == "localqueues":
        table = await cluster.table("localqueues", ns)
        cols = _columns(table, wide)
        header = (["NAMESPACE"] if ns is None else []) + [
            table["columnDefinitions"][i]["name"].upper() for i in cols
        ]
        rows = []
        for row in table.get("rows") or []:
            obj = row.get("object") or {}
            if args.clusterqueue and (obj.get("spec") or {}).get("clusterQueue") != args.clusterqueue:
                continue
            rows.append(
                ([obj["metadata"].get("namespace", "")] if ns is None else [])
                + [_cell(row["cells"][i]) for i in cols]
            )
        return render(header, rows) if rows else _none(ns)
    # workloads
    table = await cluster.table("workloads", ns)
    lq_table = await cluster.table("localqueues", None)
    cq_of = {
        f"{o['metadata'].get('namespace')}/{o['metadata']['name']}": (o.get("spec") or {}).get(
            "clusterQueue", ""
        )
        for o in (r.get("object") or {} for r in lq_table.get("rows") or [])
    }
    cols = _columns(table, wide)
    header = (
        (["NAMESPACE"] if ns is None else [])
        + [table["columnDefinitions"][i]["name"].upper() for i in cols]
        + ["CLUSTERQUEUE", "POSITION"]
    )
    selected: list[tuple[dict[str, Any], dict[str, Any], str, str]] = []
    for row in table.get("rows") or []:
        obj = row.get("object") or {}
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        status = workload_status(obj)
        admission = (obj.get("status") or {}).get("admission") or {}
        cq = admission.get("clusterQueue") or cq_of.get(
            f"{meta.get('namespace')}/{spec.get('queueName')}", ""
        )
        if args.status and status != args.status:
            continue
        if args.clusterqueue and cq != args.clusterqueue:
            continue
        if args.localqueue and spec.get("queueName") != args.localqueue:
            continue
        selected.append((row, obj, cq, status))
    positions: dict[tuple[str, str], int] = {}
    warnings = []
    for cq in sorted({cq for _, _, cq, st in selected if st == "pending" and cq}):
        items, why = await cluster.pending(cq)
        if why:
            warnings.append(f"warning: positions in ClusterQueue {cq} unavailable (visibility API: {why})")
        for it in items:
            m = it.get("metadata") or {}
            positions[(m.get("namespace", ""), m.get("name", ""))] = int(it.get("positionInClusterQueue", 0))
    for w in warnings:
        print(w, file=sys.stderr)

    def order(item: tuple[dict[str, Any], dict[str, Any], str, str]) -> tuple[Any, ...]:
        _, obj, cq, status = item
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if status == "pending":
            pos = positions.get(key)
            return (1, cq, pos if pos is not None else 1 << 30, key)
        return (0, "", 0, key)

    rows = []
    for row, obj, cq, _status in sorted(selected, key=order):
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        pos = positions.get(key)
        rows.append(
            ([key[0]] if ns is None else [])
            + [_cell(row["cells"][i]) for i in cols]
            + [cq, "" if pos is None else str(pos)]
        )
    return render(header, rows) if rows else _none(ns)


def _none(ns: str | None) -> str:
    return f"No resources found in {ns} namespace.\n" if ns else "No resources found\n"


# ------------------------------------------------------------------------------------ stop / resume
async def stop_resume(cluster: Cluster, args: argparse.Namespace) -> str:
    from queueing.kube.client import CLUSTER_QUEUES, LOCAL_QUEUES, WORKLOADS

    ns = args.namespace or cluster.namespace
    stop = args.verb == "stop"
    if args.kind == "workloads":
        patch: dict[str, Any] = {"spec": {"active": not stop}}
        res, namespace = WORKLOADS, ns
        what = f"workload.queueing.dra.io/{args.name}"
    else:
        policy = ("Hold" if args.keep_already_running else "HoldAndDrain") if stop else "None"
        res = CLUSTER_QUEUES if args.kind == "clusterqueues" else LOCAL_QUEUES
        namespace = ns if args.kind == "localqueues" else None
        patch = {"spec": {"stopPolicy": policy}}
        what = f"{res.kind.lower()}.queueing.dra.io/{args.name}"
    try:
        await cluster.kube.patch(res, args.name, patch, namespace)
    except Exception as e:
        raise _error(e) from None
    return f"{what} {'stopped' if stop else 'resumed'}\n"


# ------------------------------------------------------------------------------------ create
async def create(cluster: Cluster, args: argparse.Namespace) -> str:
    from pydantic import ValidationError

    from queueing.api.base import format_validation_error
    from queueing.api.v1beta1 import ClusterQueue, LocalQueue
    from queueing.kube.client import CLUSTER_QUEUES, LOCAL_QUEUES
    from queueing.kube.writes import is_not_found

    model: type[ClusterQueue] | type[LocalQueue]
    if args.kind in ("clusterqueue", "cq"):
        obj, res, model = cluster_queue_object(args), CLUSTER_QUEUES, ClusterQueue
    else:
        ns = args.namespace or cluster.namespace
        obj = {
            "apiVersion": "queueing.dra.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": args.name, "namespace": ns},
            "spec": {"clusterQueue": args.clusterqueue},
        }
        res, model = LOCAL_QUEUES, LocalQueue
    try:
        model.model_validate(obj)
    except ValidationError as e:
        raise Failed(format_validation_error(e, f"{obj['kind']} {args.name}")) from None
    if args.dry_run != "client":
        try:
            if res is LOCAL_QUEUES and not args.ignore_unknown_cq:
                try:
                    await cluster.kube.get(CLUSTER_QUEUES, args.clusterqueue)
                except Exception as e:
                    if is_not_found(e):
                        raise Failed(
                            f"ClusterQueue {args.clusterqueue} not found (--ignore-unknown-cq creates the "
                            "LocalQueue anyway)",
                            1,
                        ) from None
                    raise
            if args.dry_run == "server":
                ns = obj["metadata"].get("namespace")
                obj = await cluster.kube.request("POST", res.path(ns), {"dryRun": "All"}, body=obj)
            else:
                obj = await cluster.kube.create(res, obj)
        except Failed:
            raise
        except Exception as e:
            raise _error(e) from None
    suffix = {"client": " (dry run)", "server": " (server dry run)"}.get(args.dry_run, "")
    if args.output == "yaml":
        return yaml.safe_dump(obj, sort_keys=False)
    if args.output == "json":
        return json.dumps(obj, indent=2) + "\n"
    name = f"{obj['kind'].lower()}.queueing.dra.io/{args.name}"
    return name + "\n" if args.output == "name" else f"{name} created{suffix}\n"


# ------------------------------------------------------------------------------------ main
async def _run(args: argparse.Namespace) -> str:
    from queueing.kube.client import KubeClient, load_api_client

    path = _kubeconfig_file(args)
    if args.verb == "create" and args.dry_run == "client":
        cluster = Cluster(None, _context_namespace(path, args.context))
        return await create(cluster, args)
    try:
        api = await load_api_client(path, args.context)
    except Exception as e:
        raise Failed(f"cannot load the cluster configuration: {e}") from None
    try:
        cluster = Cluster(KubeClient(api, timeout=30.0), _context_namespace(path, args.context))
        if args.verb == "list":
            return await list_command(cluster, args)
        if args.verb in ("stop", "resume"):
            return await stop_resume(cluster, args)
        return await create(cluster, args)
    except Failed:
        raise
    except Exception as e:
        raise _error(e) from None
    finally:
        await api.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if not args.verb or (args.verb == "create" and not args.kind):
        parser.print_help(sys.stderr)
        return 2
    if args.verb == "explain":
        from queueing.commands import explain

        path = _kubeconfig_file(args)
        ns = args.namespace or _context_namespace(path, args.context)
        return int(
            explain.run(
                argparse.Namespace(
                    workload=f"{ns}/{args.name}", kubeconfig=path, context=args.context, url=args.url
                )
            )
            or 0
        )
    try:
        out = asyncio.run(_run(args))
    except Failed as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130
    sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
