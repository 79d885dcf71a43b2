"""Scenario loading for ``queueing simulate``: YAML/JSON objects in, a typed :class:`Scenario` out.

Objects read (multi-document files, ``kind: List`` expanded, directories: every ``*.yaml``,
``*.yml`` and ``*.json`` in name order, ``-`` is stdin): Node, ResourceSlice, DeviceClass,
ResourceClaimTemplate, ResourceClaim, PriorityClass, Namespace, batch/v1 Job, Pod, and the
``queueing.dra.io`` kinds (ResourceFlavor, Cohort, ClusterQueue, LocalQueue, WorkloadPriorityClass,
Workload). Other kinds are ignored with a warning.

What is simulated (a *job* of the simulation):

* a Job with the label ``queueing.dra.io/queue-name`` (its Workload as the controller builds it,
  :func:`queueing.scheduling.jobs.workload_for_job`, through its adapter as for the kinds below);
* a Workload object (``spec.queueName``);
* a pod group: Pods labelled ``queueing.dra.io/pod-group`` (annotation
  ``queueing.dra.io/pod-group-total-count``), named ``<namespace>/<group>`` in events;
* a RayJob, RayCluster or JobSet labelled ``queueing.dra.io/queue-name`` (its Workload as the
  controller's adapter builds it, queueing/integrations), named ``<namespace>/<name>``;
* the pod-gated kinds labelled ``queueing.dra.io/queue-name`` (queueing/integrations: the pods
  their controller creates, grouped and turned into Workloads by the controller's adapters): a
  StatefulSet (one gang, ``<namespace>/<name>``), each pod of a Deployment (``<namespace>/<name>-<i>``),
  each replica group of a LeaderWorkerSet (``<namespace>/<name>-<group index>``, its leader's name).

Each carries ``simulate.queueing.dra.io/arrival`` (offset from the start, default ``0s``) and
``simulate.queueing.dra.io/duration`` (required: run time once admitted) as annotations (a pod group:
on its first pod by name; the pod-gated kinds: on the object, else its pod template). A StatefulSet,
Deployment, LeaderWorkerSet or RayCluster without a duration runs to the end of the simulation
(serving). Pods with ``spec.nodeName`` and no group run on their node for the whole
simulation (they use node allocatable and their claims).

Errors raise :class:`ScenarioError` with one line naming the file or object and the field.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from queueing import manifests
from queueing.api.apps import Deployment, LeaderWorkerSet, StatefulSet
from queueing.api.base import KubeObject
from queueing.api.core import Job, Namespace, Node, Pod, PriorityClass
from queueing.api.registry import ObjectError, parse_object
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from queueing.api.v1beta1 import (
    ClusterQueue,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Topology,
    Workload,
    WorkloadPriorityClass,
)
from queueing.dra.cel_cost import selector_problems
from queueing.integrations import deployment, leaderworkerset, statefulset
from queueing.integrations.podgated import with_membership
from queueing.integrations.podgroup import PodGroup
from queueing.integrations.registry import Integration, by_kind
from queueing.scheduling.config import parse_duration
from queueing.scheduling.from_api import ApiContext, FromApiError, QueueSpecs, queue_specs, workload_info
from queueing.scheduling.jobs import (
    POD_GROUP_LABEL,
    QUEUE_NAME_LABEL,
    WorkloadError,
    workload_for_pod_group,
)
from queueing.scheduling.snapshot import WorkloadInfo
from queueing.verify import verify_from_env

__all__ = [
    "ARRIVAL_ANNOTATION",
    "DURATION_ANNOTATION",
    "Scenario",
    "ScenarioError",
    "SimJob",
    "load_objects",
    "load_scenario",
    "read_documents",
]

ARRIVAL_ANNOTATION = "simulate.queueing.dra.io/arrival"
DURATION_ANNOTATION = "simulate.queueing.dra.io/duration"

_KINDS: tuple[type[KubeObject], ...] = (
    Node,
    ResourceSlice,
    DeviceClass,
    ResourceClaimTemplate,
    ResourceClaim,
    PriorityClass,
    Namespace,
    Job,
    Pod,
    StatefulSet,
    Deployment,
    LeaderWorkerSet,
    ResourceFlavor,
    Topology,
    Cohort,
    ClusterQueue,
    LocalQueue,
    WorkloadPriorityClass,
    Workload,
)


class ScenarioError(Exception):
    """Bad scenario input: one line naming the file or object and the field."""


@dataclass(frozen=True)
class SimJob:
    key: str  # "namespace/name" of the Job / Workload / pod group, as printed in events
    kind: str  # Job | Workload | PodGroup | StatefulSet | Deployment | LeaderWorkerSet
    workload: Workload
    info: WorkloadInfo  # creation_time = arrival
    arrival: float
    duration: float


@dataclass
class Scenario:
    nodes: list[Node] = field(default_factory=list)
    slices: list[ResourceSlice] = field(default_factory=list)
    classes: list[DeviceClass] = field(default_factory=list)
    templates: list[ResourceClaimTemplate] = field(default_factory=list)
    claims: list[ResourceClaim] = field(default_factory=list)
    running_pods: list[Pod] = field(default_factory=list)
    queues: QueueSpecs = field(default_factory=QueueSpecs)
    jobs: list[SimJob] = field(default_factory=list)
    objects: list[KubeObject] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------ reading
def read_documents(paths: Iterable[str]) -> list[tuple[dict[str, Any], str]]:
    """(document, where) for every object in the files (directories and Lists expanded)."""
    try:
        return manifests.read_documents(paths)
    except manifests.ManifestError as e:
        raise ScenarioError(str(e)) from None


def load_objects(paths: Iterable[str]) -> tuple[list[KubeObject], list[str]]:
    objs: list[KubeObject] = []
    warnings: list[str] = []
    seen: dict[tuple[str, str], str] = {}
    for doc, where in read_documents(paths):
        integ = by_kind(str(doc.get("apiVersion")), str(doc.get("kind"))) if isinstance(doc, dict) else None
        try:
            if integ is not None and integ.held_by == "suspend" and integ.model is KubeObject:
                o = KubeObject.model_validate(doc)  # a kind from a CRD (RayJob, ...): read by its adapter
            else:
                o = parse_object(doc)
        except ObjectError as e:
            if "unknown kind" in str(e):
                warnings.append(f"{where}: {e}; ignored")
                continue
            raise ScenarioError(str(e)) from None
        if not isinstance(o, _KINDS) and not _crd_kind(o):
            warnings.append(f"{where}: {o.kind} {o.key}: kind not used by the simulation; ignored")
            continue
        namespaced = (Job, Pod, Workload, LocalQueue, ResourceClaim, ResourceClaimTemplate, *POD_GATED_KINDS)
        if (isinstance(o, namespaced) or _crd_kind(o)) and not o.namespace:
            o.metadata.namespace = "default"
        problems = selector_problems(o)  # what the API server refuses: compile errors, cost
        if problems:
            raise ScenarioError(f"{o.kind} {o.key}: {problems[0]}")
        ident = (type(o).__name__, o.key)
        if ident in seen:
            raise ScenarioError(f"{o.kind} {o.key}: metadata.name: defined twice ({seen[ident]} and {where})")
        seen[ident] = where
        objs.append(o)
    return objs, warnings


def _duration(ref: str, annotations: dict[str, str], key: str, default: float | None) -> float:
    raw = annotations.get(key)
    if raw is None:
        if default is None:
            raise ScenarioError(
                f'{ref}: metadata.annotations[{key}]: missing (the run time once admitted, e.g. "10m")'
            )
        return default
    try:
        return parse_duration(raw)
    except ValueError as e:
        raise ScenarioError(f"{ref}: metadata.annotations[{key}]: {e}") from None


POD_GATED_KINDS = (StatefulSet, Deployment, LeaderWorkerSet)
# without a duration these run to the end of the simulation (a RayCluster too: it is done only when
# deleted or suspended again)
SERVING_KINDS = ("StatefulSet", "Deployment", "LeaderWorkerSet", "RayCluster")


def _crd_kind(o: KubeObject) -> Integration | None:
    """The registry entry of an object of a kind held by suspend and served from a CRD."""
    if type(o) is not KubeObject:
        return None
    integ = by_kind(o.api_version or "", o.kind or "")
    return integ if integ is not None and integ.held_by == "suspend" else None


def _suspend_kind(o: KubeObject) -> Integration | None:
    """The registry entry of an object held by suspend: a batch/v1 Job, or a CRD kind's object."""
    return by_kind("batch/v1", "Job") if isinstance(o, Job) else _crd_kind(o)


