"""The KubeRay adapters: ``ray.io/v1`` RayJob and RayCluster, both held by ``spec.suspend``.

Pod sets (as Kueue derives them): ``head`` (count 1) from ``headGroupSpec.template``, then one per
worker group, named by its ``groupName``, count ``replicas × numOfHosts`` (replicas default 1),
``minCount = minReplicas × numOfHosts`` when ``minReplicas`` is below ``replicas`` (partial
admission: the worker group starts with the admitted ``replicas``, its own kept in the annotation
``queueing.dra.io/original-replicas`` and restored on suspension).

Done: a RayJob when ``status.jobStatus`` is terminal (SUCCEEDED, FAILED, STOPPED; succeeded only for
SUCCEEDED); a RayCluster has no end of its own: it is done when deleted (its Workload goes with it)
or when suspended again after it was started (``spec.suspend: true`` while its head template still
carries the admission's Workload UID; an eviction's suspension takes that label off).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from queueing.api.core import Pod
from queueing.api.v1beta1 import (
    GATE_PLACEMENT,
    POD_SET_LABEL,
    WORKLOAD_UID_LABEL,
    PodSet,
)
from queueing.integrations.base import (
    PodSetStart,
    StartPatch,
    apply_start,
    copy_spec,
    replace_spec,
    strip_start,
)
from queueing.integrations.workloads import ObjectJob, count_of, pod_template
from queueing.scheduling.jobs import WorkloadError

__all__ = ["ORIGINAL_REPLICAS_ANNOTATION", "RAY_CLUSTER_LABEL", "RayCluster", "RayJob"]

GROUP = "ray.io"
ORIGINAL_REPLICAS_ANNOTATION = "queueing.dra.io/original-replicas"
RAY_CLUSTER_LABEL = "ray.io/cluster"  # KubeRay's label on every pod of a cluster
TERMINAL_JOB_STATUSES = ("SUCCEEDED", "FAILED", "STOPPED")


class _RayCommon(ObjectJob):
    """What RayJob and RayCluster share: a cluster spec (head + worker groups) at ``_cluster_path``."""

    group = GROUP

    _cluster_path: tuple[str, ...] = ()

    def _cluster(self, spec: dict[str, Any]) -> dict[str, Any]:
        for part in self._cluster_path:
            spec = spec.get(part) or {}
        return spec

    def _where(self, field: str) -> str:
        return ".".join(("spec", *self._cluster_path, field))

    def _groups(self, spec: dict[str, Any]) -> list[dict[str, Any]]:
        groups = self._cluster(spec).get("workerGroupSpecs") or []
        if not isinstance(groups, list):
            raise WorkloadError(f"{self.ref}: {self._where('workerGroupSpecs')}: not a list")
        return groups

    def _originals(self) -> dict[str, int]:
        raw = self.obj.annotations.get(ORIGINAL_REPLICAS_ANNOTATION)
        try:
            got = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        return {k: v for k, v in got.items() if isinstance(v, int)} if isinstance(got, dict) else {}

    def pod_sets(self) -> list[PodSet]:
        spec = self.raw.get("spec") or {}
        cluster = self._cluster(spec)
        head = cluster.get("headGroupSpec")
        where = self._where("headGroupSpec.template")
        out = [
            PodSet(name="head", template=pod_template((head or {}).get("template"), self.ref, where), count=1)
        ]
        originals = self._originals()
        for i, g in enumerate(self._groups(spec)):
            at = self._where(f"workerGroupSpecs[{i}]")
            name = g.get("groupName")
            if not isinstance(name, str) or not name:
                raise WorkloadError(f"{self.ref}: {at}.groupName: missing")
            if name.lower() == "head" or any(p.name == name.lower() for p in out):
                raise WorkloadError(f"{self.ref}: {at}.groupName: {name!r} is not unique")
            hosts = count_of(g.get("numOfHosts"), self.ref, f"{at}.numOfHosts") or 1
            replicas = originals.get(name, count_of(g.get("replicas"), self.ref, f"{at}.replicas"))
            min_replicas = g.get("minReplicas")
            min_count = None
            if min_replicas is not None:
                low = count_of(min_replicas, self.ref, f"{at}.minReplicas")
                if low > replicas:
                    raise WorkloadError(
                        f"{self.ref}: {at}.minReplicas: {low} is more than replicas ({replicas})"
                    )
                if 0 < low < replicas:
                    min_count = low * hosts
            out.append(
                PodSet(
                    name=name.lower(),
                    template=pod_template(g.get("template"), self.ref, f"{at}.template"),
                    count=replicas * hosts,
                    min_count=min_count,
                )
            )
        return out

    def _pod_templates(self) -> dict[str, dict[str, Any]]:
        spec = self.raw.get("spec") or {}
        cluster = self._cluster(spec)
        out = {"head": (cluster.get("headGroupSpec") or {}).get("template") or {}}
        for g in self._groups(spec):
            out[str(g.get("groupName", "")).lower()] = g.get("template") or {}
        return out

    def _spec_at(self, spec: dict[str, Any]) -> dict[str, Any]:
        at = spec
        for part in self._cluster_path:
            at = at.setdefault(part, {})
        return at

    def start_patch(self, starts: Mapping[str, PodSetStart]) -> StartPatch:
        """``spec.suspend: false`` and every pod template with its start (the whole spec in one JSON
        patch: the worker groups are a list); a partially admitted worker group gets the admitted
        replicas, its own kept in ``queueing.dra.io/original-replicas``."""
        spec = copy_spec(self.obj)
        cluster = self._spec_at(spec)
        if "head" in starts:
            apply_start(cluster.setdefault("headGroupSpec", {}).setdefault("template", {}), starts["head"])
        originals = self._originals()
        lowered: dict[str, int] = {}
        for g in cluster.get("workerGroupSpecs") or []:
            name = str(g.get("groupName", ""))
            start = starts.get(name.lower())
            if start is None:
                continue
            apply_start(g.setdefault("template", {}), start)
            hosts = g.get("numOfHosts") or 1
            own = originals.get(name, g.get("replicas", 1))
            if start.count is not None and start.count // hosts < own:
                g["replicas"] = start.count // hosts
                lowered[name] = own
            else:
                g["replicas"] = own
        spec["suspend"] = False
        kept = {ORIGINAL_REPLICAS_ANNOTATION: json.dumps(lowered) if lowered else None}
        return StartPatch(replace_spec(self.obj, spec, kept), "json")

    def suspend_patch(self) -> list[dict[str, Any]]:
        """``spec.suspend: true`` with the admission's marks taken out of the templates and a partial
        admission's worker replicas given back."""
        spec = copy_spec(self.obj)
        cluster = self._spec_at(spec)
        marks = (WORKLOAD_UID_LABEL, POD_SET_LABEL)
        strip_start((cluster.get("headGroupSpec") or {}).get("template") or {}, marks, GATE_PLACEMENT)
        originals = self._originals()
        for g in cluster.get("workerGroupSpecs") or []:
            strip_start(g.get("template") or {}, marks, GATE_PLACEMENT)
            if str(g.get("groupName", "")) in originals:
                g["replicas"] = originals[str(g["groupName"])]
        spec["suspend"] = True
        return replace_spec(self.obj, spec, {ORIGINAL_REPLICAS_ANNOTATION: None})

    def _started(self) -> bool:
        """Its head template carries an admission's Workload UID (it was started, not suspended since
        by an eviction)."""
        head = self._pod_templates().get("head") or {}
        return WORKLOAD_UID_LABEL in ((head.get("metadata") or {}).get("labels") or {})

    def _cluster_name(self) -> str:
        return self.obj.name

    def owns(self, pods: Iterable[Pod]) -> list[Pod]:
        uid, ns, cluster = self.obj.metadata.uid, self.obj.namespace, self._cluster_name()
        return [
            p
            for p in pods
            if p.namespace == ns
            and (
                p.labels.get(RAY_CLUSTER_LABEL) == cluster
                or any(o.controller and o.uid == uid for o in p.metadata.owner_references or [])
            )
        ]


class RayJob(_RayCommon):
    """``ray.io/v1`` RayJob: its cluster spec is ``spec.rayClusterSpec``."""

    _cluster_path = ("rayClusterSpec",)

    def finished(self) -> tuple[bool, bool]:
        status = str((self.raw.get("status") or {}).get("jobStatus") or "")
        if status in TERMINAL_JOB_STATUSES:
            return True, status == "SUCCEEDED"
        return False, False

    def _cluster_name(self) -> str:
        return str((self.raw.get("status") or {}).get("rayClusterName") or self.obj.name)


class RayCluster(_RayCommon):
    """``ray.io/v1`` RayCluster: head and worker groups directly under ``spec``."""

    _cluster_path = ()

    def finished(self) -> tuple[bool, bool]:
        """Suspended again by its user after it was started: done (there is no failure)."""
        return (True, True) if self.is_suspended() and self._started() else (False, False)
