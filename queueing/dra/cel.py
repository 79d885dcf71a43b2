"""The Kubernetes DRA CEL environment: device selectors of DeviceClasses and ResourceClaim requests.

The one place in the project that compiles or evaluates CEL (see docs/cel.md for the design and the
choice of engine). It mirrors ``k8s.io/dynamic-resource-allocation/cel``:

* one variable ``device`` with ``driver`` (string), ``attributes`` (map domain -> map name -> bool | int |
  string | semver), ``capacity`` (map domain -> map name -> Quantity) and ``allowMultipleAllocations``;
* the Kubernetes quantity library, the semver library, the CEL string extensions, ``cel.bind``,
  optionals, ``matches``, the Kubernetes regex (``find``/``findAll``) and list (``isSorted``/``sum``/
  ``min``/``max``) libraries, and ``sets.contains/equivalent/intersects``;
* type errors are compile errors; an expression whose static type is neither bool nor dyn is rejected
  at compile time, any other non-bool result is a runtime error;
* looking up a missing attribute or capacity name is a runtime error (``has()`` and ``in`` guard it);
  looking up a domain the device does not have yields an empty map, as upstream.

Interface::

    compiler = SelectorCompiler()                   # caller-owned; caches one compilation per expression
    sel = compiler.compile(expr)                    # -> CompiledSelector, raises CELCompileError
    sel.matches(DeviceInput(...))                   # -> bool, raises CELRuntimeError
    compile_selector(expr)                          # convenience, no cache
    split_qualified_name("gpu.nvidia.com/memory", driver) -> ("gpu.nvidia.com", "memory")
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import total_ordering
from typing import Any, Final

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from queueing.api.quantity import Quantity, QuantityError
from queueing.api.validation import SEMVER_RE

__all__ = [
    "CELCompileError",
    "CELCostError",
    "CELError",
    "CELRuntimeError",
    "CompiledSelector",
    "DeviceInput",
    "SelectorCompiler",
    "Version",
    "VersionError",
    "compile_selector",
    "split_qualified_name",
]


# ---------------------------------------------------------------------------------------------------
# errors


class CELError(Exception):
    """A CEL expression could not be compiled or evaluated. ``str(e)`` is the message alone; callers
    prefix it with the object and field (e.g. ``DeviceClass x: spec.selectors[0].cel.expression: ...``)."""

    expression: str
    message: str

    def __init__(self, expression: str, message: str) -> None:
        super().__init__(message)
        self.expression = expression
        self.message = message

    def __str__(self) -> str:
        return self.message


class CELCompileError(CELError):
    """Syntax or type error, or a result type other than bool."""


class CELRuntimeError(CELError):
    """Evaluation failed (missing map key, bad quantity string, overflow, non-bool result, ...)."""


class CELCostError(CELRuntimeError):
    """Evaluation stopped at the runtime's cost (iteration) budget: an error of the expression, reported
    for its object like any other runtime error."""


class VersionError(ValueError):
    """The text is not a semantic version (semver 2.0.0)."""


# ---------------------------------------------------------------------------------------------------
# semantic versions

_SEMVER_RE: Final = SEMVER_RE  # the one definition, with the API validation of version attributes


@total_ordering
class Version:
    """A semantic version (https://semver.org, 2.0.0), the value of a ``version`` device attribute.

    Equality and ordering follow semver precedence: build metadata is ignored."""

    __slots__ = ("build", "major", "minor", "patch", "prerelease", "text")

    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...]
    build: str
    text: str

    def __init__(self, text: str) -> None:
        m = _SEMVER_RE.match(text) if isinstance(text, str) else None
        if m is None:
            raise VersionError(f"not a semantic version (semver 2.0.0): {text!r}")
        self.text = text
        self.major = int(m["major"])
        self.minor = int(m["minor"])
        self.patch = int(m["patch"])
        pre = m["pre"]
        self.prerelease = tuple(int(p) if p.isdigit() else p for p in pre.split(".")) if pre else ()
        self.build = m["build"] or ""

    @classmethod
    def parse(cls, text: str, normalize: bool = False) -> Version:
        """Parse ``text``; with ``normalize`` like upstream ``semver(s, true)``: drop a leading ``v``, fill a
        missing minor/patch with 0 and strip leading zeros."""
        return cls(_normalize_semver(text) if normalize else text)

    def _key(self) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
        # a version without prerelease ranks above any prerelease of the same core
        pre = tuple((0, p) if isinstance(p, int) else (1, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, pre)

    def compare(self, other: Version) -> int:
        a, b = self._key(), other._key()
        return (a > b) - (a < b)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._key() == other._key()

    def __lt__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Version({self.text!r})"


def _normalize_semver(s: str) -> str:
    if s.startswith("v"):
        s = s[1:]
    parts = s.split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or not p[0].isdigit():
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise VersionError(f"short version cannot contain PreRelease/Build meta data: {s!r}")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


# ---------------------------------------------------------------------------------------------------
# CEL types for Quantity and Semver: protobuf messages, so the type checker knows them and values stay
# exact. A Quantity message holds its exact value as a normalised fraction "n" or "n/d" (equal values
# have equal text, so CEL ``==`` on quantities compares values, as upstream). A Semver message holds
# the precedence-relevant parts (build metadata is dropped, so ``==`` follows semver precedence).


def _build_pool() -> tuple[descriptor_pool.DescriptorPool, Any, Any]:
    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="queueing/dra/cel_types.proto", package="kubernetes", syntax="proto3"
    )
    q = fdp.message_type.add(name="Quantity")
    q.field.add(name="value", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    s = fdp.message_type.add(name="Semver")
    for i, n in enumerate(("major", "minor", "patch"), start=1):
        s.field.add(name=n, number=i, type=f.TYPE_UINT64, label=f.LABEL_OPTIONAL)
    s.field.add(name="prerelease", number=4, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    qcls = message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Quantity"))
    scls = message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Semver"))
    return pool, qcls, scls


_POOL, _QuantityMsg, _SemverMsg = _build_pool()

_T_QUANTITY: Final = cel.Type("kubernetes.Quantity")
_T_SEMVER: Final = cel.Type("kubernetes.Semver")
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def _qmsg(v: Fraction) -> Any:
    return _QuantityMsg(value=str(v))


def _qval(m: Any) -> Fraction:
    return Fraction(m.value)


def _smsg(v: Version) -> Any:
    return _SemverMsg(
        major=v.major, minor=v.minor, patch=v.patch, prerelease=".".join(str(p) for p in v.prerelease)
    )


def _skey(m: Any) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
    pre = (
        tuple((0, int(p)) if p.isdigit() else (1, p) for p in m.prerelease.split(".")) if m.prerelease else ()
    )
    return (m.major, m.minor, m.patch, 0 if m.prerelease else 1, pre)


def _cmp(a: Any, b: Any) -> int:
    """Compare two quantities or two versions (one runtime overload serves both types)."""
    if isinstance(a, _QuantityMsg):
        x: Any = _qval(a)
        y: Any = _qval(b)
    else:
        x, y = _skey(a), _skey(b)
    return int(x > y) - int(x < y)


# ---- quantity library ------------------------------------------------------------------------------


def _quantity(s: str) -> Any:
    return _qmsg(Quantity.parse(s).value)


def _is_quantity(s: str) -> bool:
    try:
        Quantity.parse(s)
    except QuantityError:
        return False
    return True


def _sign(q: Any) -> int:
    v = _qval(q)
    return (v > 0) - (v < 0)


def _is_integer(q: Any) -> bool:
    v = _qval(q)
    return v.denominator == 1 and _INT64_MIN <= v.numerator <= _INT64_MAX


def _as_integer(q: Any) -> int:
    if not _is_integer(q):
        raise ValueError("cannot convert value to integer")
    return _qval(q).numerator


def _as_float(q: Any) -> float:
    v = _qval(q)
    try:
        return float(v)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


def _add(q: Any, o: Any) -> Any:
    return _qmsg(_qval(q) + (o if isinstance(o, int) else _qval(o)))


def _sub(q: Any, o: Any) -> Any:
    return _qmsg(_qval(q) - (o if isinstance(o, int) else _qval(o)))


def _mul(q: Any, n: int) -> Any:
    return _qmsg(_qval(q) * n)


# ---- semver library --------------------------------------------------------------------------------


def _semver(s: str) -> Any:
    return _smsg(Version(s))


def _semver_norm(s: str, normalize: bool) -> Any:
    return _smsg(Version.parse(s, normalize))


def _is_semver(s: str) -> bool:
    return _is_semver_norm(s, False)


def _is_semver_norm(s: str, normalize: bool) -> bool:
    try:
        Version.parse(s, normalize)
    except VersionError:
        return False
    return True


# ---- Kubernetes regex and list libraries, sets extension -------------------------------------------


def _find(s: str, pattern: str) -> str:
    m = re.search(pattern, s)
    return m.group(0) if m else ""


def _find_all(s: str, pattern: str) -> list[str]:
    return [m.group(0) for m in re.finditer(pattern, s)]


def _find_all_n(s: str, pattern: str, n: int) -> list[str]:
    if n == 0:
        return []
    out = _find_all(s, pattern)
    return out if n < 0 else out[:n]


def _is_sorted(lst: list[Any]) -> bool:
    return all(lst[i] <= lst[i + 1] for i in range(len(lst) - 1))


def _sum(lst: list[Any]) -> Any:
    return sum(lst) if lst else 0


def _min(lst: list[Any]) -> Any:
    if not lst:
        raise ValueError("min called on empty list")
    return min(lst)


def _max(lst: list[Any]) -> Any:
    if not lst:
        raise ValueError("max called on empty list")
    return max(lst)


def _sets_contains(a: list[Any], b: list[Any]) -> bool:
    return all(x in a for x in b)


def _sets_equivalent(a: list[Any], b: list[Any]) -> bool:
    return _sets_contains(a, b) and _sets_contains(b, a)


def _sets_intersects(a: list[Any], b: list[Any]) -> bool:
    return any(x in a for x in b)


def _functions() -> list[Any]:
    B, INT, D, S, DYN = cel.Type.BOOL, cel.Type.INT, cel.Type.DOUBLE, cel.Type.STRING, cel.Type.DYN
    Q, V = _T_QUANTITY, _T_SEMVER
    LDYN, LS = cel.Type.List(DYN), cel.Type.List(S)

    def ov(
        oid: str, ret: Any, params: list[Any], impl: Callable[..., Any] | None = None, member: bool = False
    ) -> Any:
        # the runtime dispatches on argument kinds (all messages look alike), so an overload that shares
        # its kinds with an earlier one is declared for the type checker only and served by that impl
        if impl is None:
            return cel.Overload(oid, ret, params, is_member=member)
        return cel.Overload(oid, ret, params, is_member=member, impl=impl)

    def fn(name: str, *ovs: Any) -> Any:
        return cel.FunctionDecl(name, list(ovs))

    return [
        fn("quantity", ov("string_to_quantity", Q, [S], _quantity)),
        fn("isQuantity", ov("is_quantity_string", B, [S], _is_quantity)),
        fn("sign", ov("quantity_sign", INT, [Q], _sign)),
        fn(
            "isGreaterThan",
            ov("quantity_is_greater_than", B, [Q, Q], lambda a, b: _cmp(a, b) == 1, True),
            ov("semver_is_greater_than", B, [V, V], None, True),
        ),
        fn(
            "isLessThan",
            ov("quantity_is_less_than", B, [Q, Q], lambda a, b: _cmp(a, b) == -1, True),
            ov("semver_is_less_than", B, [V, V], None, True),
        ),
        fn(
            "compareTo",
            ov("quantity_compare_to", INT, [Q, Q], _cmp, True),
            ov("semver_compare_to", INT, [V, V], None, True),
        ),
        fn("asApproximateFloat", ov("quantity_get_float", D, [Q], _as_float, True)),
        fn("asInteger", ov("quantity_get_int", INT, [Q], _as_integer, True)),
        fn("isInteger", ov("quantity_is_integer", B, [Q], _is_integer, True)),
        fn("add", ov("quantity_add", Q, [Q, Q], _add, True), ov("quantity_add_int", Q, [Q, INT], _add, True)),
        fn("sub", ov("quantity_sub", Q, [Q, Q], _sub, True), ov("quantity_sub_int", Q, [Q, INT], _sub, True)),
        fn("mul", ov("quantity_multiply_int", Q, [Q, INT], _mul, True)),
        fn(
            "semver",
            ov("string_to_semver", V, [S], _semver),
            ov("string_bool_to_semver", V, [S, B], _semver_norm),
        ),
        fn(
            "isSemver",
            ov("is_semver_string", B, [S], _is_semver),
            ov("is_semver_string_bool", B, [S, B], _is_semver_norm),
        ),
        fn("major", ov("semver_major", INT, [V], lambda v: v.major, True)),
        fn("minor", ov("semver_minor", INT, [V], lambda v: v.minor, True)),
        fn("patch", ov("semver_patch", INT, [V], lambda v: v.patch, True)),
        fn("find", ov("string_find_string", S, [S, S], _find, True)),
        fn(
            "findAll",
            ov("string_find_all_string", LS, [S, S], _find_all, True),
            ov("string_find_all_string_int", LS, [S, S, INT], _find_all_n, True),
        ),
        fn("isSorted", ov("list_is_sorted", B, [LDYN], _is_sorted, True)),
        fn("sum", ov("list_sum", DYN, [LDYN], _sum, True)),
        fn("min", ov("list_min", DYN, [LDYN], _min, True)),
        fn("max", ov("list_max", DYN, [LDYN], _max, True)),
        fn("sets.contains", ov("list_sets_contains_list", B, [LDYN, LDYN], _sets_contains)),
        fn("sets.equivalent", ov("list_sets_equivalent_list", B, [LDYN, LDYN], _sets_equivalent)),
        fn("sets.intersects", ov("list_sets_intersects_list", B, [LDYN, LDYN], _sets_intersects)),
    ]


# ``device`` is declared as four qualified variables ("device.driver", ...): the bindings have no
# struct types outside protobuf, and protobuf cannot express map<string, map<string, V>>. The checker
# resolves ``device.capacity`` as one identifier, so ``device.capacity["memory"]`` has the exact upstream
# type map(string, kubernetes.Quantity). Only the bare ``device`` (as a whole value) is not addressable.
_V_DRIVER: Final = "device.driver"
_V_ATTRIBUTES: Final = "device.attributes"
_V_CAPACITY: Final = "device.capacity"
_V_MULTI: Final = "device.allowMultipleAllocations"


def _new_env() -> Any:
    S, DYN = cel.Type.STRING, cel.Type.DYN
    variables = {
        _V_DRIVER: S,
        _V_ATTRIBUTES: cel.Type.Map(S, cel.Type.Map(S, DYN)),
        _V_CAPACITY: cel.Type.Map(S, cel.Type.Map(S, _T_QUANTITY)),
        _V_MULTI: cel.Type.BOOL,
    }
    return cel.NewEnv(
        _POOL,
        variables=variables,
        extensions=[ext_strings.ExtStrings(), ext_bindings.ExtBindings(), ext_optional.ExtOptional()],
        functions=_functions(),
    )


# ---------------------------------------------------------------------------------------------------
# device input


def split_qualified_name(name: str, driver: str) -> tuple[str, str]:
    """Split an attribute/capacity name as written in a ResourceSlice into (domain, id); a name without
    a domain belongs to the driver's domain."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


AttributeValue = bool | int | str | Version


def _attr_to_cel(v: AttributeValue) -> Any:
    if isinstance(v, Version):
        return _smsg(v)
    if isinstance(v, bool | int | str):
        return v
    raise TypeError(f"unsupported attribute value {v!r}")


@dataclass(frozen=True, slots=True)
class DeviceInput:
    """One device as a selector sees it; attributes and capacity are already split by domain
    (use :func:`split_qualified_name`, or :meth:`from_qualified` with names as in a ResourceSlice)."""

    driver: str
    attributes: Mapping[str, Mapping[str, AttributeValue]]
    capacity: Mapping[str, Mapping[str, Quantity]]
    allow_multiple_allocations: bool = False
    # the CEL activation data, built on first evaluation and reused for every selector
    _cel: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)
    # CEL activations built from that data, per environment and set of domains filled in as empty
    _acts: dict[tuple[Any, ...], Any] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_qualified(
        cls,
        driver: str,
        attributes: Mapping[str, AttributeValue],
        capacity: Mapping[str, Quantity],
        allow_multiple_allocations: bool = False,
    ) -> DeviceInput:
        """Build from names as written in a ResourceSlice ("productName", "gpu.nvidia.com/memory")."""
        attrs: dict[str, dict[str, AttributeValue]] = {}
        for name, av in attributes.items():
            d, i = split_qualified_name(name, driver)
            attrs.setdefault(d, {})[i] = av
        caps: dict[str, dict[str, Quantity]] = {}
        for name, cv in capacity.items():
            d, i = split_qualified_name(name, driver)
            caps.setdefault(d, {})[i] = cv
        return cls(driver, attrs, caps, allow_multiple_allocations)

    def cel_data(self) -> dict[str, Any]:
        data = self._cel
        if data is None:
            attrs = {d: {n: _attr_to_cel(v) for n, v in m.items()} for d, m in self.attributes.items()}
            caps = {d: {n: _qmsg(q.value) for n, q in m.items()} for d, m in self.capacity.items()}
            # a domain the device lacks reads as an empty map (upstream); the driver's is always there
            attrs.setdefault(self.driver, {})
            caps.setdefault(self.driver, {})
            data = {
                _V_DRIVER: self.driver,
                _V_ATTRIBUTES: attrs,
                _V_CAPACITY: caps,
                _V_MULTI: self.allow_multiple_allocations,
            }
            object.__setattr__(self, "_cel", data)
        return data


