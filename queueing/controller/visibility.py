"""The visibility API ``visibility.queueing.dra.io/v1beta1``: pending workloads with their positions.

Served by the controller from its live state (an aggregated API: kube-aggregator proxies
``/apis/visibility.queueing.dra.io/v1beta1/...`` to it, see ``deploy/base/visibility.yaml``), with
Kueue's shapes and field names (``visibility.kueue.x-k8s.io``)::

    GET /apis/visibility.queueing.dra.io/v1beta1/clusterqueues/NAME/pendingworkloads?limit=&offset=
    GET /apis/visibility.queueing.dra.io/v1beta1/namespaces/NS/localqueues/NAME/pendingworkloads

Both answer a ``PendingWorkloadsSummary`` whose ``items`` are ``PendingWorkload`` entries: ``metadata``
(name, namespace, creationTimestamp, ownerReferences), ``priority``, ``localQueueName``,
``positionInClusterQueue`` and ``positionInLocalQueue`` (both from 0). ``limit`` defaults to 1000 (at
most 100000), ``offset`` to 0, as in Kueue.

The order is the one the scheduling cycle takes a ClusterQueue's workloads in
(``queueing.scheduling.ordering.queue_order_key``: a nominated preemptor first, then admission fair
sharing's LocalQueue usage when on, then priority, then (re)queue time), over the workloads the
controller sees as pending: not admitted, not finished, not deactivated, with a valid spec (those in a
requeue backoff keep their place) and not in a stopped LocalQueue. Like Kueue, a workload is listed in
the ClusterQueue its LocalQueue points at, whether or not that ClusterQueue is active.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from queueing.api.v1beta1 import Workload
from queueing.scheduling.from_api import cluster_queue_spec, local_queue_spec
from queueing.scheduling.ordering import queue_order_key, weighted_usage
from queueing.scheduling.snapshot import LocalQueueSpec, WorkloadInfo

if TYPE_CHECKING:
    from queueing.controller.controller import Controller

__all__ = [
    "DEFAULT_LIMIT",
    "GROUP",
    "MAX_LIMIT",
    "VERSION",
    "PendingEntry",
    "VisibilityServer",
    "ordered_pending",
    "summary",
]

log = logging.getLogger("queueing.controller.visibility")

GROUP = "visibility.queueing.dra.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
DEFAULT_LIMIT = 1000  # Kueue's DefaultPendingWorkloadsLimit
MAX_LIMIT = 100_000  # Kueue's MaxPendingWorkloadsLimit


@dataclass(frozen=True)
class PendingEntry:
    """One pending workload in its ClusterQueue's order."""

    workload: Workload
    info: WorkloadInfo
    cluster_queue: str
    position_in_cluster_queue: int
    position_in_local_queue: int

    def to_dict(self) -> dict[str, Any]:
        meta = self.workload.metadata
        owners = [
            {"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": o.uid}
            for o in meta.owner_references or []
        ]
        md: dict[str, Any] = {
            "name": meta.name,
            "namespace": meta.namespace,
            "creationTimestamp": meta.creation_timestamp,
        }
        if owners:
            md["ownerReferences"] = owners
        return {
            "metadata": md,
            "priority": self.info.priority,
            "localQueueName": self.info.queue_name,
            "positionInClusterQueue": self.position_in_cluster_queue,
            "positionInLocalQueue": self.position_in_local_queue,
        }


def ordered_pending(
    pending: Iterable[tuple[Workload, WorkloadInfo]],
    local_queues: Sequence[LocalQueueSpec],
    nominated: frozenset[str],
    fair_sharing_queues: frozenset[str] = frozenset(),
    lq_shares: dict[str, float] | None = None,
) -> dict[str, list[PendingEntry]]:
    """ClusterQueue name -> its pending workloads in admission order, with their positions.

    ``fair_sharing_queues``: the ClusterQueues ordering by admission fair sharing, whose workloads
    sort by ``lq_shares`` (LocalQueue key -> weighted decayed usage) first."""
    # a stopped LocalQueue's workloads do not queue (the cycle's routing gives them a reason instead)
    cq_of = {lq.key: lq.cluster_queue for lq in local_queues if lq.stop_policy == "None"}
    shares = lq_shares or {}
    by_cq: dict[str, list[tuple[Workload, WorkloadInfo]]] = {}
    for wl, info in pending:
        if not info.active:
            continue
        cq = cq_of.get(info.queue_key)
        if cq is not None:
            by_cq.setdefault(cq, []).append((wl, info))
    out: dict[str, list[PendingEntry]] = {}
    for cq, items in by_cq.items():
        fair = cq in fair_sharing_queues
        items.sort(
            key=lambda p: queue_order_key(p[1], nominated, shares.get(p[1].queue_key, 0.0) if fair else 0.0)
        )
        in_lq: dict[str, int] = {}
        entries = []
        for i, (wl, info) in enumerate(items):
            n = in_lq.get(info.queue_key, 0)
            in_lq[info.queue_key] = n + 1
            entries.append(PendingEntry(wl, info, cq, i, n))
        out[cq] = entries
    return out


def summary(entries: Sequence[PendingEntry], limit: int, offset: int) -> dict[str, Any]:
    """A ``PendingWorkloadsSummary`` with ``entries[offset:offset + limit]``."""
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": GROUP_VERSION,
        "metadata": {"creationTimestamp": None},
        "items": [e.to_dict() for e in entries[offset : offset + limit]],
    }


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> web.Response:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return web.json_response(body, status=code)


def _int_param(request: web.Request, name: str, default: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}: not an integer: {raw!r}") from None


