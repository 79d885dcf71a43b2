"""A stand-in cluster around the controller, played directly on the emulator's store (so none of it
counts as the controller's requests): the Job controller, the resourceclaim controller, kube-scheduler
(binding only pods whose claims are allocated; in NodeOnly and Auto mode it allocates them with the
project's allocator, as kube-scheduler's DRA plugin would: on the pinned node, all of the pod's
unallocated claims at once, in the pod's order, seeing every claim allocated in the cluster) and the
kubelet; and a stand-in operator per integrated kind served from a CRD (:func:`operators`: RayJob,
RayCluster, JobSet; Deployment, StatefulSet and LeaderWorkerSet: queueing/testing/operators.py), each
starting once its kind is served.

It is what the controller's end-to-end tests, ``bench/e2e.py`` and a local cluster run on; it is not
part of a production deployment.

Everything reads the stored objects themselves (shared watches and reads, never changed: every
write builds new dicts) and reacts to the store's own watch events, one object at a time (an event costs work in
proportion to what it touches, not to the cluster's size); ``step()`` is a full pass over the current
state, idempotent, so no test depends on timing.

Run times: a pod runs for its ``simulate.queueing.dra.io/duration`` annotation (the name ``queueing
simulate`` reads; from the pod, else from its Job), then the kubelet reports it ``Succeeded``; without
the annotation it runs until :meth:`StandIns.finish_pods`. With ``pods=False`` the Job controller
creates no pods at all and marks an unsuspended Job ``Complete`` after its duration: Kueue's own
performance test (``test/performance/scheduler``) measures admission this way.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable
from typing import Any

from queueing.api.core import Node
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceSlice
from queueing.dra.gang import ClusterState
from queueing.scheduling.config import parse_duration
from queueing.testing.emulator import Emulator
from queueing.testing.operator import next_events, pod_done
from queueing.testing.store import AdmissionRequest, ApiError, Store

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
DURATION_ANNOTATION = "simulate.queueing.dra.io/duration"

Key = tuple[str, str]  # (namespace, name)


def suspend_queued_jobs(req: AdmissionRequest) -> dict[str, Any]:
    """Stand-in for deploy/'s MutatingAdmissionPolicy: a queued Job is created suspended."""
    obj = req.object
    if req.resource.plural == "jobs" and req.operation == "CREATE" and not req.subresource:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if "queueing.dra.io/queue-name" in labels:
            obj.setdefault("spec", {})["suspend"] = True
    return obj


def condition_true(obj: dict[str, Any], type_: str) -> bool:
    """Whether the object's status has condition ``type_`` with status True."""
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def _key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


