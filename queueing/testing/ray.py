"""Stand-in KubeRay operator for RayCluster and RayJob (``ray.io/v1``), see queueing/testing/operator.py.

Unsuspended, it makes the pods KubeRay would: one head pod from ``headGroupSpec.template`` and
``replicas × numOfHosts`` pods per worker group from its template, labelled ``ray.io/cluster``,
``ray.io/node-type`` and ``ray.io/group`` and owned by the object; suspended, it deletes them. A
RayJob's cluster is its own (KubeRay makes a RayCluster and a submitter; the stand-in makes the
cluster's pods directly and names the cluster after the RayJob): once every pod runs, the RayJob is
RUNNING, and after its ``simulate.queueing.dra.io/duration`` it is SUCCEEDED and its pods are deleted
(``shutdownAfterJobFinishes``). Without a duration it runs until its status is set otherwise.
"""

from __future__ import annotations

from typing import Any

from queueing.integrations.ray import RAY_CLUSTER_LABEL
from queueing.testing.operator import Key, Operator, pod_done

__all__ = ["RayClusterOperator", "RayJobOperator"]

NODE_TYPE_LABEL = "ray.io/node-type"
GROUP_LABEL = "ray.io/group"
HEAD_GROUP = "headgroup"


class RayClusterOperator(Operator):
    group = "ray.io"
    plural = "rayclusters"
    owner_label = RAY_CLUSTER_LABEL
    cluster_path: tuple[str, ...] = ()

    def cluster(self, obj: dict[str, Any]) -> dict[str, Any]:
        at = obj.get("spec") or {}
        for part in self.cluster_path:
            at = at.get(part) or {}
        return at

    def pods_of(self, obj: dict[str, Any], key: Key) -> list[dict[str, Any]]:
        uid = obj["metadata"]["uid"]
        return [
            p
            for p in self.children_of("pods", "", key)
            if any(o.get("uid") == uid for o in p["metadata"].get("ownerReferences") or [])
            and not p["metadata"].get("deletionTimestamp")
        ]

    def sync_pods(self, obj: dict[str, Any], key: Key) -> list[dict[str, Any]]:
        """Make the missing pods per group (and delete extra ones); the live pods after."""
        cluster = self.cluster(obj)
        want: dict[str, tuple[int, dict[str, Any], str]] = {
            HEAD_GROUP: (1, (cluster.get("headGroupSpec") or {}).get("template") or {}, "head")
        }
        for g in cluster.get("workerGroupSpecs") or []:
            count = (g.get("replicas", 1) or 0) * (g.get("numOfHosts") or 1)
            want[g["groupName"]] = (count, g.get("template") or {}, "worker")
        live = [p for p in self.pods_of(obj, key) if not pod_done(p)]
        by_group: dict[str, list[dict[str, Any]]] = {}
        for p in live:
            by_group.setdefault((p["metadata"].get("labels") or {}).get(GROUP_LABEL, ""), []).append(p)
        for group, pods in by_group.items():
            count = want.get(group, (0, {}, ""))[0]
            for p in sorted(pods, key=lambda p: p["metadata"]["name"])[count:]:
                self.delete("pods", "", p)
        for group, (count, template, node_type) in want.items():
            name = f"{key[1]}-head" if node_type == "head" else f"{key[1]}-{group}-worker"
            labels = {RAY_CLUSTER_LABEL: key[1], NODE_TYPE_LABEL: node_type, GROUP_LABEL: group}
            for _ in range(count - len(by_group.get(group, []))):
                self.make_pod(obj, template, name, labels)
        return [p for p in self.pods_of(obj, key) if not pod_done(p)]

    def stop_pods(self, obj: dict[str, Any], key: Key) -> None:
        for p in self.pods_of(obj, key):
            self.delete("pods", "", p)

    def reconcile(self, key: Key) -> None:
        obj = self.get(key)
        if obj is None:
            return  # its pods go with it (garbage collection by owner)
        status = dict(obj.get("status") or {})
        if (obj.get("spec") or {}).get("suspend"):
            self.stop_pods(obj, key)
            status.update(state="suspended", readyWorkerReplicas=0)
        else:
            pods = self.sync_pods(obj, key)
            workers = [
                p for p in pods if (p["metadata"].get("labels") or {}).get(NODE_TYPE_LABEL) == "worker"
            ]
            running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
            status.update(
                state="ready" if pods and len(running) == len(pods) else "",
                desiredWorkerReplicas=len(workers),
                readyWorkerReplicas=sum(1 for p in workers if p in running),
            )
        self.set_status(key, status)


class RayJobOperator(RayClusterOperator):
    plural = "rayjobs"
    cluster_path = ("rayClusterSpec",)

    def reconcile(self, key: Key) -> None:
        from queueing.testing.cluster import duration_of

        obj = self.get(key)
        if obj is None:
            return
        uid = obj["metadata"]["uid"]
        status = dict(obj.get("status") or {})
        if status.get("jobStatus") in ("SUCCEEDED", "FAILED", "STOPPED"):
            self.stop_pods(obj, key)  # shutdownAfterJobFinishes
            return
        if (obj.get("spec") or {}).get("suspend"):
            self.cancel_timer(key, uid)
            self.stop_pods(obj, key)
            status.update(jobDeploymentStatus="Suspended", jobStatus="")
            self.set_status(key, status)
            return
        pods = self.sync_pods(obj, key)
        status["rayClusterName"] = key[1]
        running = pods and all((p.get("status") or {}).get("phase") == "Running" for p in pods)
        if running:
            status.update(jobDeploymentStatus="Running", jobStatus="RUNNING")
            seconds = duration_of(obj)
            if seconds is not None:
                self.after(key, uid, seconds, self._succeeded)
        else:
            status.update(jobDeploymentStatus="Initializing", jobStatus=status.get("jobStatus") or "PENDING")
        self.set_status(key, status)

    def _succeeded(self, key: Key, uid: str) -> None:
        obj = self.get(key)
        if obj is None or obj["metadata"]["uid"] != uid or (obj.get("spec") or {}).get("suspend"):
            return
        status = dict(obj.get("status") or {})
        if status.get("jobStatus") != "RUNNING":
            return
        status.update(jobStatus="SUCCEEDED", jobDeploymentStatus="Complete")
        self.set_status(key, status)
        self.stop_pods(obj, key)
