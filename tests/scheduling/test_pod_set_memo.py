"""``workload_info``'s pod-set memo (``ApiContext.memo``): pod sets of equal specs in one context get
their ``PodSetInfo`` parts and fit signatures from it, and answer exactly as the general computation
(a fresh context, whose memo is empty). Generated workloads repeat a few specs under their own names,
labels and commands, with what the keys could miss: the namespace (templates exist in one only), the
count (a shared claim's devices are divided among the pods), the pod set's own ``resourceClaims``,
labels the template's selectors read, topology annotations, extended resources, sidecars. Verify
mode (``ApiContext.verify``) catches a wrong answer; without it a wrong entry's answer stands."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queueing.api.base import KubeObject
from queueing.api.core import PodSpec, PriorityClass
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate
from queueing.api.v1beta1 import Workload
from queueing.dra.topology import REQUIRED_ANNOTATION
from queueing.dra.verify import VerifyError
from queueing.scheduling.dra_placer import DraRequest
from queueing.scheduling.from_api import ApiContext, FromApiError, workload_info

EXT = "example.com/gpu"


def _template(name: str, exactly: dict[str, Any]) -> ResourceClaimTemplate:
    return ResourceClaimTemplate.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "g", "exactly": exactly}]}}},
        }
    )


def objects() -> list[KubeObject]:
    """A DeviceClass backing ``EXT``, templates of 1 and 2 GPUs and of all GPUs (not exact), a
    shared claim of 2 GPUs, all in namespace ``default``, and a PriorityClass."""
    return [
        PriorityClass.model_validate({"metadata": {"name": "high"}, "value": 7}),
        DeviceClass.model_validate(
            {
                "metadata": {"name": "gpu"},
                "spec": {
                    "selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}],
                    "extendedResourceName": EXT,
                },
            }
        ),
        _template("one", {"deviceClassName": "gpu"}),
        _template("two", {"deviceClassName": "gpu", "count": 2}),
        _template("all", {"deviceClassName": "gpu", "allocationMode": "All"}),
        ResourceClaim.model_validate(
            {
                "metadata": {"name": "common", "namespace": "default"},
                "spec": {
                    "devices": {
                        "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu", "count": 2}}]
                    }
                },
            }
        ),
    ]


CLAIMS = [
    {"name": "a", "resourceClaimTemplateName": "one"},
    {"name": "b", "resourceClaimTemplateName": "two"},
    {"name": "c", "resourceClaimTemplateName": "all"},
    {"name": "d", "resourceClaimName": "common"},
    {"name": "e", "resourceClaimTemplateName": "missing"},
]

container = st.fixed_dictionaries(
    {"name": st.sampled_from(["main", "aux"])},
    optional={
        "requests": st.dictionaries(
            st.sampled_from(["cpu", "memory", EXT, "example.com/other"]),
            st.sampled_from(["1", "2", "500m", "1Gi"]),
            max_size=2,
        ),
        "sidecar": st.booleans(),
    },
)

spec_shape = st.fixed_dictionaries(
    {
        "containers": st.lists(container, min_size=1, max_size=2, unique_by=lambda c: c["name"]),
        "claims": st.lists(st.integers(0, len(CLAIMS) - 1), max_size=3, unique=True),
    },
    optional={
        "init": st.lists(container, min_size=1, max_size=1),
        "nodeSelector": st.dictionaries(
            st.sampled_from(["zone", "pool"]), st.sampled_from(["x", "y"]), max_size=2
        ),
        "tolerations": st.lists(
            st.fixed_dictionaries({"key": st.sampled_from(["k", "gpu"]), "operator": st.just("Exists")}),
            max_size=2,
        ),
        "antiAffinity": st.sampled_from(["app", "job-name"]),  # a selector reading the pods' own labels
        "spread": st.booleans(),
        "priorityClassName": st.just("high"),
    },
)


def _container(c: dict[str, Any], cmd: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": c["name"], "image": f"img:{cmd}", "command": ["run", cmd]}
    if c.get("requests"):
        out["resources"] = {"requests": c["requests"]}
    if c.get("sidecar"):
        out["restartPolicy"] = "Always"
    return out


def pod_spec(shape: dict[str, Any], cmd: str) -> dict[str, Any]:
    """The pod spec of ``shape``; ``cmd`` (command and image) decides nothing the memo answers."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [_container(c, cmd) for c in shape["containers"]],
    }
    if shape["claims"]:
        spec["resourceClaims"] = [CLAIMS[i] for i in shape["claims"]]
    if "init" in shape:
        spec["initContainers"] = [_container({**c, "name": "init"}, cmd) for c in shape["init"]]
    for k in ("nodeSelector", "tolerations", "priorityClassName"):
        if k in shape:
            spec[k] = shape[k]
    if "antiAffinity" in shape:
        key = shape["antiAffinity"]
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {key: "x"}}}
                ]
            }
        }
    if shape.get("spread"):
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "matchLabelKeys": ["app"],
            }
        ]
    return spec


