"""Stand-in JobSet controller (``jobset.x-k8s.io/v1alpha2``), see queueing/testing/operator.py.

Unsuspended, it makes ``replicas`` child Jobs per replicated Job (``<jobset>-<replicatedJob>-<index>``,
owned by the JobSet, labelled ``jobset.sigs.k8s.io/jobset-name``, ``.../replicatedjob-name`` and
``.../job-index`` on the Job and its pod template), which the stand-in Job controller runs; the
JobSet's ``simulate.queueing.dra.io/duration`` goes onto them. Suspended, it deletes the child Jobs
and their pods (they are made again from the templates on resume). When every child Job is
Complete, the JobSet gets ``Completed``; when one Failed, ``Failed``.
"""

from __future__ import annotations

import copy
from typing import Any

from queueing.integrations.jobset import JOBSET_NAME_LABEL
from queueing.testing.cluster import DURATION_ANNOTATION, JOB_NAME_LABEL, condition_true
from queueing.testing.operator import Key, Operator, owner_ref

__all__ = ["JobSetOperator"]

REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"


class JobSetOperator(Operator):
    group = "jobset.x-k8s.io"
    plural = "jobsets"
    children = (("jobs", "batch"), ("pods", ""))
    owner_label = JOBSET_NAME_LABEL

    def reconcile(self, key: Key) -> None:
        obj = self.get(key)
        if obj is None:
            return  # its Jobs go with it (garbage collection by owner)
        uid = obj["metadata"]["uid"]
        jobs = [
            j
            for j in self.children_of("jobs", "batch", key)
            if any(o.get("uid") == uid for o in j["metadata"].get("ownerReferences") or [])
        ]
        status = dict(obj.get("status") or {})
        if status.get("terminalState"):
            return
        spec = obj.get("spec") or {}
        if spec.get("suspend"):
            for j in jobs:
                self._delete_job(j)
            return
        by_name = {j["metadata"]["name"]: j for j in jobs}
        per_rjob: list[dict[str, Any]] = []
        total = done = 0
        failed = False
        for rj in spec.get("replicatedJobs") or []:
            rstatus = {
                "name": rj["name"],
                "ready": 0,
                "succeeded": 0,
                "failed": 0,
                "active": 0,
                "suspended": 0,
            }
            for i in range(rj.get("replicas", 1)):
                name = f"{key[1]}-{rj['name']}-{i}"
                total += 1
                job = by_name.get(name)
                if job is None:
                    self._make_job(obj, rj, i, name)
                    rstatus["active"] += 1
                elif condition_true(job, "Complete"):
                    rstatus["succeeded"] += 1
                    done += 1
                elif condition_true(job, "Failed"):
                    rstatus["failed"] += 1
                    failed = True
                else:
                    rstatus["active"] += 1
            per_rjob.append(rstatus)
        status["replicatedJobsStatus"] = per_rjob
        if failed or (total and done == total):
            kind = "Failed" if failed else "Completed"
            status["terminalState"] = kind
            status["conditions"] = [
                *(status.get("conditions") or []),
                {"type": kind, "status": "True", "reason": f"AllJobs{kind}" if not failed else "FailedJobs",
                 "message": f"jobset {kind.lower()}", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ]  # fmt: skip
        self.set_status(key, status)

    def _make_job(self, obj: dict[str, Any], rj: dict[str, Any], index: int, name: str) -> None:
        template = copy.deepcopy(rj.get("template") or {})
        ns = obj["metadata"]["namespace"]
        labels = {JOBSET_NAME_LABEL: obj["metadata"]["name"], REPLICATED_JOB_LABEL: rj["name"],
                  JOB_INDEX_LABEL: str(index)}  # fmt: skip
        meta = template.get("metadata") or {}
        pod_template = (template.setdefault("spec", {})).setdefault("template", {})
        pod_meta = pod_template.setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **labels}
        annotations = dict(meta.get("annotations") or {})
        duration = ((obj["metadata"].get("annotations")) or {}).get(DURATION_ANNOTATION)
        if duration is not None:
            annotations[DURATION_ANNOTATION] = duration
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {**(meta.get("labels") or {}), **labels},
                "annotations": annotations,
                "ownerReferences": [owner_ref(obj)],
            },
            "spec": template["spec"],
        }
        self.store.create(self.store.resource("jobs", "batch"), ns, job)

    def _delete_job(self, job: dict[str, Any]) -> None:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        pods = self.store.list(self.store.resource("pods"), ns, f"{JOB_NAME_LABEL}={name}")[0]
        for p in pods:
            self.delete("pods", "", p)
        self.delete("jobs", "batch", job)