def duration_of(obj: dict[str, Any]) -> float | None:
    """The run time an object's ``simulate.queueing.dra.io/duration`` annotation names (None: none or
    unreadable, so it runs until told otherwise)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(DURATION_ANNOTATION)
    if raw is None:
        return None
    try:
        return parse_duration(raw)
    except ValueError:
        return None


def operators(standins: StandIns) -> list[Any]:
    """The stand-in operators of the integrated kinds (queueing/testing/operator.py), one per kind."""
    from queueing.testing.deployments import DeploymentController
    from queueing.testing.jobset import JobSetOperator
    from queueing.testing.leaderworkersets import LeaderWorkerSetController
    from queueing.testing.ray import RayClusterOperator, RayJobOperator
    from queueing.testing.statefulsets import StatefulSetController

    return [
        cls(standins)
        for cls in (
            RayJobOperator,
            RayClusterOperator,
            JobSetOperator,
            DeploymentController,
            StatefulSetController,
            LeaderWorkerSetController,
        )
    ]


class StandIns:
    def __init__(
        self,
        emu: Emulator,
        *,
        allocate_claims: bool = True,
        pods: bool = True,
        on_job_finished: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.emu = emu
        self.store: Store = emu.store
        # kube-scheduler allocates the claims it finds unallocated (NodeOnly, Auto); False for Full,
        # where it never should have to (a pod released before its claims were written is an error)
        self.allocate_claims = allocate_claims
        # False: Kueue's method, no pods; an unsuspended Job completes after its duration
        self.pods = pods
        self.on_job_finished = on_job_finished
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
        self._operator_tasks: list[asyncio.Task[None]] = []
        self.not_ready_jobs: set[str] = set()  # the kubelet never gets these Jobs' pods Ready
        self.stuck_jobs: set[str] = set()  # these Jobs' pods do not go away when suspended (a finalizer)
        self.unscheduled_jobs: set[str] = set()  # kube-scheduler does not get to these Jobs' pods (yet)
        self.pods_created = 0
        self.errors: list[str] = []
        # what the watches showed, kept per object (so that an event never lists the whole store)
        self._pods: dict[Key, dict[str, Any]] = {}
        self._pods_of_job: dict[Key, set[str]] = {}  # (namespace, job) -> pod names
        self._unbound: set[Key] = set()  # pods kube-scheduler has still to bind
        self._running: set[str] = set()  # uids of pods not finished
        self._claims: dict[Key, dict[str, Any]] = {}
        self._claims_of: dict[str, set[Key]] = {}  # pod uid -> claims it owns or is reserved for
        self._timers: dict[tuple[str, str, str, str], asyncio.TimerHandle] = {}  # (kind, ns, name, uid)

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> StandIns:
        watchers = [
            self.store.watch(self.rt[k], None, str(self.store.rv), None, None, False, shared=True)
            for k in ("jobs", "pods", "claims")
        ]
        self._task = asyncio.create_task(self._run(watchers))
        self._operator_tasks = [asyncio.create_task(op.run()) for op in operators(self)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in [t for t in (self._task, *self._operator_tasks) if t is not None]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()

    async def _run(self, watchers: list[Any]) -> None:
        try:
            self.step()
            while True:
                got = await next_events(watchers)
                self._react(
                    [
                        (kind, ev)
                        for kind, evs in zip(("jobs", "pods", "claims"), got, strict=True)
                        for ev in evs
                    ]
                )
        finally:
            for w in watchers:
                self.store.unwatch(w)

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as e:  # keep playing; the test sees it in .errors
            self.errors.append(f"{fn.__name__}: {type(e).__name__}: {e}")

    def _list(self, kind: str, ns: str | None = None, labels: str | None = None) -> list[dict[str, Any]]:
        return self.store.list(self.rt[kind], ns, labels, share=True)[0]

    def _get(self, kind: str, key: Key) -> dict[str, Any] | None:
        try:
            return self.store.get(self.rt[kind], key[0] or None, key[1], share=True)
        except ApiError:
            return None

    def step(self) -> None:
        """A full pass over the current state (also what the first event does)."""
        self._pods = {_key(p): p for p in self._list("pods")}
        self._pods_of_job, self._unbound, self._running = {}, set(), set()
        for k, p in self._pods.items():
            self._index_pod(k, p)
        self._claims, self._claims_of = {}, {}
        for c in self._list("claims"):
            self._put_claim(c)
        for job in self._list("jobs"):
            self._guard(self._job, _key(job))
        for k in list(self._pods):
            self._guard(self._pod, k)
        for k in list(self._claims):
            self._guard(self._release_claim, k)

    def _put_claim(self, claim: dict[str, Any]) -> None:
        k = _key(claim)
        self._claims[k] = claim
        for o in claim["metadata"].get("ownerReferences") or []:
            self._claims_of.setdefault(o.get("uid", ""), set()).add(k)
        for r in (claim.get("status") or {}).get("reservedFor") or []:
            self._claims_of.setdefault(r.get("uid", ""), set()).add(k)

    def _index_pod(self, k: Key, pod: dict[str, Any]) -> None:
        uid = pod["metadata"].get("uid", "")
        if pod_done(pod):
            self._running.discard(uid)
        else:
            self._running.add(uid)
        job = ((pod.get("metadata") or {}).get("labels") or {}).get(JOB_NAME_LABEL)
        if job:
            self._pods_of_job.setdefault((k[0], job), set()).add(k[1])
        spec = pod.get("spec") or {}
        if not spec.get("nodeName") and not pod_done(pod):
            self._unbound.add(k)
        else:
            self._unbound.discard(k)

    def _react(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        jobs: dict[Key, None] = {}
        pods: dict[Key, None] = {}
        gone_pods: list[dict[str, Any]] = []
        claims_changed = False
        for kind, ev in events:
            obj = ev.get("object") or {}
            if ev.get("type") == "BOOKMARK" or "metadata" not in obj:
                continue
            k = _key(obj)
            if kind == "jobs":
                jobs[k] = None
            elif kind == "pods":
                job = ((obj["metadata"].get("labels")) or {}).get(JOB_NAME_LABEL)
                if ev["type"] == "DELETED":
                    self._pods.pop(k, None)
                    self._unbound.discard(k)
                    self._running.discard(obj["metadata"].get("uid", ""))
                    if job:
                        self._pods_of_job.get((k[0], job), set()).discard(k[1])
                    gone_pods.append(obj)
                else:
                    self._pods[k] = obj
                    self._index_pod(k, obj)
                    pods[k] = None
                    if pod_done(obj):
                        gone_pods.append(obj)
                if job:
                    jobs[(k[0], job)] = None
            else:
                claims_changed = True
                if ev["type"] == "DELETED":
                    self._claims.pop(k, None)
                else:
                    self._put_claim(obj)
        for k in jobs:
            self._guard(self._job, k)
        for k in pods:
            self._guard(self._pod, k)
        if claims_changed:
            for k in list(self._unbound - set(pods)):
                self._guard(self._schedule_pod, k)
        for pod in gone_pods:
            self._guard(self._release_claims_of, pod)

    # ------------------------------------------------------------------ Job controller
    def _job(self, key: Key) -> None:
        job = self._get("jobs", key)
        if job is None:
            for t in [t for t in self._timers if t[:3] == ("jobs", *key)]:
                self._timers.pop(t).cancel()
            return
        meta, spec = job["metadata"], job.get("spec") or {}
        ns, name = key
        if condition_true(job, "Complete") or condition_true(job, "Failed"):
            return
        if not self.pods:
            self._job_without_pods(job)
            return
        pods = [p for n in self._pods_of_job.get(key, ()) if (p := self._pods.get((ns, n))) is not None]
        active = [p for p in pods if not pod_done(p)]
        succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        status = dict(job.get("status") or {})
        if spec.get("suspend"):
            if name in self.stuck_jobs:
                return
            for p in active:
                with contextlib.suppress(ApiError):  # already gone
                    self.store.delete(self.rt["pods"], ns, p["metadata"]["name"])
            if status.get("startTime") or status.get("active"):
                status.pop("startTime", None)
                status["active"] = 0
                self._set_status("jobs", ns, name, status)
            return
        want = spec.get("completions") or spec.get("parallelism") or 1
        if succeeded >= want:
            self._complete(job, status, succeeded)
            return
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
            created = self.store.create(self.rt["pods"], ns, pod)
            self._pods[_key(created)] = created
            self._index_pod(_key(created), created)
            self.pods_created += 1
        if missing > 0 or not status.get("startTime"):
            status["startTime"] = status.get("startTime") or "2026-01-01T00:00:00Z"
            status["active"] = len(active) + max(0, missing)
            self._set_status("jobs", ns, name, status)

    def _complete(self, job: dict[str, Any], status: dict[str, Any], succeeded: int) -> None:
        status.update(
            active=0,
            succeeded=succeeded,
            conditions=[{"type": "Complete", "status": "True", "reason": "CompletionsReached"}],
        )
        self._set_status("jobs", *_key(job), status)
        if self.on_job_finished is not None:
            self.on_job_finished(job)

    def _job_without_pods(self, job: dict[str, Any]) -> None:
        """Kueue's method: an unsuspended Job runs for its duration and completes, without pods."""
        ns, name = _key(job)
        timer = ("jobs", ns, name, job["metadata"]["uid"])
        if (job.get("spec") or {}).get("suspend"):
            if (t := self._timers.pop(timer, None)) is not None:
                t.cancel()
            return
        if timer in self._timers:
            return
        seconds = duration_of(job) or duration_of((job.get("spec") or {}).get("template") or {})
        if seconds is None:
            return
        self._timers[timer] = asyncio.get_running_loop().call_later(
            seconds, self._guard, self._timer_job_done, timer
        )

    def _timer_job_done(self, timer: tuple[str, str, str, str]) -> None:
        self._timers.pop(timer, None)
        job = self._get("jobs", (timer[1], timer[2]))
        if job is None or job["metadata"]["uid"] != timer[3] or (job.get("spec") or {}).get("suspend"):
            return
        if condition_true(job, "Complete") or condition_true(job, "Failed"):
            return
        spec = job.get("spec") or {}
        self._complete(
            job, dict(job.get("status") or {}), spec.get("completions") or spec.get("parallelism") or 1
        )

    def _set_status(self, kind: str, ns: str | None, name: str, status: dict[str, Any]) -> None:
        obj = self.store.get(self.rt[kind], ns or None, name, share=True)
        body = {**obj, "metadata": dict(obj["metadata"]), "status": status}
        self.store.update(self.rt[kind], ns or None, name, body, subresource="status", share=True)

    # ------------------------------------------------------------------ one pod
    def _pod(self, key: Key) -> None:
        pod = self._pods.get(key)
        if pod is None or pod_done(pod):
            return
        self._claims_for_pod(pod)
        self._schedule_pod(key)
        pod = self._pods.get(key)
        if pod is not None:
            self._kubelet(pod)

    # ------------------------------------------------------------------ resourceclaim controller
    def _claims_for_pod(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        status = pod.get("status") or {}
        have = {s["name"] for s in status.get("resourceClaimStatuses") or []}
        new = list(status.get("resourceClaimStatuses") or [])
        for rc in spec.get("resourceClaims") or []:
            tname = rc.get("resourceClaimTemplateName")
            if not tname or rc["name"] in have:
                continue
            tmpl = self.store.get(self.rt["templates"], meta["namespace"], tname, share=True)
            claim_name = f"{meta['name']}-{rc['name']}-{secrets.token_hex(3)}"
            created = self.store.create(
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
            self._put_claim(created)
            new.append({"name": rc["name"], "resourceClaimName": claim_name})
        if len(new) != len(have):
            self._set_status(
                "pods", meta["namespace"], meta["name"], {**status, "resourceClaimStatuses": new}
            )
            self._refresh_pod((meta["namespace"], meta["name"]))

    def _refresh_pod(self, key: Key) -> None:
        pod = self._get("pods", key)
        if pod is not None:
            self._pods[key] = pod
            self._index_pod(key, pod)

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
    def _schedule_pod(self, key: Key) -> None:
        pod = self._pods.get(key)
        if pod is None:
            return
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if spec.get("nodeName") or spec.get("schedulingGates") or pod_done(pod):
            return
        if meta.get("labels", {}).get(JOB_NAME_LABEL) in self.unscheduled_jobs:
            return
        node = (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
        if node is None:
            return  # every pod here is pinned by the controller's plan
        names = self._pod_claims(pod)
        if names is None:
            return
        ns = meta["namespace"]
        claims = [self.store.get(self.rt["claims"], ns, n, share=True) for n in names]
        unallocated = [c for c in claims if not (c.get("status") or {}).get("allocation")]
        if unallocated:
            if not self.allocate_claims or not self._allocate(unallocated, node):
                return
            claims = [self.store.get(self.rt["claims"], ns, n, share=True) for n in names]
        for c in claims:
            sel = (c["status"]["allocation"].get("nodeSelector") or {}).get("nodeSelectorTerms") or []
            values = [v for t in sel for f in t.get("matchFields") or [] for v in f.get("values") or []]
            if values and node not in values:
                self.errors.append(f"pod {meta['name']}: claim {c['metadata']['name']} is not on {node}")
                return
        for c in claims:
            st = dict(c.get("status") or {})
            reserved = list(st.get("reservedFor") or [])
            if not any(r.get("uid") == meta["uid"] for r in reserved):
                reserved.append({"resource": "pods", "name": meta["name"], "uid": meta["uid"]})
                st["reservedFor"] = reserved
                self._set_status("claims", ns, c["metadata"]["name"], st)
        self.store.bind(ns, meta["name"], node)
        self._refresh_pod(key)

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
    def _kubelet(self, pod: dict[str, Any]) -> None:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        meta = pod["metadata"]
        if meta.get("labels", {}).get(JOB_NAME_LABEL) in self.not_ready_jobs:
            return  # e.g. an image that never pulls
        if spec.get("nodeName") and status.get("phase") == "Pending":
            conds = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
            conds.append({"type": "Ready", "status": "True"})
            self._set_status(
                "pods", meta["namespace"], meta["name"], {**status, "phase": "Running", "conditions": conds}
            )
            self._start_run_timer(pod)

    def _start_run_timer(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        seconds = duration_of(pod)
        if seconds is None:
            job = meta.get("labels", {}).get(JOB_NAME_LABEL)
            owner = self._get("jobs", (meta["namespace"], job)) if job else None
            seconds = duration_of(owner) if owner is not None else None
        if seconds is None:
            return
        timer = ("pods", meta["namespace"], meta["name"], meta["uid"])
        if timer not in self._timers:
            self._timers[timer] = asyncio.get_running_loop().call_later(
                seconds, self._guard, self._timer_pod_done, timer
            )

    def _timer_pod_done(self, timer: tuple[str, str, str, str]) -> None:
        self._timers.pop(timer, None)
        pod = self._get("pods", (timer[1], timer[2]))
        if pod is None or pod["metadata"]["uid"] != timer[3]:
            return
        if (pod.get("status") or {}).get("phase") == "Running":
            self._set_status("pods", timer[1], timer[2], {**pod["status"], "phase": "Succeeded"})

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
    def _release_claims_of(self, pod: dict[str, Any]) -> None:
        """Claims a finished or deleted pod owned are deleted; a claim nobody running uses is deallocated."""
        for k in sorted(self._claims_of.pop(pod["metadata"]["uid"], ())):
            self._release_claim(k)

    def _release_claim(self, key: Key) -> None:
        c = self._claims.get(key)
        if c is None:
            return
        meta, st = c["metadata"], dict(c.get("status") or {})
        running = self._running
        owner = next((o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"), None)
        if owner is not None and owner["uid"] not in running:
            with contextlib.suppress(ApiError):  # already gone
                self.store.delete(self.rt["claims"], meta["namespace"], meta["name"])
            self._claims.pop(key, None)
            return
        reserved = st.get("reservedFor") or []
        keep = [r for r in reserved if r.get("uid") in running]
        if reserved and not keep:
            st.pop("reservedFor", None)
            st.pop("allocation", None)
            self._set_status("claims", meta["namespace"], meta["name"], st)