RESOURCES = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": GROUP_VERSION,
    "resources": [
        {"name": "clusterqueues", "singularName": "clusterqueue", "namespaced": False,
         "kind": "ClusterQueue", "verbs": []},
        {"name": "clusterqueues/pendingworkloads", "singularName": "", "namespaced": False,
         "kind": "PendingWorkloadsSummary", "verbs": ["get"]},
        {"name": "localqueues", "singularName": "localqueue", "namespaced": True,
         "kind": "LocalQueue", "verbs": []},
        {"name": "localqueues/pendingworkloads", "singularName": "", "namespaced": True,
         "kind": "PendingWorkloadsSummary", "verbs": ["get"]},
    ],
}  # fmt: skip


class VisibilityServer:
    """Serves the visibility API from a running :class:`Controller`'s informers.

    ``await server.start("127.0.0.1:0")`` (``port`` then says which), ``await server.stop()``. With
    ``cert_file``/``key_file`` it serves HTTPS, as kube-aggregator requires in a cluster; when they
    cannot be read it serves nothing and says why in ``error`` and the log (the controller runs on)."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.port: int | None = None
        self.error: str | None = None  # why it is not served
        self._runner: web.AppRunner | None = None

    # ---------------------------------------------------------------- the state
    def pending(self) -> dict[str, list[PendingEntry]]:
        """ClusterQueue -> pending workloads in admission order, from the controller's live state: its
        pending set (``PendingWorkloads``, as the last sync left it) less what it admitted since."""
        c = self.controller
        pw = c.pending
        lqs = [local_queue_spec(lq) for lq in c.local_queues.list()]
        afs = c.config.scheduling().admission_fair_sharing
        fair: frozenset[str] = frozenset()
        shares: dict[str, float] = {}
        if afs is not None:
            specs = (cluster_queue_spec(cq) for cq in c.cluster_queues.list())
            fair = frozenset(cq.name for cq in specs if cq.admission_fair_sharing)
            shares = {lq.key: weighted_usage(c.lq_usage.get(lq.key, {}), afs, lq.fair_weight) for lq in lqs}
        pairs = [
            (wl, info)
            for info in pw.backlog
            if (wl := c.workloads.get_key(info.key)) is not None and c._pending_eligible(wl)
        ]
        return ordered_pending(pairs, lqs, frozenset(pw.nominated), fair, shares)

    # ---------------------------------------------------------------- HTTP
    def app(self) -> web.Application:
        app = web.Application()
        base = f"/apis/{GROUP}/{VERSION}"
        app.router.add_get(f"/apis/{GROUP}", self._group)
        app.router.add_get(base, self._resources)
        app.router.add_get(f"{base}/clusterqueues/{{name}}/pendingworkloads", self._cluster_queue)
        app.router.add_get(
            f"{base}/namespaces/{{namespace}}/localqueues/{{name}}/pendingworkloads", self._local_queue
        )
        return app

    async def _group(self, request: web.Request) -> web.Response:
        v = {"groupVersion": GROUP_VERSION, "version": VERSION}
        return web.json_response(
            {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": [v], "preferredVersion": v}
        )

    async def _resources(self, request: web.Request) -> web.Response:
        return web.json_response(RESOURCES)

    def _paging(self, request: web.Request) -> tuple[int, int]:
        limit = _int_param(request, "limit", DEFAULT_LIMIT)
        offset = _int_param(request, "offset", 0)
        if limit == 0:
            limit = DEFAULT_LIMIT  # Kueue's defaulting
        return min(max(limit, 0), MAX_LIMIT), max(offset, 0)

    async def _cluster_queue(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        try:
            limit, offset = self._paging(request)
        except ValueError as e:
            return _status(400, "BadRequest", str(e))
        if self.controller.cluster_queues.get(name) is None:
            return _status(
                404, "NotFound", f'clusterqueue.{GROUP} "{name}" not found',
                {"name": name, "group": GROUP, "kind": "clusterqueue"},
            )  # fmt: skip
        entries = self.pending().get(name, [])
        return web.json_response(summary(entries, limit, offset))

    async def _local_queue(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["namespace"], request.match_info["name"]
        try:
            limit, offset = self._paging(request)
        except ValueError as e:
            return _status(400, "BadRequest", str(e))
        lq = self.controller.local_queues.get(name, ns)
        if lq is None:
            return _status(
                404, "NotFound", f'localqueue.{GROUP} "{name}" not found',
                {"name": name, "group": GROUP, "kind": "localqueue"},
            )  # fmt: skip
        key = f"{ns}/{name}"
        entries = [e for e in self.pending().get(lq.spec.cluster_queue, []) if e.info.queue_key == key]
        return web.json_response(summary(entries, limit, offset))

    async def start(self, address: str, cert_file: str | None = None, key_file: str | None = None) -> None:
        from queueing.controller.http import parse_bind_address

        host, port = parse_bind_address(address)
        context = None
        if cert_file and key_file:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            try:
                context.load_cert_chain(cert_file, key_file)
            except (OSError, ssl.SSLError) as e:
                # the rest of the controller runs on; the API server answers 503 for the group
                self.error = f"visibility API not served: certificate {cert_file} / {key_file}: {e}"
                log.error("%s (create the Secret queueing-visibility-cert: docs/kubectl.md)", self.error)
                return
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        self._runner = runner
        await web.TCPSite(runner, host=host, port=port, ssl_context=context).start()
        bound = runner.addresses[0] if runner.addresses else None
        self.port = int(bound[1]) if bound else port
        log.info("serving %s on port %s (%s)", GROUP_VERSION, self.port, "https" if context else "http")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