# ---------------------------------------------------------------------------------------------------
# compilation and evaluation

_STR_LIT = r"""(?:'(?P<s1>[^'\\\n]*)'|"(?P<s2>[^"\\\n]*)")"""
_DOMAIN_INDEX_RE: Final = re.compile(rf"device\s*\.\s*(?P<map>attributes|capacity)\s*\[\s*{_STR_LIT}\s*\]")
_STATUS_RE: Final = re.compile(r"^[A-Z_]+: ")


def _clean_status(text: str) -> str:
    text = _STATUS_RE.sub("", text.strip())
    return re.sub(r"\s*\[[A-Z_]+\]$", "", text)


def _compile_message(raw: str) -> str:
    """cel-cpp's issue text (status code, 'ERROR: <input>:l:c: msg', source excerpt) as one line."""
    lines = [ln.strip() for ln in _clean_status(raw).splitlines()]
    msgs = [ln[len("ERROR: ") :] for ln in lines if ln.startswith("ERROR: ")]
    return "; ".join(msgs) if msgs else " ".join(ln for ln in lines if ln and not ln.startswith("|"))


def _domain_hints(expression: str, driver_hint: str | None) -> list[str]:
    """Explain ``device.capacity["memory"]``-style mistakes: the maps are keyed by domain first."""
    hints: list[str] = []
    for m in _DOMAIN_INDEX_RE.finditer(expression):
        key = m["s1"] if m["s1"] is not None else m["s2"]
        which = m["map"]
        if "/" in key:
            domain, ident = key.split("/", 1)
            hints.append(
                f'device.{which} is keyed by domain first: write device.{which}["{domain}"].{ident} '
                f'instead of device.{which}["{key}"]'
            )
        elif "." not in key:
            domain = driver_hint or "<driver domain>"
            hints.append(
                f'device.{which} is keyed by domain first, then by name: "{key}" is not a domain; '
                f'write device.{which}["{domain}"].{key}'
            )
    return hints


