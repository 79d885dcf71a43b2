"""What a real cluster does around the controller, played by the test directly on the emulator's store
(so none of it counts as the controller's requests): the Job controller, the resourceclaim controller,
kube-scheduler (binding only pods whose claims are allocated; in NodeOnly and Auto mode it allocates
them with the project's allocator, as kube-scheduler's DRA plugin would: on the pinned node, all of
the pod's unallocated claims at once, in the pod's order, seeing every claim allocated in the cluster)
and the kubelet.

Everything reacts to the store's own watch events; ``step()`` is idempotent and derived from the
current state only, so no test depends on timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import Any

from queueing.api.core import Node
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceSlice
from queueing.dra.gang import ClusterState
from queueing.testing import Emulator
from queueing.testing.store import AdmissionRequest, Store

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


def suspend_queued_jobs(req: AdmissionRequest) -> dict[str, Any]:
    """Stand-in for deploy/'s MutatingAdmissionPolicy: a queued Job is created suspended."""
    obj = req.object
    if req.resource.plural == "jobs" and req.operation == "CREATE" and not req.subresource:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if "queueing.dra.io/queue-name" in labels:
            obj.setdefault("spec", {})["suspend"] = True
    return obj


def _done(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _cond_true(obj: dict[str, Any], type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


class StandIns:
    def __init__(self, emu: Emulator, *, allocate_claims: bool = True) -> None:
        self.emu = emu
        self.store: Store = emu.store
        # kube-scheduler allocates the claims it finds unallocated (NodeOnly, Auto); False for Full,
        # where it never should have to (a pod released before its claims were written is an error)
        self.allocate_claims = allocate_claims
        self.rt = {
            "jobs": self.store.resource("jobs", "batch"),
            "pods": self.store.resource("pods"),
            "claims": self.store.resource("resourceclaims", "resource.k8s.io"),
            "templates": self.store.resource("resourceclaimtemplates", "resource.k8s.io"),
            "nodes": self.store.resource("nodes"),
            "slices": self.store.resource("resourceslices", "resource.k8s.io"),
            "classes": self.store.resource("deviceclasses", "resource.k8s.io"),
        }
        self._task: asyncio.Task[None] | None = None
        self.not_ready_jobs: set[str] = set()  # the kubelet never gets these Jobs' pods Ready
        self.stuck_jobs: set[str] = set()  # these Jobs' pods do not go away when suspended (a finalizer)
        self.unscheduled_jobs: set[str] = set()  # kube-scheduler does not get to these Jobs' pods (yet)
        self.pods_created = 0
        self.errors: list[str] = []

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> StandIns:
        watchers = [
            self.store.watch(self.rt[k], None, str(self.store.rv), None, None, False)
            for k in ("jobs", "pods", "claims")
        ]
        self._task = asyncio.create_task(self._run(watchers))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self, watchers: list[Any]) -> None:
        try:
            while True:
                self.step()
                getters = [asyncio.ensure_future(w.queue.get()) for w in watchers]
                try:
                    await asyncio.wait(getters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for g in getters:
                        g.cancel()
                for w in watchers:
                    while not w.queue.empty():
                        w.queue.get_nowait()
        finally:
            for w in watchers:
                self.store.unwatch(w)

    def _list(self, kind: str, ns: str | None = None, labels: str | None = None) -> list[dict[str, Any]]:
        return self.store.list(self.rt[kind], ns, labels)[0]

    def step(self) -> None:
        for fn in (self._jobs, self._claims_for_pods, self._schedule, self._kubelet, self._release_claims):
            try:
                fn()
            except Exception as e:  # keep playing; the test sees it in .errors
                self.errors.append(f"{fn.__name__}: {type(e).__name__}: {e}")

    # ------------------------------------------------------------------ Job controller
    def _jobs(self) -> None:
        for job in self._list("jobs"):
            meta, spec = job["metadata"], job.get("spec") or {}
            ns, name = meta["namespace"], meta["name"]
            if _cond_true(job, "Complete") or _cond_true(job, "Failed"):
                continue
            pods = self._list("pods", ns, f"{JOB_NAME_LABEL}={name}")
            active = [p for p in pods if not _done(p)]
            succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
            status = dict(job.get("status") or {})
            if spec.get("suspend"):
                if name in self.stuck_jobs:
                    continue
                for p in active:
                    self.store.delete(self.rt["pods"], ns, p["metadata"]["name"])
                if status.get("startTime") or status.get("active"):
                    status.pop("startTime", None)
                    status["active"] = 0
                    self._set_status("jobs", ns, name, status)
                continue
            want = spec.get("completions") or spec.get("parallelism") or 1
            if succeeded >= want:
                status.update(
                    active=0,
                    succeeded=succeeded,
                    conditions=[{"type": "Complete", "status": "True", "reason": "CompletionsReached"}],
                )
                self._set_status("jobs", ns, name, status)
                continue
            parallelism = spec.get("parallelism", 1)
            missing = min(parallelism, want - succeeded) - len(active)
            tmpl = spec.get("template") or {}
            for _ in range(max(0, missing)):
                tmeta = tmpl.get("metadata") or {}
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{name}-{secrets.token_hex(3)}",
                        "namespace": ns,
                        "labels": {**(tmeta.get("labels") or {}), JOB_NAME_LABEL: name},
                        "annotations": dict(tmeta.get("annotations") or {}),
                        "ownerReferences": [
                            {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": meta["uid"],
                             "controller": True, "blockOwnerDeletion": True}
                        ],
                    },
                    "spec": tmpl.get("spec") or {},
                }  # fmt: skip
                self.store.create(self.rt["pods"], ns, pod)
                self.pods_created += 1
            if missing > 0 or not status.get("startTime"):
                status["startTime"] = status.get("startTime") or "2026-01-01T00:00:00Z"
                status["active"] = len(active) + max(0, missing)
                self._set_status("jobs", ns, name, status)

    def _set_status(self, kind: str, ns: str | None, name: str, status: dict[str, Any]) -> None:
        obj = self.store.get(self.rt[kind], ns, name)
        obj["status"] = status
        self.store.update(self.rt[kind], ns, name, obj, subresource="status")

    # ------------------------------------------------------------------ resourceclaim controller
    def _claims_for_pods(self) -> None:
        for pod in self._list("pods"):
            meta, spec = pod["metadata"], pod.get("spec") or {}
            if _done(pod):
                continue
            status = pod.get("status") or {}
            have = {s["name"] for s in status.get("resourceClaimStatuses") or []}
            new = list(status.get("resourceClaimStatuses") or [])
            for rc in spec.get("resourceClaims") or []:
                tname = rc.get("resourceClaimTemplateName")
                if not tname or rc["name"] in have:
                    continue
                tmpl = self.store.get(self.rt["templates"], meta["namespace"], tname)
                claim_name = f"{meta['name']}-{rc['name']}-{secrets.token_hex(3)}"
                self.store.create(
                    self.rt["claims"],
                    meta["namespace"],
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceClaim",
                        "metadata": {
                            "name": claim_name,
                            "namespace": meta["namespace"],
                            "annotations": {POD_CLAIM_ANNOTATION: rc["name"]},
                            "ownerReferences": [
                                {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"],
                                 "controller": True, "blockOwnerDeletion": True}
                            ],
                        },
                        "spec": (tmpl.get("spec") or {}).get("spec") or {},
                    },
                )  # fmt: skip
                new.append({"name": rc["name"], "resourceClaimName": claim_name})
            if len(new) != len(have):
                self._set_status(
                    "pods", meta["namespace"], meta["name"], {**status, "resourceClaimStatuses": new}
                )

    def _pod_claims(self, pod: dict[str, Any]) -> list[str] | None:
        """Names of the pod's claims, or None while one is not created yet."""
        out = []
        statuses = {
            s["name"]: s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        for rc in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = rc.get("resourceClaimName") or statuses.get(rc["name"])
            if not name:
                return None
            out.append(name)
        return out

    # ------------------------------------------------------------------ kube-scheduler
    def _schedule(self) -> None:
        for pod in self._list("pods"):
            meta, spec = pod["metadata"], pod.get("spec") or {}
            if spec.get("nodeName") or spec.get("schedulingGates") or _done(pod):
                continue
            if meta.get("labels", {}).get(JOB_NAME_LABEL) in self.unscheduled_jobs:
                continue
            node = (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
            if node is None:
                continue  # every test pod is pinned by the controller's plan
            names = self._pod_claims(pod)
            if names is None:
                continue
            ns = meta["namespace"]
            claims = [self.store.get(self.rt["claims"], ns, n) for n in names]
            unallocated = [c for c in claims if not (c.get("status") or {}).get("allocation")]
            if unallocated:
                if not self.allocate_claims or not self._allocate(unallocated, node):
                    continue
                claims = [self.store.get(self.rt["claims"], ns, n) for n in names]
            for c in claims:
                sel = (c["status"]["allocation"].get("nodeSelector") or {}).get("nodeSelectorTerms") or []
                values = [v for t in sel for f in t.get("matchFields") or [] for v in f.get("values") or []]
                if values and node not in values:
                    self.errors.append(f"pod {meta['name']}: claim {c['metadata']['name']} is not on {node}")
                    break
            else:
                for c in claims:
                    st = dict(c.get("status") or {})
                    reserved = list(st.get("reservedFor") or [])
                    if not any(r.get("uid") == meta["uid"] for r in reserved):
                        reserved.append({"resource": "pods", "name": meta["name"], "uid": meta["uid"]})
                        st["reservedFor"] = reserved
                        self._set_status("claims", ns, c["metadata"]["name"], st)
                self.store.bind(ns, meta["name"], node)

    def _allocate(self, claims: list[dict[str, Any]], node_name: str) -> bool:
        nodes = [Node.model_validate(n) for n in self._list("nodes")]
        node = next((n for n in nodes if n.name == node_name), None)
        if node is None:
            return False
        state = ClusterState(
            nodes,
            [ResourceSlice.model_validate(s) for s in self._list("slices")],
            [DeviceClass.model_validate(c) for c in self._list("classes")],
            claims=[ResourceClaim.model_validate(c) for c in self._list("claims")],
        )
        out = state.allocator.allocate([ResourceClaim.model_validate(c) for c in claims], [node], state.usage)
        if not out.allocated:
            return False
        for raw, ca in zip(claims, out.claims, strict=True):
            st = dict(raw.get("status") or {})
            st["allocation"] = ca.allocation.to_dict()
            self._set_status("claims", raw["metadata"]["namespace"], raw["metadata"]["name"], st)
        return True

    # ------------------------------------------------------------------ kubelet
    def _kubelet(self) -> None:
        for pod in self._list("pods"):
            spec, status = pod.get("spec") or {}, pod.get("status") or {}
            if pod["metadata"].get("labels", {}).get(JOB_NAME_LABEL) in self.not_ready_jobs:
                continue  # e.g. an image that never pulls
            if spec.get("nodeName") and status.get("phase") == "Pending":
                conds = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
                conds.append({"type": "Ready", "status": "True"})
                self._set_status(
                    "pods", pod["metadata"]["namespace"], pod["metadata"]["name"],
                    {**status, "phase": "Running", "conditions": conds},
                )  # fmt: skip

    def finish_pods(
        self, namespace: str, job: str, phase: str = "Succeeded", *, selector: str | None = None
    ) -> int:
        """The kubelet reports the Job's running pods (or those matching ``selector``) as finished."""
        n = 0
        for pod in self._list("pods", namespace, selector or f"{JOB_NAME_LABEL}={job}"):
            if (pod.get("status") or {}).get("phase") == "Running":
                self._set_status(
                    "pods", namespace, pod["metadata"]["name"], {**pod["status"], "phase": phase}
                )
                n += 1
        return n

    # ------------------------------------------------------------------ claim release
    def _release_claims(self) -> None:
        """Generated claims of finished pods are deleted; a claim nobody running uses is deallocated."""
        pods = {p["metadata"]["uid"]: p for p in self._list("pods")}
        for c in self._list("claims"):
            meta, st = c["metadata"], dict(c.get("status") or {})
            owner = next((o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"), None)
            if owner is not None and (owner["uid"] not in pods or _done(pods[owner["uid"]])):
                self.store.delete(self.rt["claims"], meta["namespace"], meta["name"])
                continue
            reserved = st.get("reservedFor") or []
            keep = [r for r in reserved if r.get("uid") in pods and not _done(pods[r["uid"]])]
            if reserved and not keep:
                st.pop("reservedFor", None)
                st.pop("allocation", None)
                self._set_status("claims", meta["namespace"], meta["name"], st)
