"""The Jobs the controller reads, with ``acceptKueueLabels``: ours and those labelled the Kueue way.

A label selector cannot say "this label or that one", so with the option on the controller runs a
second Job informer (``kueue.x-k8s.io/queue-name``) and reads both through :class:`JobSources`, which
answers like one informer (``list``/``keys``/``get``/``get_key``/``observe``/``add_mirror``; a Job
with both labels is in both: ours is read). The label lookup itself is
``queueing.scheduling.kueue_labels.job_label``.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
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

    def keys(self) -> builtins.list[str]:
        return sorted({k for inf in self.informers for k in inf.keys()})  # noqa: SIM118  (a method)

    def get(self, name: str, namespace: str | None = None) -> Job | None:
        return self.get_key(f"{namespace}/{name}" if namespace else name)

    def get_key(self, key: str) -> Job | None:
        for inf in self.informers:
            job = inf.get_key(key)
            if job is not None:
                return job
        return None

    def add_mirror(self, mirror: Callable[[Job | None, Job | None], None]) -> None:
        for inf in self.informers:
            inf.add_mirror(mirror)

    def observe(self, raw: dict[str, Any]) -> Job | None:
        """Into each informer whose label the written Job carries (or that already caches it)."""
        meta = raw.get("metadata") or {}
        labels = meta.get("labels") or {}
        out: Job | None = None
        for inf in self.informers:
            if (
                inf.label_selector in labels
                or inf.get(meta.get("name", ""), meta.get("namespace")) is not None
            ):
                got = inf.observe(raw)
                out = out or got
        return out
