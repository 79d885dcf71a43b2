"""Building a kubernetes-asyncio ``ApiClient`` and a thin JSON REST layer over it.

Every kind is addressed the same way through a ``Resource`` (group, version, plural, scope), and
objects travel as plain JSON dicts (parsed into our pydantic models by the callers), so unknown fields
survive and no kubernetes-asyncio model classes are involved. Errors are kubernetes-asyncio's
``ApiException`` (``.status``, ``.reason``, ``.body``), as with the generated APIs.

A request goes out through the ApiClient's own aiohttp session (``rest_client.pool_manager``: its TLS,
connection pool, proxy and TLS server name) with the headers the ApiClient would send (its default
headers and cookie, and the auth headers of ``update_params_for_auth``, so token refresh hooks and
exec plugins still run), but the body is serialised here, once, with orjson: the ApiClient's
``call_api`` walks every body (``sanitize_for_serialization``) before rest.py ``json.dumps`` it, a tenth
of the controller's CPU. Responses and watch lines are parsed with orjson too; whatever orjson
refuses (NaN, integers beyond 64 bits, non-str keys) goes through ``json`` instead, so the results are
``json``'s. In verify mode (``QUEUEING_VERIFY=1``) every body and response is also done with ``json``
and a difference raises ``VerifyError``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import orjson
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException

from queueing.dra.verify import VerifyError
from queueing.verify import verify_from_env

__all__ = [
    "CLUSTER_QUEUES",
    "COHORTS",
    "CONFIGMAPS",
    "CRDS",
    "DEVICE_CLASSES",
    "EVENTS",
    "JOBS",
    "LEASES",
    "LOCAL_QUEUES",
    "MAX_WATCH_LINE",
    "NAMESPACES",
    "NODES",
    "PATCH_CONTENT_TYPES",
    "PODS",
    "PRIORITY_CLASSES",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_FLAVORS",
    "RESOURCE_SLICES",
    "TOPOLOGIES",
    "WORKLOADS",
    "WORKLOAD_PRIORITY_CLASSES",
    "ApiException",
    "KubeClient",
    "Resource",
    "allow_long_lines",
    "api_client_for_url",
    "dumps",
    "load_api_client",
    "loads",
    "queueing_resource",
    "skip_empty_env_lookups",
]

PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


@dataclass(frozen=True)
class Resource:
    """A served resource: ``Resource("batch", "v1", "jobs", namespaced=True, kind="Job")``."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The REST path; without ``namespace`` a namespaced resource's path spans all namespaces."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


NAMESPACES = Resource("", "v1", "namespaces", False, "Namespace")
NODES = Resource("", "v1", "nodes", False, "Node")
PODS = Resource("", "v1", "pods", True, "Pod")
EVENTS = Resource("", "v1", "events", True, "Event")
CONFIGMAPS = Resource("", "v1", "configmaps", True, "ConfigMap")
JOBS = Resource("batch", "v1", "jobs", True, "Job")
RESOURCE_SLICES = Resource("resource.k8s.io", "v1", "resourceslices", False, "ResourceSlice")
DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", False, "DeviceClass")
RESOURCE_CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", True, "ResourceClaim")
RESOURCE_CLAIM_TEMPLATES = Resource(
    "resource.k8s.io", "v1", "resourceclaimtemplates", True, "ResourceClaimTemplate"
)
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", False, "PriorityClass")
LEASES = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition")


def queueing_resource(plural: str, kind: str, namespaced: bool) -> Resource:
    """One of our CRDs (group ``queueing.dra.io``, version ``v1beta1``)."""
    return Resource("queueing.dra.io", "v1beta1", plural, namespaced, kind)


WORKLOADS = queueing_resource("workloads", "Workload", True)
CLUSTER_QUEUES = queueing_resource("clusterqueues", "ClusterQueue", False)
LOCAL_QUEUES = queueing_resource("localqueues", "LocalQueue", True)
COHORTS = queueing_resource("cohorts", "Cohort", False)
RESOURCE_FLAVORS = queueing_resource("resourceflavors", "ResourceFlavor", False)
TOPOLOGIES = queueing_resource("topologies", "Topology", False)
WORKLOAD_PRIORITY_CLASSES = queueing_resource("workloadpriorityclasses", "WorkloadPriorityClass", False)