def _template_annotations(o: StatefulSet | Deployment | LeaderWorkerSet) -> dict[str, str]:
    if isinstance(o, LeaderWorkerSet):
        tmpl = o.spec.leader_worker_template.worker_template
    else:
        tmpl = o.spec.template
    return dict((tmpl.metadata or {}).get("annotations") or {})


def pod_gated_workloads(
    o: StatefulSet | Deployment | LeaderWorkerSet, wpcs: dict[str, int], pcs: dict[str, int]
) -> list[tuple[str, Workload]]:
    """(event key, Workload) per workload of a pod-gated object: the pods its controller creates, put
    into their groups and made Workloads by the controller's own adapters."""
    ns = o.namespace or "default"
    ref = f"{o.KIND} {o.key}"
    if QUEUE_NAME_LABEL not in o.labels:
        raise ScenarioError(
            f"{ref}: metadata.labels[{QUEUE_NAME_LABEL}]: missing (the LocalQueue to submit to)"
        )
    queue = o.labels[QUEUE_NAME_LABEL]
    o.metadata.uid = o.metadata.uid or f"sim-{o.KIND.lower()}-{o.key}"

    def queued(p: Pod) -> Pod:  # what deploy/'s policy does: the queue name on the pods
        p.metadata.labels = {**p.labels, QUEUE_NAME_LABEL: queue}
        return p

    groups: list[tuple[str, PodGroup]] = []
    try:
        if isinstance(o, StatefulSet):
            pods = [queued(p) for p in statefulset.pods_of(o)]
            if pods:
                m = statefulset.membership(pods[0], o)
                assert m is not None
                members = [with_membership(p, m) for p in pods]
                groups.append((o.key, statefulset.StatefulSetGroup(ns, m.group, members, o)))
        elif isinstance(o, Deployment):
            for i in range(deployment.replicas(o)):
                pod = queued(deployment.pod_of(o, f"{o.name}-{i}"))
                pod.metadata.uid = f"sim-pod-{ns}/{pod.name}"
                m = deployment.membership(pod)
                assert m is not None
                groups.append((pod.key, deployment.DeploymentPod(ns, m.group, [with_membership(pod, m)])))
        else:
            by_group: dict[str, list[Pod]] = {}
            for p in leaderworkerset.pods_of(o):
                m = leaderworkerset.membership(queued(p))
                assert m is not None
                by_group.setdefault(m.group, []).append(with_membership(p, m))
            for name, members in by_group.items():
                leader = next(p for p in members if p.labels.get(leaderworkerset.WORKER_INDEX_LABEL) == "0")
                groups.append((leader.key, leaderworkerset.LeaderWorkerSetGroup(ns, name, members, o)))
        out = []
        for key, group in groups:
            wl = group.workload(wpcs, pcs)
            assert wl is not None
            wl.metadata.uid = f"sim-{o.KIND.lower()}-{key}"
            wl.metadata.name = key.split("/", 1)[1]  # events name the object (as a Job's)
            out.append((key, wl))
        return out
    except WorkloadError as e:
        raise ScenarioError(str(e)) from None