def _literal_domains(expression: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    attrs: list[str] = []
    caps: list[str] = []
    for m in _DOMAIN_INDEX_RE.finditer(expression):
        key = m["s1"] if m["s1"] is not None else m["s2"]
        target = attrs if m["map"] == "attributes" else caps
        if key not in target:
            target.append(key)
    return tuple(attrs), tuple(caps)


class CompiledSelector:
    """A type-checked selector expression; evaluate it with :meth:`matches`."""

    __slots__ = ("_attr_domains", "_cap_domains", "_env", "_program", "expression")

    expression: str

    def __init__(self, expression: str, program: Any, env: Any) -> None:
        self.expression = expression
        self._program = program
        self._env = env
        self._attr_domains, self._cap_domains = _literal_domains(expression)

    def _data(self, device: DeviceInput) -> dict[str, Any]:
        data = device.cel_data()
        attrs, caps = data[_V_ATTRIBUTES], data[_V_CAPACITY]
        miss_a = [d for d in self._attr_domains if d not in attrs]
        miss_c = [d for d in self._cap_domains if d not in caps]
        if not miss_a and not miss_c:
            return data
        # domains named in the expression but absent on this device read as empty maps, as upstream
        data = dict(data)
        if miss_a:
            data[_V_ATTRIBUTES] = {**attrs, **{d: {} for d in miss_a}}
        if miss_c:
            data[_V_CAPACITY] = {**caps, **{d: {} for d in miss_c}}
        return data

    def _activation(self, device: DeviceInput) -> Any:
        acts = device._acts
        if acts is None:
            acts = {}
            object.__setattr__(device, "_acts", acts)
        data = device.cel_data()
        attrs, caps = data[_V_ATTRIBUTES], data[_V_CAPACITY]
        key = (
            self._env,
            tuple(d for d in self._attr_domains if d not in attrs),
            tuple(d for d in self._cap_domains if d not in caps),
        )
        act = acts.get(key)
        if act is None:
            act = acts[key] = self._env.Activation(self._data(device))
        return act

    def matches(self, device: DeviceInput) -> bool:
        try:
            result = self._program.eval(self._activation(device))
        except RuntimeError as e:  # cel-cpp aborts (iteration budget, internal limits): per selector
            raise _eval_abort(self.expression, str(e)) from None
        value = result.value()
        if value is True or value is False:
            return bool(value)
        kind = result.type()
        if kind == cel.Type.ERROR:
            raise CELRuntimeError(self.expression, f"evaluation failed: {_runtime_message(str(value))}")
        raise CELRuntimeError(
            self.expression, f"must evaluate to bool, not {kind.name().lower()} ({value!r})"
        )

    def serialized(self) -> bytes:
        """The checked expression as protobuf (``google.protobuf.Any`` of ``cel.expr.CheckedExpr``),
        read by ``cel_cost.estimated_cost``."""
        return bytes(self._program.serialize())

    def __repr__(self) -> str:
        return f"CompiledSelector({self.expression!r})"


def _eval_abort(expression: str, raw: str) -> CELRuntimeError:
    text = _clean_status(raw)
    if "budget" in text.lower() or "cost" in text.lower():
        return CELCostError(
            expression,
            f"evaluation failed: cost limit exceeded ({text}): the expression iterates too much "
            "(e.g. nested comprehensions over large lists)",
        )
    return CELRuntimeError(expression, f"evaluation failed: {_runtime_message(text)}")


def _runtime_message(raw: str) -> str:
    text = _clean_status(raw)
    m = re.match(r'Key not found in map\s*:\s*"?(.*?)"?$', text)
    if m:
        return f"no such key: {m.group(1)}"
    return text


def _compile(env: Any, expression: str, driver_hint: str | None) -> CompiledSelector:
    if not isinstance(expression, str) or not expression.strip():
        raise CELCompileError(str(expression), "compilation failed: empty expression")
    try:
        program = env.compile(expression)
    except RuntimeError as e:
        msg = "compilation failed: " + _compile_message(str(e))
        hints = _domain_hints(expression, driver_hint)
        if hints:
            msg += " (" + "; ".join(hints) + ")"
        raise CELCompileError(expression, msg) from None
    rt = program.return_type()
    if rt != cel.Type.BOOL and rt != cel.Type.DYN:
        msg = f"must evaluate to bool or the unknown type, not {_type_name(rt)}"
        hints = _domain_hints(expression, driver_hint)
        if hints:
            msg += " (" + "; ".join(hints) + ")"
        raise CELCompileError(expression, msg)
    return CompiledSelector(expression, program, env)


def _type_name(t: Any) -> str:
    name = str(t.name())
    return name if "." in name else name.lower()


class SelectorCompiler:
    """Owns one CEL environment and a cache: each distinct expression is compiled once (failures too).

    Not shared between threads; create one per allocation run or per controller."""

    __slots__ = ("_cache", "_env")

    def __init__(self) -> None:
        self._env = _new_env()
        self._cache: dict[str, CompiledSelector | CELCompileError] = {}

    def compile(self, expression: str, *, driver_hint: str | None = None) -> CompiledSelector:
        hit = self._cache.get(expression)
        if hit is None:
            try:
                hit = _compile(self._env, expression, driver_hint)
            except CELCompileError as e:
                hit = e
            self._cache[expression] = hit
        if isinstance(hit, CELCompileError):
            raise CELCompileError(hit.expression, hit.message)
        return hit

    def __len__(self) -> int:
        return len(self._cache)

    def compiled(self) -> Iterable[str]:
        return iter(self._cache)


_DEFAULT_ENV: Final = _new_env()


def compile_selector(expression: str, *, driver_hint: str | None = None) -> CompiledSelector:
    """Compile without a cache (use :class:`SelectorCompiler` to compile each expression once)."""
    return _compile(_DEFAULT_ENV, expression, driver_hint)


def rule_environment(variables: Iterable[str]) -> Any:
    """A CEL environment with the same Kubernetes libraries (quantity, semver, strings, lists, regex,
    sets, optionals) and the given variables, each of the dynamic type: what CRD validation rules
    (``x-kubernetes-validations``: ``self``, ``oldSelf``) are compiled in. Used by the API emulator."""
    return cel.NewEnv(
        _POOL,
        variables={name: cel.Type.DYN for name in variables},
        extensions=[ext_strings.ExtStrings(), ext_bindings.ExtBindings(), ext_optional.ExtOptional()],
        functions=_functions(),
    )