async def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> k8s.ApiClient:
    """An ApiClient from a kubeconfig file, else the in-cluster service account, else ``~/.kube/config``."""
    configuration = k8s.Configuration()
    if kubeconfig:
        await k8s_config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except k8s_config.ConfigException:
            await k8s_config.load_kube_config(context=context, client_configuration=configuration)
    return skip_empty_env_lookups(k8s.ApiClient(configuration))


def api_client_for_url(url: str, token: str | None = None) -> k8s.ApiClient:
    """An ApiClient for a plain base URL (e.g. the emulator's), with an optional bearer token."""
    configuration = k8s.Configuration(host=url)
    if token:
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
    return skip_empty_env_lookups(k8s.ApiClient(configuration))


def env_has_proxy_or_netrc() -> bool:
    """Whether aiohttp's ``trust_env`` could find anything: a ``*_proxy`` variable (any case, as
    urllib reads them) or a netrc file (``$NETRC`` or ``~/.netrc``)."""
    if any(k.lower().endswith("_proxy") and v for k, v in os.environ.items()):
        return True
    netrc = os.environ.get("NETRC")
    try:
        return Path(netrc).is_file() if netrc else (Path.home() / ".netrc").is_file()
    except (OSError, RuntimeError):  # no home directory: nothing to read either
        return False


def skip_empty_env_lookups(api: k8s.ApiClient) -> k8s.ApiClient:
    """kubernetes-asyncio's session trusts the environment, so aiohttp looks the proxy variables and
    ~/.netrc up again for every request, each in a worker thread (two thread hops per API call, about
    a tenth of the controller's CPU in bench/e2e.py). Where the environment has neither, the session
    stops looking; with a proxy or netrc set it keeps aiohttp's behaviour."""
    session = getattr(api.rest_client, "pool_manager", None)
    if getattr(session, "_trust_env", None) is True and not env_has_proxy_or_netrc():
        session._trust_env = False  # type: ignore[union-attr]
    return api


# The longest line a watch stream may carry: one event, the whole object as JSON. kube-apiserver takes
# request bodies up to 3 MiB (etcd stores 1.5 MiB by default), and its JSON of an object can be longer
# than the body that made it (it escapes <, > and & as \u003c: up to 6 bytes for one); 64 MiB covers
# 3 MiB x 6 with room. aiohttp's default (twice its read buffer, 4 MiB with kubernetes-asyncio's) fails
# the whole watch with LineTooLong on one large object, and every other object of that kind waits.
MAX_WATCH_LINE = 64 * 2**20


