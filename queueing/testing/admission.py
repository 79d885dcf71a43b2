"""MutatingAdmissionPolicies (``admissionregistration.k8s.io`` v1beta1 and v1) run by the emulator.

On every create and update (incl. ``/status``) the store asks :class:`PolicyAdmission` to mutate the
object with each MutatingAdmissionPolicy that has a MutatingAdmissionPolicyBinding:

* **matchConstraints** of the policy, then ``matchResources`` of the binding: ``resourceRules``
  (``apiGroups``, ``apiVersions``, ``operations``, ``resources`` incl. ``*``, ``*/*``, ``x/status``,
  ``*/status``, ``resourceNames``, ``scope``), ``excludeResourceRules``, ``namespaceSelector`` (on the
  labels of the object's namespace; a Namespace is matched on its own labels; other cluster-scoped
  objects always match) and ``objectSelector`` (on the labels of the object or of the old object).
  ``matchPolicy`` is always ``Equivalent``-like: a rule matches when it names any served version.
* **variables** and **matchConditions** are real CEL (cel-expr-python, Google's cel-cpp), compiled when
  the policy is created: ``object``, ``oldObject``, ``request`` (``operation``, ``name``,
  ``namespace``, ``subResource``, ``dryRun``, ``kind``, ``resource``, ``userInfo.username``, ``uid``),
  ``namespaceObject`` and ``variables.<name>`` (evaluated eagerly, in order), all dynamically typed
  (the object is a map, not a typed struct: upstream's schema-typed checks are not done).
  A matchCondition evaluating to false skips the policy.
* **mutations**: ``patchType: ApplyConfiguration`` and ``JSONPatch``. CEL cannot construct the
  schema-typed ``Object{...}`` and ``JSONPatch{...}`` values here (cel-cpp only knows protobuf types),
  so these constructions are interpreted by this module and every *field value inside them* is real
  CEL. Supported forms::

      Object{f: <value>, ...}                       # ApplyConfiguration: the whole expression
      [JSONPatch{op: <cel>, path: <cel>, value: <value>, from: <cel>}, ...]   # JSONPatch: a list literal
      <value> := Object.a.b{f: <value>, ...}        # nested construction (type path checked)
               | [<value>, ...]                     # list literal (elements may be constructions)
               | <any CEL expression>               # e.g. true, object.metadata.name, {"k": "v"}

  A construction nested inside other CEL (``c ? Object{...} : Object{}``, ``[...].map(...)``) is
  rejected at policy creation with a 422 that says so, like a CEL compile error. ``params``
  (``paramKind``/``paramRef``) and ``authorizer`` are not supported (422 too).
  ApplyConfiguration is merged like a strategic merge patch for built-in kinds (lists of maps by
  their merge key, e.g. containers by name) and like a JSON merge patch for custom resources (lists
  replaced); a field whose value is ``null`` is left out. JSONPatch ops are RFC 6902
  (``add remove replace move copy test``); ``jsonpatch.escapeKey(k)`` escapes a key for a path.
* **failurePolicy** ``Fail`` (the default): an evaluation error rejects the request with 403 and
  ``policy '<p>' with binding '<b>' denied request: ...``; ``Ignore`` skips the policy.
* **reinvocationPolicy** ``IfNeeded``: after every policy ran once, the IfNeeded policies run once more
  when a later policy changed the object.

Policies run in name order, before the store's Python ``admission_hooks`` (which stand in for
webhooks, called after the policies as in kube-apiserver).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

from queueing.dra.cel import _compile_message, _runtime_message
from queueing.scheduling.snapshot import LabelSelector, LabelSelectorRequirement
from queueing.testing.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from queueing.testing.resources import ResourceType
from queueing.testing.schema import FieldError

__all__ = [
    "BINDINGS_KEY",
    "POLICIES_KEY",
    "CompiledPolicy",
    "PolicyAdmission",
    "PolicyDenied",
    "compile_policy",
    "validate_binding",
]

GROUP = "admissionregistration.k8s.io"
POLICIES_KEY = f"{GROUP}/mutatingadmissionpolicies"
BINDINGS_KEY = f"{GROUP}/mutatingadmissionpolicybindings"
VARIABLES = ("object", "oldObject", "request", "namespaceObject", "variables")


def _escape_key(key: str) -> str:
    """``jsonpatch.escapeKey``: a map key as one JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _new_env() -> Any:
    S = cel.Type.STRING
    escape = cel.FunctionDecl(
        "jsonpatch.escapeKey", [cel.Overload("string_jsonpatch_escape_key", S, [S], impl=_escape_key)]
    )
    return cel.NewEnv(
        None,
        variables={name: cel.Type.DYN for name in VARIABLES},
        extensions=[ext_strings.ExtStrings(), ext_bindings.ExtBindings(), ext_optional.ExtOptional()],
        functions=[escape],
    )


