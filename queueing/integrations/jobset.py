"""The JobSet adapter: ``jobset.x-k8s.io/v1alpha2`` JobSet, held by ``spec.suspend``.

Pod sets (as Kueue derives them): one per ``spec.replicatedJobs[]`` entry, named by its ``name``,
count ``replicas × parallelism`` (each default 1; parallelism capped by completions, as for a Job);
no partial admission. Done when its ``Completed`` or ``Failed`` condition is True. Its child Jobs
(made by the JobSet controller, owned by the JobSet) are not queued on their own.
"""

from __future__ import annotations

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

__all__ = ["JOBSET_NAME_LABEL", "JobSet"]

GROUP = "jobset.x-k8s.io"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # the JobSet controller's label on its Jobs and pods


class JobSet(ObjectJob):
    """A JobSet: one pod set per replicated Job, held by ``spec.suspend``."""

    group = GROUP

    def _replicated(self, spec: dict[str, Any]) -> list[dict[str, Any]]:
        rjobs = spec.get("replicatedJobs") or []
        if not isinstance(rjobs, list):
            raise WorkloadError(f"{self.ref}: spec.replicatedJobs: not a list")
        return rjobs

    def pod_sets(self) -> list[PodSet]:
        out: list[PodSet] = []
        for i, rj in enumerate(self._replicated(self.raw.get("spec") or {})):
            at = f"spec.replicatedJobs[{i}]"
            name = rj.get("name")
            if not isinstance(name, str) or not name:
                raise WorkloadError(f"{self.ref}: {at}.name: missing")
            if any(p.name == name for p in out):
                raise WorkloadError(f"{self.ref}: {at}.name: {name!r} is not unique")
            replicas = count_of(rj.get("replicas"), self.ref, f"{at}.replicas")
            job = (rj.get("template") or {}).get("spec") or {}
            parallelism = count_of(job.get("parallelism"), self.ref, f"{at}.template.spec.parallelism")
            completions = job.get("completions")
            if completions is not None:
                parallelism = min(
                    parallelism, count_of(completions, self.ref, f"{at}.template.spec.completions")
                )
            out.append(
                PodSet(
                    name=name,
                    template=pod_template(job.get("template"), self.ref, f"{at}.template.spec.template"),
                    count=replicas * parallelism,
                )
            )
        return out

    def start_patch(self, starts: Mapping[str, PodSetStart]) -> StartPatch:
        """``spec.suspend: false`` and each replicated Job's pod template with its start (the whole
        spec in one JSON patch)."""
        spec = copy_spec(self.obj)
        for rj in spec.get("replicatedJobs") or []:
            start = starts.get(str(rj.get("name", "")))
            if start is not None:
                job = rj.setdefault("template", {}).setdefault("spec", {})
                apply_start(job.setdefault("template", {}), start)
        spec["suspend"] = False
        return StartPatch(replace_spec(self.obj, spec), "json")

    def suspend_patch(self) -> list[dict[str, Any]]:
        spec = copy_spec(self.obj)
        for rj in spec.get("replicatedJobs") or []:
            tmpl = ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
            strip_start(tmpl, (WORKLOAD_UID_LABEL, POD_SET_LABEL), GATE_PLACEMENT)
        spec["suspend"] = True
        return replace_spec(self.obj, spec)

    def finished(self) -> tuple[bool, bool]:
        for c in (self.raw.get("status") or {}).get("conditions") or []:
            if c.get("status") == "True" and c.get("type") in ("Completed", "Failed"):
                return True, c["type"] == "Completed"
        return False, False

    def owns(self, pods: Iterable[Pod]) -> list[Pod]:
        return [
            p
            for p in pods
            if p.namespace == self.obj.namespace and p.labels.get(JOBSET_NAME_LABEL) == self.obj.name
        ]