def allow_long_lines(resp: Any, limit: int = MAX_WATCH_LINE) -> Any:
    """Let ``resp`` (an aiohttp response, e.g. a watch's) be read line by line up to ``limit`` bytes a
    line. Returns ``resp``."""
    content = getattr(resp, "content", None)
    if content is None:
        return resp
    setter = getattr(content, "set_read_chunk_size", None)
    if setter is not None:
        setter(limit // 2)  # the line limit is twice the chunk size
    elif hasattr(content, "_high_water"):  # older aiohttp: the same limit, without a setter
        content._high_water = max(content._high_water, limit)
    return resp


def dumps(body: Any, *, verify: bool = False) -> bytes:
    """A request body as JSON bytes: orjson, or ``json`` for what orjson refuses (non-str keys, integers
    beyond 64 bits). ``verify``: the body also goes through ``json`` (as kubernetes-asyncio sends it),
    and both must read back the same."""
    try:
        data = orjson.dumps(body)
    except TypeError:
        return json.dumps(body).encode()
    if verify:
        fast, general = json.loads(data), json.loads(json.dumps(body))
        if fast != general:
            raise VerifyError("orjson request body", fast, general)
    return data


# 19 digits in a row: maybe an integer beyond 64 bits, which orjson reads as a float (json: an int)
_LONG_DIGITS = re.compile(rb"\d{19}")
_LONG_DIGITS_STR = re.compile(r"\d{19}")


def loads(data: bytes | str, *, verify: bool = False) -> Any:
    """JSON parsed: orjson, or ``json`` for what orjson refuses (NaN, Infinity) or reads differently
    (integers of 19 digits or more: orjson makes floats of those beyond 64 bits); the same result as
    ``json.loads``, which ``verify`` checks (types included)."""
    long_digits = _LONG_DIGITS_STR if isinstance(data, str) else _LONG_DIGITS
    if long_digits.search(data):  # type: ignore[arg-type]
        return json.loads(data)
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
    if verify:
        general = json.loads(data)
        if json.dumps(value) != json.dumps(general):  # as text: 1.0 and 1 differ
            raise VerifyError("orjson response", value, general)
    return value


def _query(params: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for k, v in params.items():
        if v is None:
            continue
        out.append((k, ("true" if v else "false") if isinstance(v, bool) else str(v)))
    return out


class KubeClient:
    """JSON-in, JSON-out REST calls through a kubernetes-asyncio ApiClient."""

    def __init__(
        self,
        api: k8s.ApiClient,
        timeout: float | None = 60.0,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.api = api
        self.timeout = timeout  # default total timeout of a request (watches pass their own)
        self.verify = verify_from_env(os.environ if environ is None else environ)
        # the informers' table of repeated strings (``queueing.kube.informer.intern_strings``): one
        # str object for each short value that many cached objects repeat
        self.strings: dict[str, str] = {}

    async def raw(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        """The aiohttp response, unread (the caller must release it); used for watches. ``body``: bytes
        are sent as they are, anything else as its JSON."""
        api = self.api
        headers = {"Accept": "application/json", "Content-Type": content_type, **api.default_headers}
        if api.cookie:
            headers["Cookie"] = api.cookie
        params = _query(query or {})
        await api.update_params_for_auth(headers, params, ["BearerToken"])
        url = f"{api.configuration.host}{path}"
        if params:
            url += "?" + urlencode(params)
        rest = api.rest_client
        args: dict[str, Any] = {
            "timeout": aiohttp.ClientTimeout(total=timeout) if timeout else aiohttp.ClientTimeout(),
            "headers": headers,
        }
        if rest.proxy:
            args["proxy"] = rest.proxy
        if rest.proxy_headers:
            args["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            args["server_hostname"] = rest.server_hostname
        if method in ("POST", "PUT", "PATCH", "DELETE") and body is not None:
            args["data"] = body if isinstance(body, bytes) else dumps(body, verify=self.verify)
        return await rest.pool_manager.request(method, url, **args)

    async def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
        *,
        parse: bool = True,
    ) -> Any:
        """The response's JSON (None for an empty body, or with ``parse=False``: for a response nobody
        reads, e.g. an Event's create); an error status raises ``ApiException``."""
        resp = await self.raw(method, path, query, body, content_type, timeout or self.timeout)
        try:
            data = await resp.read()
            if not 200 <= resp.status <= 299:
                exc = ApiException(status=resp.status, reason=resp.reason)
                exc.body = data.decode("utf-8", "replace")
                exc.headers = resp.headers
                raise exc
        finally:
            resp.release()
        return loads(data, verify=self.verify) if data and parse else None

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("GET", res.path(namespace, name))
        return result

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """All matching objects (following ``continue`` pages); returns the List with every item."""
        items: list[dict[str, Any]] = []
        cont: str | None = None
        while True:
            page = await self.request(
                "GET",
                res.path(namespace),
                {
                    "labelSelector": label_selector,
                    "fieldSelector": field_selector,
                    "limit": limit,
                    "continue": cont,
                },
            )
            items.extend(page.get("items") or [])
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                page["items"] = items
                result: dict[str, Any] = page
                return result

    async def create(
        self, res: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        ns = namespace or (body.get("metadata") or {}).get("namespace")
        result: dict[str, Any] = await self.request("POST", res.path(ns), body=body)
        return result

    async def replace(
        self,
        res: Resource,
        body: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        meta = body.get("metadata") or {}
        ns = namespace or meta.get("namespace")
        result: dict[str, Any] = await self.request("PUT", res.path(ns, meta["name"], subresource), body=body)
        return result

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        subresource: str | None = None,
        patch_type: str = "merge",
    ) -> dict[str, Any]:
        """``patch_type`` is ``merge``, ``json`` or ``strategic``."""
        result: dict[str, Any] = await self.request(
            "PATCH",
            res.path(namespace, name, subresource),
            body=patch,
            content_type=PATCH_CONTENT_TYPES[patch_type],
        )
        return result

    async def bind(self, name: str, namespace: str, node: str) -> None:
        """Assign a pod to a node through ``pods/binding`` (what kube-scheduler does)."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.request("POST", PODS.path(namespace, name, "binding"), body=body)

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        propagation_policy: str | None = None,
        preconditions: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        if preconditions:
            body["preconditions"] = preconditions
        result: dict[str, Any] = await self.request("DELETE", res.path(namespace, name), body=body)
        return result