_ENV = _new_env()


class PolicyDenied(Exception):
    """A policy with failurePolicy Fail could not be evaluated: the request is rejected."""


class _EvalError(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# expressions


@dataclass(frozen=True)
class _Cel:
    text: str
    program: Any

    def eval(self, activation: Any) -> Any:
        result = self.program.eval(activation)
        if result.type() == cel.Type.ERROR:
            raise _EvalError(
                f"expression '{self.text}' resulted in error: {_runtime_message(str(result.value()))}"
            )
        return result.plain_value()


@dataclass(frozen=True)
class _Construct:
    """``Object.a.b{f: v, ...}`` or ``JSONPatch{...}``: a map whose field values are nodes."""

    type_name: str
    fields: tuple[tuple[str, _Node], ...]

    def eval(self, activation: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, node in self.fields:
            v = node.eval(activation)
            if v is not None:  # a null field is left out, as in an apply configuration
                out[name] = v
        return out


@dataclass(frozen=True)
class _List:
    items: tuple[_Node, ...]

    def eval(self, activation: Any) -> list[Any]:
        return [n.eval(activation) for n in self.items]


_Node = _Cel | _Construct | _List

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONSTRUCT = re.compile(r"(Object|JSONPatch)\b(\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)*\s*\{")
_CLOSE = {"(": ")", "[": "]", "{": "}"}


class _Syntax(ValueError):
    pass


def compile_cel(text: str) -> _Cel:
    """Compile one CEL expression in the admission environment; raises ValueError with cel-cpp's message."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("compilation failed: empty expression")
    try:
        program = _ENV.compile(text)
    except RuntimeError as e:
        msg = _compile_message(str(e))
        if re.search(r"undeclared reference to '(Object|JSONPatch)", msg):
            raise ValueError(
                "unsupported by the emulator: Object{...} / JSONPatch{...} constructions are evaluated "
                "only as the whole expression, a field value of another construction or an element of a "
                f"list literal, not inside other CEL (in {text.strip()!r})"
            ) from None
        if re.search(r"undeclared reference to '(params|authorizer)\b", msg):
            raise ValueError(f"unsupported by the emulator: params and authorizer ({msg})") from None
        raise ValueError(f"compilation failed: {msg}") from None
    return _Cel(text.strip(), program)


class _Parser:
    """Recursive descent over the construction syntax; leaves are handed to the CEL compiler."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def _ws(self) -> None:
        while self.i < len(self.s):
            if self.s[self.i].isspace():
                self.i += 1
            elif self.s.startswith("//", self.i):
                nl = self.s.find("\n", self.i)
                self.i = len(self.s) if nl < 0 else nl + 1
            else:
                return

    def _at_end_of_value(self) -> bool:
        self._ws()
        return self.i >= len(self.s) or self.s[self.i] in ",}]"

    def value(self, expected_type: str | None) -> _Node:
        self._ws()
        start = self.i
        if _CONSTRUCT.match(self.s, self.i):
            node: _Node = self.construct(expected_type)
            if not self._at_end_of_value():
                raise _Syntax(
                    f"unexpected {self.s[self.i : self.i + 20]!r} after a construction (at offset {self.i})"
                )
            return node
        if self.i < len(self.s) and self.s[self.i] == "[":
            try:
                lst = self.list(expected_type)
                if self._at_end_of_value():
                    return lst
            except _Syntax:
                pass
            self.i = start  # an ordinary CEL expression that starts with a list (e.g. [a] + b)
        return self.cel()

    def construct(self, expected_type: str | None) -> _Construct:
        brace = self.s.index("{", self.i)
        type_name = re.sub(r"\s+", "", self.s[self.i : brace])
        if expected_type is not None and type_name != expected_type:
            raise _Syntax(f"{type_name}{{...}} where {expected_type}{{...}} is expected")
        self.i = brace + 1
        fields: list[tuple[str, _Node]] = []
        while True:
            self._ws()
            if self.i < len(self.s) and self.s[self.i] == "}":
                self.i += 1
                break
            m = _IDENT.match(self.s, self.i)
            if not m:
                raise _Syntax(f"expected a field name in {type_name}{{...}} at offset {self.i}")
            name = m.group()
            self.i = m.end()
            self._ws()
            if self.i >= len(self.s) or self.s[self.i] != ":":
                raise _Syntax(f"expected ':' after field {name!r} of {type_name}{{...}}")
            self.i += 1
            child = f"{type_name}.{name}" if type_name.startswith("Object") else None
            fields.append((name, self.value(child)))
            self._ws()
            if self.i < len(self.s) and self.s[self.i] == ",":
                self.i += 1
            elif self.i >= len(self.s) or self.s[self.i] != "}":
                raise _Syntax(f"expected ',' or '}}' in {type_name}{{...}} at offset {self.i}")
        return _Construct(type_name, tuple(fields))

    def list(self, expected_type: str | None) -> _List:
        self.i += 1  # [
        items: list[_Node] = []
        while True:
            self._ws()
            if self.i < len(self.s) and self.s[self.i] == "]":
                self.i += 1
                return _List(tuple(items))
            items.append(self.value(expected_type))
            self._ws()
            if self.i < len(self.s) and self.s[self.i] == ",":
                self.i += 1
            elif self.i >= len(self.s) or self.s[self.i] != "]":
                raise _Syntax(f"expected ',' or ']' at offset {self.i}")

    def cel(self) -> _Cel:
        """The CEL text up to the next top-level ``,``, ``}`` or ``]`` (strings and brackets skipped)."""
        start, depth = self.i, []
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in "\"'":
                self.i = _skip_string(self.s, self.i)
                continue
            if c in _CLOSE:
                depth.append(_CLOSE[c])
            elif c in ")]}":
                if not depth:
                    break
                depth.pop()
            elif c == "," and not depth:
                break
            self.i += 1
        text = self.s[start : self.i]
        try:
            return compile_cel(text)
        except ValueError as e:
            raise _Syntax(str(e)) from None


def _skip_string(s: str, i: int) -> int:
    q = s[i]
    if s.startswith(q * 3, i):
        end = s.find(q * 3, i + 3)
        return len(s) if end < 0 else end + 3
    i += 1
    while i < len(s) and s[i] != q:
        i += 2 if s[i] == "\\" else 1
    return i + 1


def parse_mutation(patch_type: str, text: str) -> _Node:
    """The tree of an ApplyConfiguration / JSONPatch expression; raises ValueError when unsupported."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("compilation failed: empty expression")
    p = _Parser(text)
    try:
        if patch_type == "ApplyConfiguration":
            p._ws()
            if not re.match(r"Object\s*\{", text[p.i :]):
                raise _Syntax("an ApplyConfiguration expression must be an Object{...} construction")
            node: _Node = p.construct("Object")
        else:
            p._ws()
            if p.i >= len(text) or text[p.i] != "[":
                raise _Syntax("a JSONPatch expression must be a list literal [JSONPatch{...}, ...]")
            node = p.list("JSONPatch")
            if any(not isinstance(n, _Construct) for n in node.items):
                raise _Syntax("every element of a JSONPatch list must be a JSONPatch{...} construction")
        p._ws()
        if p.i < len(text):
            raise _Syntax(f"unexpected {text[p.i : p.i + 20]!r} after the expression")
    except _Syntax as e:
        raise ValueError(str(e)) from None
    return node


# ------------------------------------------------------------------------------------------------
# policies


@dataclass(frozen=True)
class _Mutation:
    patch_type: str
    node: _Node


@dataclass(frozen=True)
class CompiledPolicy:
    name: str
    spec: dict[str, Any]
    variables: tuple[tuple[str, _Cel], ...]
    conditions: tuple[tuple[str, _Cel], ...]
    mutations: tuple[_Mutation, ...]
    fail: bool
    reinvoke: bool


def compile_policy(obj: dict[str, Any]) -> tuple[CompiledPolicy | None, list[FieldError]]:
    """Compile a MutatingAdmissionPolicy object; the field errors are reported as a 422 by the store."""
    errors: list[FieldError] = []
    spec = obj.get("spec") or {}

    def err(path: str, value: Any, detail: str) -> None:
        v = value if isinstance(value, str) else repr(value)
        errors.append(FieldError(path, "FieldValueInvalid", f'{path}: Invalid value: "{v}": {detail}'))

    if spec.get("paramKind"):
        err("spec.paramKind", spec["paramKind"], "params are not supported by the emulator")
    variables: list[tuple[str, _Cel]] = []
    for i, v in enumerate(spec.get("variables") or []):
        try:
            variables.append((v["name"], compile_cel(v.get("expression", ""))))
        except (ValueError, KeyError, TypeError) as e:
            err(f"spec.variables[{i}].expression", (v or {}).get("expression", ""), str(e))
    conditions: list[tuple[str, _Cel]] = []
    for i, c in enumerate(spec.get("matchConditions") or []):
        try:
            conditions.append((c.get("name", ""), compile_cel(c.get("expression", ""))))
        except ValueError as e:
            err(f"spec.matchConditions[{i}].expression", c.get("expression", ""), str(e))
    mutations: list[_Mutation] = []
    for i, m in enumerate(spec.get("mutations") or []):
        pt = m.get("patchType")
        if pt not in ("ApplyConfiguration", "JSONPatch"):
            errors.append(
                FieldError(
                    f"spec.mutations[{i}].patchType",
                    "FieldValueNotSupported",
                    f'spec.mutations[{i}].patchType: Unsupported value: "{pt}": supported values: '
                    '"ApplyConfiguration", "JSONPatch"',
                )
            )
            continue
        key = "applyConfiguration" if pt == "ApplyConfiguration" else "jsonPatch"
        expr = (m.get(key) or {}).get("expression", "")
        try:
            mutations.append(_Mutation(pt, parse_mutation(pt, expr)))
        except ValueError as e:
            err(f"spec.mutations[{i}].{key}.expression", expr, str(e))
    if not mutations and not errors:
        errors.append(
            FieldError(
                "spec.mutations",
                "FieldValueRequired",
                "spec.mutations: Required value: at least one mutation",
            )
        )
    if errors:
        return None, errors
    policy = CompiledPolicy(
        obj["metadata"]["name"],
        spec,
        tuple(variables),
        tuple(conditions),
        tuple(mutations),
        spec.get("failurePolicy", "Fail") != "Ignore",
        spec.get("reinvocationPolicy", "Never") == "IfNeeded",
    )
    return policy, []


def validate_binding(obj: dict[str, Any]) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errors = []
    if not spec.get("policyName"):
        errors.append(FieldError("spec.policyName", "FieldValueRequired", "spec.policyName: Required value"))
    if spec.get("paramRef"):
        errors.append(
            FieldError(
                "spec.paramRef",
                "FieldValueInvalid",
                "spec.paramRef: Invalid value: params are not supported by the emulator",
            )
        )
    return errors


# ------------------------------------------------------------------------------------------------
# matching


def _selector(sel: dict[str, Any] | None) -> LabelSelector:
    sel = sel or {}
    return LabelSelector(
        dict(sel.get("matchLabels") or {}),
        tuple(
            LabelSelectorRequirement(r["key"], r["operator"], tuple(r.get("values") or ()))
            for r in sel.get("matchExpressions") or []
        ),
    )


def _resource_matches(patterns: list[str], plural: str, sub: str) -> bool:
    for p in patterns:
        res, _, psub = p.partition("/")
        if p == "*/*" or (p == "*" and not sub):
            return True
        if res in ("*", plural) and (psub == sub or (psub == "*" and sub)):
            return True
    return False


def _rule_matches(rule: dict[str, Any], req: _Request) -> bool:
    rt = req.rt
    ops = rule.get("operations") or []
    if "*" not in ops and req.operation not in ops:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and rt.group not in groups:
        return False
    versions = rule.get("apiVersions") or []
    if "*" not in versions and not set(versions) & set(rt.versions):
        return False
    if not _resource_matches(rule.get("resources") or [], rt.plural, req.subresource):
        return False
    names = rule.get("resourceNames") or []
    if names and req.name not in names:
        return False
    scope: str = rule.get("scope", "*")
    return scope == "*" or (scope == "Namespaced") == rt.namespaced


def _constraints_match(mr: dict[str, Any] | None, req: _Request) -> bool:
    if mr is None:
        return True
    rules = mr.get("resourceRules")
    if rules is not None and not any(_rule_matches(r, req) for r in rules):
        return False
    if any(_rule_matches(r, req) for r in mr.get("excludeResourceRules") or []):
        return False
    if "namespaceSelector" in mr:
        sel = _selector(mr["namespaceSelector"])
        if req.rt.key == "/namespaces":
            if not sel.matches(_labels(req.object)):
                return False
        elif req.rt.namespaced and not sel.matches(_labels(req.namespace_object)):
            return False
    if "objectSelector" in mr:
        sel = _selector(mr["objectSelector"])
        if not (sel.matches(_labels(req.object)) or (req.old is not None and sel.matches(_labels(req.old)))):
            return False
    return True


def _labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


@dataclass
class _Request:
    rt: ResourceType
    operation: str
    subresource: str
    name: str
    namespace: str
    object: dict[str, Any]
    old: dict[str, Any] | None
    namespace_object: dict[str, Any] | None
    user: str
    dry_run: bool

    def data(self) -> dict[str, Any]:
        rt = self.rt
        request = {
            "uid": "",
            "kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
            "resource": {"group": rt.group, "version": rt.version, "resource": rt.plural},
            "subResource": self.subresource,
            "name": self.name,
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": {"username": self.user},
            "dryRun": self.dry_run,
        }
        return {
            "object": self.object,
            "oldObject": self.old,
            "request": request,
            "namespaceObject": self.namespace_object,
        }


# ------------------------------------------------------------------------------------------------
# evaluation


@dataclass
class PolicyAdmission:
    """Runs the stored policies. ``policies``/``bindings`` return the current stored objects."""

    policies: Callable[[], list[dict[str, Any]]]
    bindings: Callable[[], list[dict[str, Any]]]
    namespace: Callable[[str], dict[str, Any] | None]
    _cache: dict[tuple[str, str], CompiledPolicy] = field(default_factory=dict)
    invocations: int = 0  # policy applications that ran their mutations (for tests)

    def _compiled(self, obj: dict[str, Any]) -> CompiledPolicy | None:
        meta = obj["metadata"]
        key = (meta.get("uid", ""), meta.get("resourceVersion", ""))
        hit = self._cache.get(key)
        if hit is None:
            hit, _ = compile_policy(obj)  # validated when stored; None only if stored around the store
            if hit is None:
                return None
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def admit(
        self,
        rt: ResourceType,
        operation: str,
        subresource: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        user: str = "admin",
        dry_run: bool = False,
    ) -> dict[str, Any]:
        if rt.key in (POLICIES_KEY, BINDINGS_KEY):
            return obj
        bindings = self.bindings()
        if not bindings:
            return obj
        by_name = {p["metadata"]["name"]: p for p in self.policies()}
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or ""
        req = _Request(
            rt, operation, subresource, meta.get("name", ""), ns, obj, old,
            self.namespace(ns) if rt.namespaced and ns else None, user, dry_run,
        )  # fmt: skip
        todo: list[tuple[CompiledPolicy, dict[str, Any]]] = []
        for b in sorted(bindings, key=lambda b: b["metadata"]["name"]):
            pobj = by_name.get((b.get("spec") or {}).get("policyName", ""))
            if pobj is None:
                continue
            policy = self._compiled(pobj)
            if policy is not None:
                todo.append((policy, b))
        todo.sort(key=lambda pb: (pb[0].name, pb[1]["metadata"]["name"]))
        changed: list[int] = []  # indices in todo of the policies that changed the object
        for idx, (policy, binding) in enumerate(todo):
            before = req.object
            req.object = self._apply(policy, binding, req)
            if req.object != before:
                changed.append(idx)
        for idx, (policy, binding) in enumerate(todo):
            # IfNeeded: once more when a policy that ran after this one changed the object
            if policy.reinvoke and any(j > idx for j in changed):
                req.object = self._apply(policy, binding, req)
        return req.object

    def _apply(self, policy: CompiledPolicy, binding: dict[str, Any], req: _Request) -> dict[str, Any]:
        if not _constraints_match(policy.spec.get("matchConstraints"), req):
            return req.object
        if not _constraints_match((binding.get("spec") or {}).get("matchResources"), req):
            return req.object
        try:
            data = req.data()
            data["variables"] = {}
            for name, expr in policy.variables:
                data["variables"][name] = expr.eval(_ENV.Activation(data))
            activation = _ENV.Activation(data)
            for _, cond in policy.conditions:
                result = cond.eval(activation)
                if result is not True and result is not False:
                    raise _EvalError(f"expression '{cond.text}' must evaluate to bool, not {result!r}")
                if not result:
                    return req.object
            self.invocations += 1
            obj = req.object  # the patch functions never change their target: no copy needed
            for m in policy.mutations:
                patch = m.node.eval(activation)
                if m.patch_type == "JSONPatch":
                    obj = json_patch(obj, patch)
                elif req.rt.crd:
                    obj = merge_patch(obj, patch)
                else:
                    obj = strategic_merge_patch(obj, patch)
                activation = _ENV.Activation({**data, "object": obj})
            if not isinstance(obj, dict):
                raise _EvalError("the mutated object is not a map")
            return obj
        except (_EvalError, PatchError, TypeError, ValueError) as e:
            if not policy.fail:
                return req.object
            raise PolicyDenied(
                f"policy '{policy.name}' with binding '{binding['metadata']['name']}' denied request: {e}"
            ) from None
