"""The pending Workloads kept by deltas (``PendingWorkloads``) equal the state built from scratch
from the same objects after every event of a generated stream: Workloads created, changed (spec,
priority, requeue backoff, Preempting), admitted elsewhere, finished, deleted; a shared claim they
name created and deleted; a priority class changed. Each WorkloadInfo is built once per version of
its Workload and of the context, and verify mode catches a delta nobody reported."""

from __future__ import annotations

import random
from typing import Any

import pytest

from queueing.api.core import PriorityClass
from queueing.api.resource import ResourceClaim
from queueing.api.v1beta1 import FINISHED, QUOTA_RESERVED, Workload
from queueing.cache.workloads import PendingWorkloads
from queueing.dra.verify import VerifyError
from queueing.scheduling.backlog import Backlog
from queueing.scheduling.from_api import ApiContext, workload_info

GPU = "gpu.example.com"


def workload(i: int, rv: int, *, units: int = 1, **status: Any) -> Workload:
    containers = [{"name": "c", "image": "x", "resources": {"requests": {"cpu": str(units)}}}]
    spec: dict[str, Any] = {"containers": containers}
    if i % 4 == 0 or i == 23:  # its priority is a PriorityClass's (23: one that does not exist)
        spec["priorityClassName"] = "high" if i % 4 == 0 else "missing"
    if i % 3 == 0:  # names a shared claim (its spec is read)
        spec["resourceClaims"] = [{"name": "s", "resourceClaimName": f"shared-{i % 2}"}]
    return Workload.model_validate(
        {
            "metadata": {
                "name": f"w{i}",
                "namespace": "default",
                "uid": f"uid-{i}",
                "resourceVersion": str(rv),
                "creationTimestamp": f"2026-01-01T00:00:{i % 60:02d}Z",
            },
            "spec": {
                "queueName": f"lq{i % 2}",
                "podSets": [{"name": "main", "count": 1 + i % 2, "template": {"spec": spec}}],
            },
            "status": status,
        }
    )


def shared_claim(n: int, count: int) -> ResourceClaim:
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": f"shared-{n}", "namespace": "default"},
            "spec": {
                "devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": GPU, "count": count}}]}
            },
        }
    )