def load_scenario(
    paths: Iterable[str], *, extended_resources: bool = True, verify: bool | None = None
) -> Scenario:
    """``verify``: verify mode of the conversions (``ApiContext.verify``; None: from
    ``QUEUEING_VERIFY``, as ``Simulation``)."""
    objs, warnings = load_objects(paths)
    sc = Scenario(objects=objs, warnings=warnings)
    if verify is None:
        verify = verify_from_env(os.environ)
    ctx = ApiContext.from_objects(objs, extended_resources=extended_resources, verify=verify)
    wpcs = dict(ctx.workload_priority_classes)
    pcs = dict(ctx.priority_classes)
    groups: dict[tuple[str, str], list[Pod]] = {}
    items: list[tuple[str, str, Workload, dict[str, str]]] = []  # (key, kind, workload, annotations)
    namespaces: set[str] = set()
    for o in objs:
        if isinstance(o, Node):
            sc.nodes.append(o)
        elif isinstance(o, ResourceSlice):
            sc.slices.append(o)
        elif isinstance(o, DeviceClass):
            sc.classes.append(o)
        elif isinstance(o, ResourceClaimTemplate):
            sc.templates.append(o)
        elif isinstance(o, ResourceClaim):
            sc.claims.append(o)
        elif (integ := _suspend_kind(o)) is not None:
            # Job, RayJob, RayCluster, JobSet: the Workload their adapter makes (the controller's)
            try:
                wl = integ.adapt(o).workload(wpcs, pcs)
            except WorkloadError as e:
                raise ScenarioError(str(e)) from None
            if wl is None:
                raise ScenarioError(
                    f"{integ.kind} {o.key}: metadata.labels[{QUEUE_NAME_LABEL}]: missing (the LocalQueue to submit to)"
                )
            wl.metadata.name = o.name  # events name the object
            wl.metadata.uid = o.metadata.uid or f"sim-{integ.kind.lower()}-{o.key}"
            items.append((o.key, integ.kind, wl, o.annotations))
        elif isinstance(o, POD_GATED_KINDS):
            for key, wl in pod_gated_workloads(o, wpcs, pcs):
                items.append((key, o.KIND, wl, {**_template_annotations(o), **o.annotations}))
        elif isinstance(o, Workload):
            if not o.spec.queue_name:
                raise ScenarioError(f"Workload {o.key}: spec.queueName: missing")
            o.metadata.uid = o.metadata.uid or f"sim-workload-{o.key}"
            items.append((o.key, "Workload", o, o.annotations))
        elif isinstance(o, Pod):
            group = o.labels.get(POD_GROUP_LABEL)
            if group:
                groups.setdefault((o.namespace or "default", group), []).append(o)
            elif o.spec.node_name:
                sc.running_pods.append(o)
            else:
                sc.warnings.append(
                    f"Pod {o.key}: neither in a pod group ({POD_GROUP_LABEL}) nor bound (spec.nodeName); ignored"
                )
    for (ns, group), pods in sorted(groups.items()):
        pods.sort(key=lambda p: p.name)
        try:
            wl = workload_for_pod_group(pods, wpcs, pcs)
        except WorkloadError as e:
            raise ScenarioError(str(e)) from None
        raw_total = pods[0].annotations.get("queueing.dra.io/pod-group-total-count", "0")
        if not (raw_total.isascii() and raw_total.isdigit() and len(raw_total) <= 10):
            raise ScenarioError(
                f"Pod {pods[0].key}: metadata.annotations[queueing.dra.io/pod-group-total-count]: "
                f"must be a non-negative integer, got {raw_total[:40]!r}"
            )
        total = int(raw_total)
        if len(pods) < total:
            raise ScenarioError(
                f"Pod {pods[0].key}: metadata.annotations[queueing.dra.io/pod-group-total-count]: "
                f"pod group {ns}/{group} has {len(pods)} of {total} pods in the scenario"
            )
        wl.metadata.name = group
        wl.metadata.uid = f"sim-pod-group-{ns}/{group}"
        items.append((f"{ns}/{group}", "PodGroup", wl, pods[0].annotations))
    keys: dict[str, str] = {}
    for key, kind, wl, ann in items:
        ref = f"{kind} {key}" if kind != "PodGroup" else f"Pod {key} (pod group)"
        if key in keys:
            raise ScenarioError(
                f"{ref}: metadata.name: {key} is also a {keys[key]}; simulated jobs need distinct names"
            )
        keys[key] = kind
        arrival = _duration(ref, ann, ARRIVAL_ANNOTATION, 0.0)
        # serving kinds without a duration run to the end of the simulation
        duration = _duration(ref, ann, DURATION_ANNOTATION, math.inf if kind in SERVING_KINDS else None)
        try:
            info = workload_info(wl, ctx, creation_time=arrival)
        except FromApiError as e:
            raise ScenarioError(str(e)) from None
        namespaces.add(info.namespace)
        sc.jobs.append(SimJob(key, kind, wl, info, arrival, duration))
    sc.jobs.sort(key=lambda j: (j.arrival, j.key))
    for o in objs:
        if isinstance(o, LocalQueue):
            namespaces.add(o.namespace or "default")
    sc.queues = queue_specs(objs, sorted(namespaces))
    return sc


def dumps(obj: object) -> str:
    return json.dumps(obj, separators=(", ", ": "))
