"""The Jobs the controller reads, with ``acceptKueueLabels``: ours and those labelled the Kueue way.

A label selector cannot say "this label or that one", so with the option on the controller runs a
second Job informer (``kueue.x-k8s.io/queue-name``) and reads both through :class:`JobSources`, which
answers ``list``/``get``/``observe`` like one informer (a Job with both labels is in both: ours is
read). The label lookup itself is ``queueing.scheduling.kueue_labels.job_label``.
"""

from __future__ import annotations

import builtins
from typing import Any

from queueing.api.core import Job
from queueing.kube.informer import Informer

__all__ = ["JobSources"]


class JobSources:
    def __init__(self, informers: builtins.list[Informer[Job]]) -> None:
        self.informers = informers

    def list(self) -> builtins.list[Job]:
        seen: dict[str, Job] = {}
        for inf in self.informers:
            for job in inf.list():
                seen.setdefault(job.key, job)
        return [seen[k] for k in sorted(seen)]

    def get(self, name: str, namespace: str | None = None) -> Job | None:
        for inf in self.informers:
            job = inf.get(name, namespace)
            if job is not None:
                return job
        return None

    def observe(self, raw: dict[str, Any]) -> Job | None:
        """Into each informer whose label the written Job carries (or already caches it)."""
        labels = (raw.get("metadata") or {}).get("labels") or {}
        meta = raw.get("metadata") or {}
        out: Job | None = None
        for inf in self.informers:
            if (
                inf.label_selector in labels
                or inf.get(meta.get("name", ""), meta.get("namespace")) is not None
            ):
                got = inf.observe(raw)
                out = out or got
        return out