pod_set = st.fixed_dictionaries(
    {
        "shape": st.integers(0, 2),  # an index into the example's few shapes: specs repeat
        "count": st.sampled_from([1, 2, 4]),
        "app": st.sampled_from(["a", "b"]),
        "cmd": st.sampled_from(["x", "y"]),
    },
    optional={
        "own_claims": st.lists(st.sampled_from([0, 1, 3]), min_size=1, max_size=2, unique=True),
        "topology": st.sampled_from(["zone", "rack"]),
        "min_count": st.just(1),
    },
)

workload = st.fixed_dictionaries(
    {
        "namespace": st.sampled_from(["default", "other"]),
        "pod_sets": st.lists(pod_set, min_size=1, max_size=2),
    }
)


def build(i: int, w: dict[str, Any], shapes: list[dict[str, Any]]) -> Workload:
    pss = []
    partial = False
    for j, p in enumerate(w["pod_sets"]):
        annotations = {REQUIRED_ANNOTATION: p["topology"]} if "topology" in p else {}
        ps: dict[str, Any] = {
            "name": f"ps-{j}",
            "count": p["count"],
            "template": {
                "metadata": {"labels": {"app": p["app"], "job-name": f"w{i}"}, "annotations": annotations},
                "spec": pod_spec(shapes[p["shape"]], p["cmd"]),
            },
        }
        if "own_claims" in p:
            ps["resourceClaims"] = [CLAIMS[k] for k in p["own_claims"]]
        if "min_count" in p and not partial:
            ps["minCount"] = 1
            partial = True
        pss.append(ps)
    return Workload.model_validate(
        {
            "apiVersion": "queueing.dra.io/v1beta1",
            "kind": "Workload",
            "metadata": {"name": f"w{i}", "namespace": w["namespace"], "uid": f"uid-{i}"},
            "spec": {"queueName": "lq", "podSets": pss},
        }
    )


def general(wl: Workload) -> Any:
    """``workload_info`` from a context whose memo is empty: the general computation."""
    return workload_info(wl, ApiContext.from_objects(objects()))


def outcome(wl: Workload, ctx: ApiContext | None = None) -> Any:
    """``workload_info`` (``ctx`` None: ``general``), or the error it raises (a request of ``EXT``
    that is not an integer is one)."""
    try:
        return workload_info(wl, ctx) if ctx is not None else general(wl)
    except FromApiError as e:
        return ("FromApiError", str(e))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(spec_shape, min_size=3, max_size=3), st.lists(workload, min_size=1, max_size=8))
def test_the_memo_answers_as_the_general_computation(
    shapes: list[dict[str, Any]], workloads: list[dict[str, Any]]
) -> None:
    ctx = ApiContext.from_objects(objects(), verify=True)  # every hit also computed afresh
    wls = [build(i, w, shapes) for i, w in enumerate(workloads)]
    converted = 0
    for wl in wls:
        got, want = outcome(wl, ctx), outcome(wl)
        assert got == want
        if isinstance(got, tuple):  # an error, raised the same way with the memo
            continue
        converted += 1
        assert got.pod_sets == want.pod_sets
        req = got.placement_request
        assert isinstance(req, DraRequest) and isinstance(want.placement_request, DraRequest)
        assert req.signature == want.placement_request.signature == DraRequest(req.pod_sets).signature
    # every pod set's spec can be written as JSON: remembered, once per shape
    if converted:
        assert ctx.memo.facts and ctx.memo.signatures
    assert len(ctx.memo.facts) <= sum(len(wl.spec.pod_sets) for wl in wls)
    assert len(ctx.memo.signatures) <= converted
    # the second time every pod set is remembered: no new entries, the same answers
    before = (dict(ctx.memo.facts), dict(ctx.memo.signatures))
    for wl in wls:
        assert outcome(wl, ctx) == outcome(wl)
    assert (ctx.memo.facts, ctx.memo.signatures) == before


