"""The API server's cost limit for DRA selectors, estimated before any device is seen.

kube-apiserver refuses a DeviceClass, ResourceClaim or ResourceClaimTemplate whose CEL selector has an
estimated worst-case cost above ``CELSelectorExpressionMaxCost`` (1,000,000, k8s.io/api/resource/v1)
and stops an evaluation at the same runtime cost. :func:`estimated_cost` walks the type-checked
expression (the ``cel.expr.CheckedExpr`` protobuf the engine serialises) and adds up a worst-case cost
in the manner of cel-go's estimator: 1 per identifier, field selection and function call, 10 to build a
list and 30 a map, and for a comprehension (``all``, ``exists``, ``map``, ``filter``, ...) the cost of
its range plus *size of the range* times the cost of one iteration. Sizes: a list literal has its
length; ``device.attributes`` / ``device.capacity`` and each domain map in them at most 32 entries (the
API server's limit of attributes and capacities per device); a string at most 64 characters; anything
else whose size cannot be known is taken as 64 elements. ``map``/``filter`` results are as long as
their range.

The figure is an estimate of the same order as the API server's, not its exact number: what matters is
that nested comprehensions over large lists (``L.all(x, L.all(y, L.all(z, ...))))`` over 300 elements
costs ~10^8) are refused, while ordinary selectors cost a few dozen.

    estimated_cost(compiled)                -> int
    check_selector_cost(expression)         -> None, or raises CELCostError (CELCompileError as compile())
    selector_problems(obj)                  -> [FieldProblem] for a DeviceClass, ResourceClaim or
                                               ResourceClaimTemplate: each selector that does not
                                               compile or costs too much, as the API server refuses it
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from queueing.api.base import KubeObject
from queueing.api.resource import (
    DeviceClaim,
    DeviceClass,
    DeviceSelector,
    ResourceClaim,
    ResourceClaimTemplate,
)
from queueing.api.validation import FieldProblem
from queueing.dra.allocator import _DRIVER_RE  # the allocator's reading of a selector's driver
from queueing.dra.cel import CELCompileError, CELCostError, CompiledSelector, compile_selector

__all__ = [
    "SELECTOR_MAX_COST",
    "check_selector_cost",
    "estimated_cost",
    "selector_expressions",
    "selector_problems",
]

#: k8s.io/api/resource/v1 CELSelectorExpressionMaxCost
SELECTOR_MAX_COST: Final = 1_000_000
_MAP_ENTRIES: Final = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
_STRING_LENGTH: Final = 64  # DeviceAttributeMaxValueLength
_UNKNOWN_SIZE: Final = 64
_LIST_COST: Final = 10
_MAP_COST: Final = 30


# ------------------------------------------------------------------ protobuf wire format (no schema)
def _varint(b: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def _fields(b: bytes) -> dict[int, list[int | bytes]]:
    out: dict[int, list[int | bytes]] = {}
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(b, i)
        elif wire == 2:
            n, i = _varint(b, i)
            value, i = b[i : i + n], i + n
        elif wire == 1:
            value, i = b[i : i + 8], i + 8
        elif wire == 5:
            value, i = b[i : i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.setdefault(num, []).append(value)
    return out


def _msg(f: dict[int, list[int | bytes]], num: int) -> bytes | None:
    v = f.get(num)
    return v[0] if v and isinstance(v[0], bytes) else None


def _msgs(f: dict[int, list[int | bytes]], num: int) -> list[bytes]:
    return [v for v in f.get(num, []) if isinstance(v, bytes)]


def _str(f: dict[int, list[int | bytes]], num: int) -> str:
    v = _msg(f, num)
    return v.decode("utf-8", "replace") if v is not None else ""


# ------------------------------------------------------------------ the estimate
@dataclass
class _Est:
    cost: int
    size: int = _UNKNOWN_SIZE  # elements of a list or map, characters of a string
    elem: int = _UNKNOWN_SIZE  # size of each element (for nested lists)


@dataclass
class _Walker:
    scopes: list[dict[str, _Est]] = field(default_factory=list)

    def expr(self, b: bytes | None) -> _Est:
        if b is None:
            return _Est(0, 0)
        f = _fields(b)
        if (c := _msg(f, 3)) is not None:  # constant
            cf = _fields(c)
            s = _msg(cf, 6)
            return _Est(0, len(s.decode("utf-8", "replace")) if s is not None else 0)
        if (c := _msg(f, 4)) is not None:  # identifier
            name = _str(_fields(c), 1)
            for scope in reversed(self.scopes):
                if name in scope:
                    return _Est(1, scope[name].size, scope[name].elem)
            if name in ("device.attributes", "device.capacity"):
                return _Est(1, _MAP_ENTRIES, _MAP_ENTRIES)
            return _Est(1, _STRING_LENGTH)
        if (c := _msg(f, 5)) is not None:  # field selection
            sf = _fields(c)
            operand = self.expr(_msg(sf, 1))
            return _Est(operand.cost + 1, operand.elem, _STRING_LENGTH)
        if (c := _msg(f, 6)) is not None:  # call
            cf = _fields(c)
            fn = _str(cf, 2)
            target = self.expr(_msg(cf, 1))
            args = [self.expr(a) for a in _msgs(cf, 3)]
            cost = 1 + target.cost + sum(a.cost for a in args)
            if fn == "_[_]" and args:
                return _Est(cost, args[0].elem if args[0].elem else _UNKNOWN_SIZE, _STRING_LENGTH)
            if fn in ("matches", "find", "findAll", "contains", "startsWith", "endsWith", "split"):
                # string scans cost about 1 per 10 characters in cel-go
                cost += sum(a.size for a in [target, *args]) // 10
            return _Est(cost, _UNKNOWN_SIZE)
        if (c := _msg(f, 7)) is not None:  # list literal
            elems = [self.expr(e) for e in _msgs(_fields(c), 1)]
            return _Est(
                _LIST_COST + sum(e.cost for e in elems),
                len(elems),
                max((e.size for e in elems), default=0),
            )
        if (c := _msg(f, 8)) is not None:  # map or message literal
            entries = _msgs(_fields(c), 2)
            cost = _MAP_COST
            for e in entries:
                ef = _fields(e)
                cost += self.expr(_msg(ef, 3)).cost + self.expr(_msg(ef, 4)).cost
            return _Est(cost, len(entries))
        if (c := _msg(f, 9)) is not None:  # comprehension
            cf = _fields(c)
            rng = self.expr(_msg(cf, 2))
            init = self.expr(_msg(cf, 4))
            n = max(rng.size, 0)
            scope = {_str(cf, 1): _Est(0, rng.elem, _UNKNOWN_SIZE)}
            if (v2 := _str(cf, 8)) != "":
                scope[v2] = _Est(0, rng.elem, _UNKNOWN_SIZE)
            scope[_str(cf, 3)] = _Est(0, n if init.size == 0 else init.size, rng.elem)
            self.scopes.append(scope)
            try:
                step = self.expr(_msg(cf, 5)).cost + self.expr(_msg(cf, 6)).cost
                result = self.expr(_msg(cf, 7))
            finally:
                self.scopes.pop()
            return _Est(rng.cost + init.cost + n * step + result.cost, result.size, rng.elem)
        return _Est(1)


def estimated_cost(selector: CompiledSelector) -> int:
    """Worst-case cost of evaluating ``selector`` on one device (see the module docstring)."""
    any_msg = _fields(selector.serialized())
    checked = _msg(any_msg, 2)
    if checked is None:
        return 0
    return _Walker().expr(_msg(_fields(checked), 4)).cost


def check_selector_cost(expression: str, *, driver_hint: str | None = None) -> None:
    """Raise :class:`CELCostError` when the estimated cost is above the API server's limit (a
    :class:`CELCompileError` when the expression does not compile)."""
    sel = compile_selector(expression, driver_hint=driver_hint)
    cost = estimated_cost(sel)
    if cost > SELECTOR_MAX_COST:
        raise CELCostError(
            expression,
            f"compilation failed: estimated cost {cost} exceeds the limit of {SELECTOR_MAX_COST} for a "
            "device selector (the API server refuses it; avoid nested comprehensions over large lists)",
        )


def _selectors(prefix: str, sels: list[DeviceSelector] | None) -> Iterator[tuple[str, str, str | None]]:
    # the driver a selector of the same list names, for the domain hint of compile errors (as the
    # allocator gives it)
    hint = None
    for sel in sels or []:
        m = _DRIVER_RE.search(sel.cel.expression) if sel.cel is not None else None
        if m:
            hint = m.group(1) or m.group(2)
            break
    for i, sel in enumerate(sels or []):
        if sel.cel is not None:
            yield f"{prefix}.selectors[{i}].cel.expression", sel.cel.expression, hint


def _claim_selectors(prefix: str, devices: DeviceClaim) -> Iterator[tuple[str, str, str | None]]:
    for i, req in enumerate(devices.requests or []):
        if req.exactly is not None:
            yield from _selectors(f"{prefix}.requests[{i}].exactly", req.exactly.selectors)
        for j, sub in enumerate(req.first_available or []):
            yield from _selectors(f"{prefix}.requests[{i}].firstAvailable[{j}]", sub.selectors)


def selector_expressions(obj: KubeObject) -> list[tuple[str, str, str | None]]:
    """``(field path, expression, driver hint)`` of every CEL selector of a DeviceClass, ResourceClaim
    or ResourceClaimTemplate (none for other kinds)."""
    if isinstance(obj, DeviceClass):
        return list(_selectors("spec", obj.spec.selectors))
    if isinstance(obj, ResourceClaim):
        return list(_claim_selectors("spec.devices", obj.spec.devices))
    if isinstance(obj, ResourceClaimTemplate):
        return list(_claim_selectors("spec.spec.devices", obj.spec.spec.devices))
    return []


def selector_problems(obj: KubeObject) -> list[FieldProblem]:
    """The selectors of a DeviceClass, ResourceClaim or ResourceClaimTemplate that the API server
    refuses: compile errors and estimated cost over :data:`SELECTOR_MAX_COST`."""
    problems = []
    for path, expression, hint in selector_expressions(obj):
        try:
            check_selector_cost(expression, driver_hint=hint)
        except (CELCompileError, CELCostError) as e:  # the allocator's wording for compile errors
            problems.append(FieldProblem(path, f"CEL compile error: {e.message}"))
    return problems
