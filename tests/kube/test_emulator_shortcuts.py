"""The emulator's cheaper paths give what the general ones give: orjson's JSON (same values as
``json``'s, ``json`` where orjson would differ), CRD rules evaluated on the fields they select in a
shared activation, patches that share what they leave unchanged, and cached RBAC decisions that
follow every change of the RBAC objects (verify mode checks each cached decision)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queueing.dra.verify import VerifyError
from queueing.testing import crd_rules
from queueing.testing.emulator import RequestAttributes
from queueing.testing.patch import merge_patch, strategic_merge_patch
from queueing.testing.rbac import RbacAuthorizer
from queueing.testing.store import Store, dumps, loads

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_dumps_and_loads_give_the_json_values(value: Any) -> None:
    raw = dumps(value)
    assert json.loads(raw) == value  # what any client reads back
    assert loads(raw) == value
    assert loads(json.dumps(value).encode()) == value  # ASCII-escaped input reads the same


def test_loads_keeps_integers_beyond_64_bits_and_nan() -> None:
    big = 2**70
    got = loads(json.dumps({"n": big, "m": -(2**64)}).encode())
    assert got == {"n": big, "m": -(2**64)} and isinstance(got["n"], int)
    assert dumps({"n": big}) == b'{"n":1180591620717411303424}'
    nan = loads(b'{"x": NaN}')["x"]
    assert nan != nan
    with pytest.raises(ValueError, match="Expecting"):
        loads(b'{"x": ')


def test_rule_fields() -> None:
    assert crd_rules._fields("has(self.status) && self.spec.a == oldSelf.spec.a") == {"status", "spec"}
    assert crd_rules._fields("self.x.all(k, k != 'self.y')") == {"x", "y"}  # a literal: one more field
    for whole in (
        "self == oldSelf",
        "size(self) > 0",
        "self.?a.hasValue()",
        "self['a'] == 1",
        "self.all(k, true)",
    ):
        assert crd_rules._fields(whole) is None, whole


def _rules_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "metadata": {"type": "object"},
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
        "x-kubernetes-validations": [
            {"rule": "!has(self.status) || self.status.n <= size(self.spec.items)", "message": "n too big"},
            {"rule": "!has(oldSelf.status) || self.spec.items == oldSelf.spec.items", "message": "frozen"},
            {"rule": "self.metadata.name != 'bad'", "message": "bad name"},
        ],
    }


def test_rules_with_shared_activations_give_the_errors_of_whole_evaluations() -> None:
    schema = _rules_schema()
    old = {"metadata": {"name": "bad"}, "spec": {"items": [1, 2]}, "status": {"n": 1}}
    new = {"metadata": {"name": "bad"}, "spec": {"items": [1]}, "status": {"n": 3}}
    errs = crd_rules.validate_rules(new, schema, old, verify=True)  # verify: the whole walk agrees
    assert [e.message for e in errs] == [
        '<nil>: Invalid value: "object": n too big',
        '<nil>: Invalid value: "object": frozen',
        '<nil>: Invalid value: "object": bad name',
    ]
    ok = {"metadata": {"name": "good"}, "spec": {"items": [1, 2]}, "status": {"n": 2}}
    assert crd_rules.validate_rules(ok, schema, old, verify=True) == []
    assert crd_rules.validate_rules(ok, schema, None, verify=True) == []


def test_patches_never_change_their_target_and_share_the_rest() -> None:
    target = {"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"l": [1]}, "status": {"s": 1}}
    before = copy.deepcopy(target)
    body = {"status": {"s": 2, "list": [1, 2]}}
    out = merge_patch(target, body, take=True)
    assert target == before and out["status"] == {"s": 2, "list": [1, 2]}
    assert out["spec"] is target["spec"] and out["status"]["list"] is body["status"]["list"]
    out = strategic_merge_patch(target, {"metadata": {"labels": {"y": "2"}}})
    assert target == before and out["spec"] is target["spec"]


def test_store_patch_with_sharing_keeps_the_stored_object_unchanged() -> None:
    store = Store()
    store.verify = True  # every replaced object is compared with its JSON when its event went out
    pods = store.resource("pods")
    store.create(pods, "default", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}})
    first = store.get(pods, "default", "p", share=True)
    snapshot = copy.deepcopy(first)
    out = store.patch(
        pods,
        "default",
        "p",
        lambda cur: merge_patch(cur, {"status": {"phase": "Running"}}),
        "status",
        share=True,
    )
    assert first == snapshot and out["status"] == {"phase": "Running"}
    assert out["spec"] is first["spec"]  # shared, not copied
    store.patch(
        pods, "default", "p", lambda cur: merge_patch(cur, {"metadata": {"labels": {"a": "b"}}}), share=True
    )
    assert first == snapshot and store.get(pods, "default", "p")["metadata"]["labels"] == {"a": "b"}


def _attrs(user: str, verb: str, resource: str, ns: str = "team", name: str = "") -> RequestAttributes:
    return RequestAttributes(user, verb, "", "v1", resource, "", ns, name, "", True)


def test_cached_rbac_decisions_follow_the_rbac_objects() -> None:
    role = {"kind": "Role", "metadata": {"name": "r", "namespace": "team"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}  # fmt: skip
    binding = {"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "team"},
               "subjects": [{"kind": "User", "name": "u"}],
               "roleRef": {"kind": "Role", "name": "r"}}  # fmt: skip
    objects = [role, binding]
    rbac = RbacAuthorizer(lambda: objects, verify=True)
    for _ in range(2):  # the second time from the cache, checked by verify mode
        assert rbac(_attrs("u", "get", "pods"))
        assert not rbac(_attrs("u", "delete", "pods"))
        assert not rbac(_attrs("u", "get", "pods", ns="other"))
    assert len(rbac.denied) == 4 and len(rbac.used) == 1
    # a new version of the role (stored objects are replaced, never changed in place)
    objects[0] = {**role, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]}]}
    assert rbac(_attrs("u", "delete", "pods"))
    # resourceNames: the name becomes part of the decision
    objects[0] = {**role, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"],
                                     "resourceNames": ["p1"]}]}  # fmt: skip
    assert rbac(_attrs("u", "get", "pods", name="p1"))
    assert not rbac(_attrs("u", "get", "pods", name="p2"))
    # verify mode catches a decision the cache holds wrongly (here: a role changed in place)
    objects[0]["rules"][0]["resourceNames"] = ["p2"]
    with pytest.raises(VerifyError):
        rbac(_attrs("u", "get", "pods", name="p2"))