def _train(
    name: str, *, command: str = "x", labels: dict[str, str] | None = None, namespace: str = "default"
) -> Workload:
    spec = pod_spec(
        {"containers": [{"name": "main", "requests": {"cpu": "1", EXT: "1"}}], "claims": [1, 3]}, command
    )
    return Workload.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "queueName": "lq",
                "podSets": [
                    {
                        "name": "main",
                        "count": 2,
                        "template": {"metadata": {"labels": labels or {}}, "spec": spec},
                    }
                ],
            },
        }
    )


def test_jobs_of_one_shape_share_one_entry() -> None:
    ctx = ApiContext.from_objects(objects(), verify=True)
    a = workload_info(_train("a", labels={"job-name": "a"}), ctx)
    b = workload_info(_train("b", labels={"job-name": "b"}), ctx)
    assert len(ctx.memo.facts) == 1 and len(ctx.memo.signatures) == 1
    assert a.pod_sets == b.pod_sets and a.placement_request == b.placement_request
    (ps,) = a.pod_sets
    # 1 cpu; 1 GPU from the extended resource, 2 from template "two", 2/2 from the shared claim
    assert ps.requests == {"cpu": Fraction(1)} and ps.device_requests == {"gpu": Fraction(4)}
    assert not ps.devices_exact
    # the answers are copies: changing one changes neither the memo nor the next answer
    ps.requests["cpu"] = Fraction(9)  # type: ignore[index]
    assert workload_info(_train("c"), ctx).pod_sets[0].requests == {"cpu": Fraction(1)}
    # another namespace (no templates there) is another entry, with another answer
    other = workload_info(_train("d", namespace="other"), ctx)
    assert len(ctx.memo.facts) == 2
    assert other.pod_sets[0].device_requests == {"gpu": Fraction(1)}
    assert other.pod_sets == general(_train("d", namespace="other")).pod_sets


def test_a_spec_that_is_not_json_is_not_remembered() -> None:
    ctx = ApiContext.from_objects(objects(), verify=True)
    wl = _train("a", command="\ud800")  # a lone surrogate: no UTF-8 for it
    with pytest.raises(ValueError):
        PodSpec.model_validate(wl.spec.pod_sets[0].template.spec.to_dict()).model_dump_json()
    assert workload_info(wl, ctx) == general(wl)
    assert not ctx.memo.facts and not ctx.memo.signatures


def test_the_tables_keep_at_most_their_limit() -> None:
    ctx = ApiContext.from_objects(objects(), verify=True)
    ctx.memo.limit = 2
    wls = [_train(f"w{i}", command=str(i)) for i in range(5)]  # five specs (commands differ)
    for wl in wls:
        assert workload_info(wl, ctx) == general(wl)
        assert len(ctx.memo.facts) <= 2 and len(ctx.memo.signatures) <= 2
    assert workload_info(wls[0], ctx) == general(wls[0])  # pushed out: computed again


@pytest.mark.parametrize("table", ["facts", "signatures"])
def test_a_wrong_entry_stands_without_verify_mode_and_raises_with_it(table: str) -> None:
    for verify in (False, True):
        ctx = ApiContext.from_objects(objects(), verify=verify)
        first = workload_info(_train("a"), ctx)
        entries: dict[Any, Any] = getattr(ctx.memo, table)
        ((key, value),) = entries.items()
        if table == "facts":  # as a key missing the count would answer
            entries[key] = replace(value, device_requests={"gpu": Fraction(3)})
        else:  # as a key missing a label the selectors read would answer
            entries[key] = value.replace('"main"', '"other"', 1)
        if not verify:
            got = workload_info(_train("b"), ctx)
            assert got != first if table == "signatures" else got.pod_sets != first.pod_sets
            continue
        with pytest.raises(VerifyError) as err:
            workload_info(_train("b"), ctx)
        assert err.value.fast_path == (
            "workload_info (pod-set memo)" if table == "facts" else "workload_info (signature memo)"
        )
