"""MutatingAdmissionPolicies run by the emulator (queueing/testing/admission.py): the deploy/ policy through
real kubectl and the REST client, and the supported subset on the store directly."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from queueing.kube.client import JOBS, KubeClient
from queueing.testing import Emulator
from queueing.testing.admission import parse_mutation
from queueing.testing.store import ApiError, Store
from tests.kube.conftest import REPO
from tests.kube.test_kubectl import Kubectl

POLICY_FILE = REPO / "deploy" / "base" / "mutating-admission-policy.yaml"
QUEUE_LABEL = "queueing.dra.io/queue-name"
GROUP = "admissionregistration.k8s.io"


def policy(name: str, mutations: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": spec.pop(
                "matchConstraints",
                {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
            ),
            "mutations": mutations,
            **spec,
        },
    }


def apply(expr: str) -> dict[str, Any]:
    return {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expr}}


def jsonpatch(expr: str) -> dict[str, Any]:
    return {"patchType": "JSONPatch", "jsonPatch": {"expression": expr}}


def binding(name: str, policy_name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": policy_name, **spec},
    }


def install(store: Store, *objs: dict[str, Any]) -> None:
    for o in objs:
        plural = (
            "mutatingadmissionpolicies"
            if o["kind"] == "MutatingAdmissionPolicy"
            else ("mutatingadmissionpolicybindings")
        )
        store.create(store.resource(plural, GROUP), None, o)


def pod(name: str, labels: dict[str, str] | None = None, ns: str = "default") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox", "args": ["sleep"]}]},
    }


def create_pod(store: Store, body: dict[str, Any]) -> dict[str, Any]:
    return store.create(store.resource("pods"), body["metadata"]["namespace"], body)


@pytest.fixture
def store() -> Store:
    return Store()


# ---------------------------------------------------------------- the deploy/ policy


def deploy_policy_objects() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(POLICY_FILE.read_text()) if d]


def queued_job(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "labels": {QUEUE_LABEL: "lq"}},
        "spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}},
            **spec,
        },
    }


async def test_deploy_policy_suspends_queued_jobs_only(kube: KubeClient, emu: Emulator) -> None:
    emu.load_objects(deploy_policy_objects())
    assert (await kube.create(JOBS, queued_job("q")))["spec"]["suspend"] is True
    # suspend: false is overridden (the matchCondition holds), no label means no mutation
    assert (await kube.create(JOBS, queued_job("q-false", suspend=False)))["spec"]["suspend"] is True
    plain = queued_job("plain")
    del plain["metadata"]["labels"]
    assert (await kube.create(JOBS, plain))["spec"]["suspend"] is False  # the default, not mutated
    runs = emu.store.policies.invocations
    # already suspended: the matchCondition is false, the policy does not run
    assert (await kube.create(JOBS, queued_job("q-true", suspend=True)))["spec"]["suspend"] is True
    assert emu.store.policies.invocations == runs
    # operations: [CREATE] only: unsuspending later is allowed
    job = await kube.patch(JOBS, "q", {"spec": {"suspend": False}}, "default")
    assert job["spec"]["suspend"] is False
    # without the binding the policy does nothing
    emu.store.delete(
        emu.store.resource("mutatingadmissionpolicybindings", GROUP), None, "queueing-suspend-queued-jobs"
    )
    assert (await kube.create(JOBS, queued_job("after")))["spec"]["suspend"] is False  # the default


@pytest.mark.parametrize("build", ["deploy", "deploy/overlays/kubernetes-1.36"])
async def test_kubectl_apply_of_deploy_installs_the_policy(
    build: str, kube: KubeClient, emu: Emulator, tmp_path: Path
) -> None:
    kubectl = Kubectl(emu, tmp_path)
    out = await kubectl("apply", "--server-side", "-k", str(REPO / build))
    assert "mutatingadmissionpolicy.admissionregistration.k8s.io/queueing-suspend-queued-jobs" in out, out
    stored = emu.store.get(
        emu.store.resource("mutatingadmissionpolicies", GROUP), None, "queueing-suspend-queued-jobs"
    )
    assert stored["spec"]["mutations"][0]["patchType"] == "ApplyConfiguration"
    assert (await kube.create(JOBS, queued_job("q")))["spec"]["suspend"] is True
    text = await kubectl("get", "mutatingadmissionpolicies.v1beta1.admissionregistration.k8s.io")
    assert "queueing-suspend-queued-jobs" in text


# ---------------------------------------------------------------- ApplyConfiguration and JSONPatch


def test_apply_configuration_merges_lists_of_built_ins_by_merge_key(store: Store) -> None:
    install(
        store,
        policy(
            "sidecar",
            [
                apply(
                    'Object{metadata: Object.metadata{labels: {"owner": request.userInfo.username, '
                    '"ns": object.metadata.namespace}}, '
                    'spec: Object.spec{containers: [Object.spec.containers{name: "main", image: "busybox:1.37"}, '
                    'Object.spec.containers{name: "log", image: "fluent-bit"}]}}'
                )
            ],
        ),
        binding("sidecar", "sidecar"),
    )
    store.user = "alice"
    p = create_pod(store, pod("p", {"app": "x"}))
    assert p["metadata"]["labels"] == {"app": "x", "owner": "alice", "ns": "default"}
    main, log = p["spec"]["containers"]
    assert main == {"name": "main", "image": "busybox:1.37", "args": ["sleep"]}  # merged by name
    assert log == {"name": "log", "image": "fluent-bit"}


def test_json_patch_with_variables_and_escaped_keys(store: Store) -> None:
    install(
        store,
        policy(
            "annotate",
            [
                jsonpatch(
                    '[JSONPatch{op: "add", path: "/metadata/annotations", value: {}}, '
                    'JSONPatch{op: "add", path: "/metadata/annotations/" + jsonpatch.escapeKey("example.com/team"), value: variables.team}, '
                    'JSONPatch{op: "replace", path: "/spec/containers/0/image", '
                    'value: object.spec.containers[0].image + ":" + variables.tag}]'
                )
            ],
            variables=[
                {"name": "team", "expression": 'object.metadata.labels[?"team"].orValue("none")'},
                {"name": "tag", "expression": '"v" + string(size(variables.team))'},
            ],
        ),
        binding("annotate", "annotate"),
    )
    p = create_pod(store, pod("p", {"team": "ml"}))
    assert p["metadata"]["annotations"] == {"example.com/team": "ml"}
    assert p["spec"]["containers"][0]["image"] == "busybox:v2"
    q = create_pod(store, pod("q"))
    assert q["metadata"]["annotations"] == {"example.com/team": "none"}
    assert q["spec"]["containers"][0]["image"] == "busybox:v4"


def test_constraints_namespace_and_object_selectors_and_binding_match_resources(store: Store) -> None:
    ns_rt = store.resource("namespaces")
    store.create(ns_rt, None, {"metadata": {"name": "gpu", "labels": {"tier": "gpu"}}})
    store.create(ns_rt, None, {"metadata": {"name": "cpu", "labels": {"tier": "cpu"}}})
    constraints = {
        "resourceRules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["pods"],
            }
        ],
        "namespaceSelector": {
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "cpu"]}]
        },
        "objectSelector": {"matchLabels": {"mutate": "yes"}},
    }
    install(
        store,
        policy(
            "mark",
            [apply('Object{metadata: Object.metadata{labels: {"marked": "true"}}}')],
            matchConstraints=constraints,
        ),
        binding("mark-gpu", "mark", matchResources={"namespaceSelector": {"matchLabels": {"tier": "gpu"}}}),
    )
    marked = create_pod(store, pod("a", {"mutate": "yes"}, ns="gpu"))
    assert marked["metadata"]["labels"]["marked"] == "true"
    for name, labels, ns in [
        ("b", {"mutate": "no"}, "gpu"),
        ("c", {"mutate": "yes"}, "cpu"),
        ("d", {"mutate": "yes"}, "default"),
    ]:
        assert "marked" not in create_pod(store, pod(name, labels, ns=ns))["metadata"]["labels"], name
    # UPDATE matches too; the status subresource is not "pods"
    pods = store.resource("pods")
    b = store.get(pods, "gpu", "b")
    b["metadata"]["labels"]["mutate"] = "yes"
    assert store.update(pods, "gpu", "b", b)["metadata"]["labels"]["marked"] == "true"
    runs = store.policies.invocations
    c = store.get(pods, "gpu", "b")
    c["status"] = {"phase": "Running"}
    assert store.update(pods, "gpu", "b", c, subresource="status")["status"] == {"phase": "Running"}
    assert store.policies.invocations == runs


def test_failure_policy_fail_rejects_and_ignore_skips(store: Store) -> None:
    broken = 'Object{metadata: Object.metadata{labels: {"x": object.metadata.labels["missing"]}}}'
    install(store, policy("strict", [apply(broken)]), binding("strict", "strict"))
    with pytest.raises(ApiError) as err:
        create_pod(store, pod("p", {"a": "b"}))
    assert err.value.code == 403
    assert err.value.message.startswith(
        "policy 'strict' with binding 'strict' denied request: expression "
        '\'{"x": object.metadata.labels["missing"]}\' resulted in error: no such key: missing'
    ), err.value.message
    mp = store.resource("mutatingadmissionpolicies", GROUP)
    lenient = store.get(mp, None, "strict")
    lenient["spec"]["failurePolicy"] = "Ignore"
    store.update(mp, None, "strict", lenient)
    assert create_pod(store, pod("p", {"a": "b"}))["metadata"]["labels"] == {"a": "b"}
    # a matchCondition that is not a bool is an error too
    bad = policy(
        "cond", [apply("Object{}")], matchConditions=[{"name": "n", "expression": "object.metadata"}]
    )
    install(store, bad, binding("cond", "cond"))
    with pytest.raises(ApiError, match="must evaluate to bool"):
        create_pod(store, pod("q"))


def test_reinvocation_if_needed_sees_later_mutations(store: Store) -> None:
    copy_label = policy(
        "a-copy",
        [apply('Object{metadata: Object.metadata{labels: {"copied": object.metadata.labels["source"]}}}')],
        matchConditions=[{"name": "has-source", "expression": '"source" in object.metadata.labels'}],
        reinvocationPolicy="IfNeeded",
    )
    add_source = policy("b-add", [apply('Object{metadata: Object.metadata{labels: {"source": "b"}}}')])
    install(store, copy_label, binding("a", "a-copy"), add_source, binding("b", "b-add"))
    assert create_pod(store, pod("p", {"x": "y"}))["metadata"]["labels"] == {
        "x": "y",
        "source": "b",
        "copied": "b",
    }
    mp = store.resource("mutatingadmissionpolicies", GROUP)
    never = store.get(mp, None, "a-copy")
    never["spec"]["reinvocationPolicy"] = "Never"
    store.update(mp, None, "a-copy", never)
    assert "copied" not in create_pod(store, pod("q", {"x": "y"}))["metadata"]["labels"]


def test_dry_run_and_v1_objects(store: Store) -> None:
    v1 = copy.deepcopy(deploy_policy_objects())
    for o in v1:
        o["apiVersion"] = f"{GROUP}/v1"
    install(store, *v1)
    jobs = store.resource("jobs", "batch")
    assert store.create(jobs, "default", queued_job("dry"), dry_run=True)["spec"]["suspend"] is True
    assert ("default", "dry") not in store.objects[jobs.key]


# ---------------------------------------------------------------- what is rejected at creation


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        (apply("has(object.spec) ? Object{} : Object{}"), "must be an Object{...} construction"),
        (
            apply("Object{spec: true ? Object.spec{suspend: true} : Object.spec{}}"),
            "constructions are evaluated only as the whole expression",
        ),
        (apply("Object{spec: Object.metadata{}}"), "Object.metadata{...} where Object.spec{...} is expected"),
        (apply("Object{spec: Object.spec{suspend: tru}}"), "undeclared reference to 'tru'"),
        (apply("Object{spec: Object.spec{suspend: true}"), "expected ',' or '}'"),
        (apply("Object{spec: Object.spec{x: params.y}}"), "unsupported by the emulator: params"),
        (jsonpatch('JSONPatch{op: "add", path: "/x", value: 1}'), "must be a list literal"),
        (jsonpatch('[JSONPatch{op: "add", path: "/x", value: 1}].filter(p, true)'), "unexpected"),
        ({"patchType": "StrategicMerge"}, 'Unsupported value: "StrategicMerge"'),
    ],
)
def test_unsupported_or_invalid_policies_are_rejected(
    store: Store, mutation: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiError) as err:
        install(store, policy("bad", [mutation]))
    assert err.value.code == 422
    assert message in err.value.message, err.value.message
    assert err.value.details is not None
    assert err.value.details["causes"][0]["field"].startswith("spec.mutations[0]")


def test_invalid_match_conditions_params_and_bindings_are_rejected(store: Store) -> None:
    ok = [apply("Object{}")]
    with pytest.raises(ApiError, match=r"spec.matchConditions\[0\].expression: .*Syntax error"):
        install(store, policy("p", ok, matchConditions=[{"name": "n", "expression": "object.(("}]))
    with pytest.raises(ApiError, match=r"spec.paramKind: .*params are not supported"):
        install(store, policy("p", ok, paramKind={"apiVersion": "v1", "kind": "ConfigMap"}))
    with pytest.raises(ApiError, match=r"spec.paramRef: .*params are not supported"):
        install(store, binding("b", "p", paramRef={"name": "x"}))
    with pytest.raises(ApiError, match=r"spec.policyName: Required"):
        install(store, binding("b", ""))


def test_parser_keeps_strings_and_brackets_inside_cel_leaves() -> None:
    node = parse_mutation(
        "ApplyConfiguration",
        """Object{
          // a comment, with a comma
          metadata: Object.metadata{annotations: {"a,b}": 'x]', "q": "\\"}"}},
          spec: Object.spec{items: [1, 2].map(x, x * 2), other: [Object.spec.other{v: [3]}]},
        }""",
    )
    from cel_expr_python import cel  # noqa: F401  # the leaves are real CEL programs

    from queueing.testing.admission import _ENV

    got = node.eval(
        _ENV.Activation(
            {"object": {}, "oldObject": None, "request": {}, "namespaceObject": None, "variables": {}}
        )
    )
    assert got == {
        "metadata": {"annotations": {"a,b}": "x]", "q": '"}'}},
        "spec": {"items": [2, 4], "other": [{"v": [3]}]},
    }