def condition(type_: str, status: str, reason: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": reason,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


class World:
    """Workloads and what their infos read, with the PendingWorkloads fed their deltas."""

    def __init__(self, verify: bool = True) -> None:
        self.objs: dict[str, Workload] = {}
        self.claims: dict[str, ResourceClaim] = {}
        self.priority = 100
        self.rv = 0
        self.pw = PendingWorkloads(verify=verify)

    def ctx(self) -> ApiContext:
        pc = PriorityClass.model_validate({"metadata": {"name": "high"}, "value": self.priority})
        return ApiContext.from_objects([*self.claims.values(), pc])

    @staticmethod
    def eligible(wl: Workload) -> bool:
        return not (wl.status.is_true(FINISHED) or wl.status.is_true(QUOTA_RESERVED))

    def build(self, wl: Workload) -> Any:
        rs = wl.status.requeue_state
        backoff = 50.0 if rs is not None and rs.requeue_at else None
        return workload_info(wl, self.ctx(), creation_time=float(wl.metadata.uid[4:]), backoff_until=backoff)

    def put(self, i: int, **kw: Any) -> None:
        self.rv += 1
        wl = workload(i, self.rv, **kw)
        self.objs[wl.key] = wl
        self.pw.mark(wl.key)

    def delete(self, i: int) -> None:
        if self.objs.pop(f"default/w{i}", None) is not None:
            self.pw.mark(f"default/w{i}")

    def refresh(self) -> list[str]:
        return self.pw.refresh(self.objs.get, lambda: list(self.objs.values()), self.eligible, self.build)


def test_the_pending_state_kept_by_deltas_equals_a_rebuild_after_every_event() -> None:
    rng = random.Random(16)
    w = World(verify=False)
    w.claims["default/shared-0"] = shared_claim(0, 1)
    for step in range(400):
        i = rng.randrange(24)
        op = rng.choice(
            ["put", "put", "put", "reserve", "finish", "delete", "backoff", "preempting", "claim", "priority"]
        )
        if op == "put":
            w.put(i, units=rng.randint(1, 3))
        elif op == "reserve":
            w.put(i, conditions=[condition(QUOTA_RESERVED, "True", "QuotaReserved")])
        elif op == "finish":
            w.put(i, conditions=[condition(FINISHED, "True", "Succeeded")])
        elif op == "delete":
            w.delete(i)
        elif op == "backoff":
            w.put(i, requeueState={"count": 1, "requeueAt": "2026-01-01T00:01:00Z"})
        elif op == "preempting":
            w.put(i, conditions=[condition(QUOTA_RESERVED, "False", "Preempting")])
        elif op == "claim":
            n = rng.randrange(2)
            if rng.random() < 0.3:
                w.claims.pop(f"default/shared-{n}", None)
            else:
                w.claims[f"default/shared-{n}"] = shared_claim(n, rng.randint(1, 2))
            w.pw.claim_changed(f"default/shared-{n}")
        else:
            w.priority = rng.choice([100, 200])
            w.pw.context_changed()
        if rng.random() < 0.2:
            w.pw.prepare(rng.choice([0.0, 40.0, 60.0]))  # backoffs released (or a clock that went back)
        w.refresh()
        w.pw.check(list(w.objs.values()), w.eligible, w.build)  # raises on any difference
        pending = [o for o in w.objs.values() if w.eligible(o)]
        assert set(w.pw.objects) == {o.key for o in pending}, f"step {step}"
        valid = [o for o in pending if o.key not in w.pw.invalid]
        assert all(o.name == "w23" for o in pending if o.key in w.pw.invalid)
        scratch = Backlog([w.build(o) for o in valid], released=w.pw.backlog.released)

        def runs(b: Backlog) -> dict[str, dict[str, list[str]]]:
            return {q: {sig: [x.key for x in r] for sig, r in rs.items()} for q, rs in b.queues.items()}

        assert runs(w.pw.backlog) == runs(scratch), f"step {step}"
        assert set(w.pw.backlog.held) == set(scratch.held), f"step {step}"


def test_an_info_is_built_once_per_version_of_its_workload_and_context() -> None:
    w = World()
    for i in range(10):
        w.put(i)
    assert w.refresh() == sorted(f"default/w{i}" for i in range(10))
    built = w.pw.builds
    assert w.refresh() == []  # nothing changed: nothing built (verify mode builds its own)
    assert w.pw.builds == built
    w.put(4, units=2)
    assert w.refresh() == ["default/w4"]
    assert w.pw.builds == built + 1
    w.claims["default/shared-0"] = shared_claim(0, 2)  # named by w0 and w6 (i % 3 == 0, i % 2 == 0)
    w.pw.claim_changed("default/shared-0")
    assert w.refresh() == ["default/w0", "default/w6"]
    w.priority = 300  # a priority class: every info reads the context
    w.pw.context_changed()
    w.refresh()
    assert w.pw.builds == built + 1 + 2 + 10
    assert "default/w23" not in w.pw.objects
    w.put(23)  # names a priority class that does not exist: reported, the others stay pending
    w.refresh()
    assert "PriorityClass 'missing' not found" in w.pw.invalid["default/w23"]
    assert "default/w23" in w.pw.objects and w.pw.backlog.get("default/w23") is None
    assert w.pw.backlog.get("default/w0") is not None and w.pw.backlog.get("default/w0").priority == 300  # type: ignore[union-attr]


def test_verify_mode_finds_a_delta_nobody_reported() -> None:
    w = World()
    for i in range(4):
        w.put(i)
    w.refresh()
    w.rv += 1
    w.objs["default/w1"] = workload(1, w.rv, units=3)  # changed without mark()
    with pytest.raises(VerifyError, match="PendingWorkloads"):
        w.refresh()
