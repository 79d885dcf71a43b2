"""A small PromQL evaluator for the alert rules of ``deploy/monitoring`` (tests only).

PyPI has PromQL parsers and query builders but no maintained evaluator, so this one evaluates exactly
the subset the rules use, with Prometheus's semantics:

* instant vector selectors with ``=``, ``!=``, ``=~``, ``!~`` matchers (the latest sample within the
  5 minute lookback), and range selectors ``name{...}[15m]`` as the argument of ``rate`` and
  ``increase`` (samples in ``(t - range, t]``, counter resets, Prometheus's extrapolation);
* ``sum``, ``max``, ``min``, ``count``, ``avg`` with ``by (...)`` or ``without (...)``;
* ``absent(v)`` (1 with the selector's equality labels when ``v`` is empty);
* comparisons (``== != > < >= <=``, filtering, or with ``bool``) and ``+ - * /`` between a vector and
  a scalar or two scalars, number literals and parentheses.

Anything else raises :class:`PromQLError` naming what is not supported, so a rule that grows past the
subset fails its test rather than being evaluated wrongly.

Samples come from scrapes of the real ``/metrics`` text (:meth:`Samples.add_scrape`, stamped with the
instant the test says: alert tests move a virtual clock instead of sleeping for ``for:``) or are added
one by one. :func:`alert_states` evaluates a rule at a series of instants as Prometheus's rule manager
does (active since the first instant of an unbroken run; ``firing`` once ``for`` has passed)::

    s = Samples()
    s.add_scrape(0.0, text, {"job": "queueing-metrics", "instance": "a"})
    evaluate('max(queueing_scheduling_stalled) >= 1', s, at=0.0)   # {labels: value}
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

from queueing.scheduling.config import parse_duration

__all__ = [
    "LOOKBACK",
    "PromQLError",
    "Samples",
    "Vector",
    "alert_states",
    "evaluate",
    "labels_of",
]

LOOKBACK = 300.0  # Prometheus's default lookback delta (5m)

Labels = frozenset[tuple[str, str]]
Vector = dict[Labels, float]


class PromQLError(ValueError):
    """An expression outside the supported subset, or malformed."""


def labels_of(**kv: str) -> Labels:
    return frozenset(kv.items())


@dataclass
class Samples:
    """Time series: labels (``__name__`` included) -> ``[(t, value), ...]`` in time order."""

    series: dict[Labels, list[tuple[float, float]]] = field(default_factory=dict)
    # metric name -> its series' labels (a selector with a name looks only at those)
    by_name: dict[str, list[Labels]] = field(default_factory=dict)

    def add(self, t: float, name: str, labels: Mapping[str, str], value: float) -> None:
        key = frozenset({**labels, "__name__": name}.items())
        points = self.series.get(key)
        if points is None:
            points = self.series[key] = []
            self.by_name.setdefault(name, []).append(key)
        if points and points[-1][0] >= t:
            raise ValueError(
                f"samples of {dict(key)} must be added in time order ({t} after {points[-1][0]})"
            )
        points.append((t, value))

    def add_scrape(self, t: float, text: str, target: Mapping[str, str]) -> None:
        """Every sample of one scrape of a Prometheus text exposition, with the target's labels
        (``job``, ``instance``) and ``up`` 1, as Prometheus records a successful scrape."""
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                # a label the target also sets is kept as exported_<name> (honor_labels: false)
                own = {f"exported_{k}" if k in target else k: v for k, v in s.labels.items()}
                self.add(t, s.name, {**own, **target}, float(s.value))
        self.add(t, "up", target, 1.0)

    def add_failed_scrape(self, t: float, target: Mapping[str, str]) -> None:
        """A scrape that failed: only ``up`` 0 (the target's other series go stale)."""
        self.add(t, "up", target, 0.0)


# ------------------------------------------------------------------ parsing
_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(?![A-Za-z_0-9.])|(?P<dur>\d+(?:ms|[smhdwy]))+"
    r"|(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)|(?P<str>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')"
    r"|(?P<op>==|!=|>=|<=|=~|!~|[-+*/<>=(){}\[\],]))"
)


def _tokens(expr: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    expr = expr.rstrip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None or m.end() == pos:
            raise PromQLError(f"cannot read {expr[pos : pos + 20]!r} at offset {pos}")
        kind = m.lastgroup or ""
        text = m.group(0).strip()
        if kind == "" and text:  # a duration's repeated group leaves lastgroup unset
            kind = "dur"
        out.append((kind, text))
        pos = m.end()
    return out


@dataclass(frozen=True)
class Matcher:
    name: str
    op: Literal["=", "!=", "=~", "!~"]
    value: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        v = labels.get(self.name, "")
        if self.op == "=":
            return v == self.value
        if self.op == "!=":
            return v != self.value
        hit = re.fullmatch(self.value, v) is not None
        return hit if self.op == "=~" else not hit


@dataclass(frozen=True)
class Selector:
    matchers: tuple[Matcher, ...]
    range: float | None = None


@dataclass(frozen=True)
class Number:
    value: float


@dataclass(frozen=True)
class Aggregate:
    op: str
    grouping: tuple[str, ...]
    without: bool
    arg: Node


@dataclass(frozen=True)
class Call:
    func: str
    arg: Node


@dataclass(frozen=True)
class Binary:
    op: str
    left: Node
    right: Node
    bool_: bool = False


Node = Selector | Number | Aggregate | Call | Binary

_AGGREGATIONS = ("sum", "max", "min", "count", "avg")
_FUNCTIONS = ("absent", "rate", "increase")
_COMPARISONS = ("==", "!=", ">", "<", ">=", "<=")


class _Parser:
    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.toks = _tokens(expr)
        self.i = 0

    def peek(self) -> tuple[str, str]:
        return self.toks[self.i] if self.i < len(self.toks) else ("eof", "")

    def take(self, text: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if text is not None and tok[1] != text:
            raise PromQLError(f"expected {text!r}, found {tok[1] or 'the end'!r} in {self.expr!r}")
        self.i += 1
        return tok

    def parse(self) -> Node:
        node = self.comparison()
        if self.peek()[0] != "eof":
            raise PromQLError(f"unexpected {self.peek()[1]!r} in {self.expr!r}")
        return node

    def comparison(self) -> Node:
        left = self.additive()
        while self.peek()[1] in _COMPARISONS:
            op = self.take()[1]
            is_bool = self.peek() == ("ident", "bool")
            if is_bool:
                self.take()
            left = Binary(op, left, self.additive(), is_bool)
        return left

    def additive(self) -> Node:
        left = self.multiplicative()
        while self.peek()[1] in ("+", "-"):
            op = self.take()[1]
            left = Binary(op, left, self.multiplicative())
        return left

    def multiplicative(self) -> Node:
        left = self.primary()
        while self.peek()[1] in ("*", "/"):
            op = self.take()[1]
            left = Binary(op, left, self.primary())
        return left

    def primary(self) -> Node:
        kind, text = self.peek()
        if kind == "num":
            self.take()
            return Number(float(text))
        if text == "-":
            self.take()
            return Binary("*", Number(-1.0), self.primary())
        if text == "(":
            self.take()
            node = self.comparison()
            self.take(")")
            return node
        if text == "{":
            return self.selector(None)
        if kind != "ident":
            raise PromQLError(f"unexpected {text or 'end'!r} in {self.expr!r}")
        self.take()
        if text in _AGGREGATIONS:
            return self.aggregate(text)
        if self.peek()[1] == "(":
            if text not in _FUNCTIONS:
                raise PromQLError(f"function {text}() is not supported by this evaluator")
            self.take("(")
            arg = self.comparison()
            self.take(")")
            if text in ("rate", "increase") and not (isinstance(arg, Selector) and arg.range is not None):
                raise PromQLError(f"{text}() needs a range selector")
            return Call(text, arg)
        return self.selector(text)

    def grouping(self) -> tuple[str, ...]:
        self.take("(")
        names: list[str] = []
        while self.peek()[1] != ")":
            names.append(self.take()[1])
            if self.peek()[1] == ",":
                self.take()
        self.take(")")
        return tuple(names)

    def aggregate(self, op: str) -> Node:
        grouping: tuple[str, ...] = ()
        without = False
        if self.peek()[1] in ("by", "without"):
            without = self.take()[1] == "without"
            grouping = self.grouping()
        self.take("(")
        arg = self.comparison()
        self.take(")")
        if self.peek()[1] in ("by", "without"):
            without = self.take()[1] == "without"
            grouping = self.grouping()
        return Aggregate(op, grouping, without, arg)

    def selector(self, name: str | None) -> Selector:
        matchers: list[Matcher] = [Matcher("__name__", "=", name)] if name else []
        if self.peek()[1] == "{":
            self.take()
            while self.peek()[1] != "}":
                label = self.take()[1]
                op = self.take()[1]
                if op not in ("=", "!=", "=~", "!~"):
                    raise PromQLError(f"bad matcher operator {op!r} in {self.expr!r}")
                kind, raw = self.take()
                if kind != "str":
                    raise PromQLError(f"a label value must be a string in {self.expr!r}")
                matchers.append(Matcher(label, op, bytes(raw[1:-1], "utf-8").decode("unicode_escape")))  # type: ignore[arg-type]
                if self.peek()[1] == ",":
                    self.take()
            self.take("}")
        if not matchers:
            raise PromQLError(f"a selector needs a name or a matcher in {self.expr!r}")
        rng = None
        if self.peek()[1] == "[":
            self.take()
            kind, text = self.take()
            if kind != "dur":
                raise PromQLError(f"a range must be a duration in {self.expr!r}")
            rng = parse_duration(text)
            self.take("]")
        return Selector(tuple(matchers), rng)


def parse(expr: str) -> Node:
    return _Parser(expr).parse()


# ------------------------------------------------------------------ evaluation
def _select(sel: Selector, samples: Samples) -> Iterable[tuple[Labels, list[tuple[float, float]]]]:
    name = next((m.value for m in sel.matchers if m.name == "__name__" and m.op == "="), None)
    keys = samples.by_name.get(name, []) if name is not None else list(samples.series)
    for key in keys:
        d = dict(key)
        if all(m.matches(d) for m in sel.matchers):
            yield key, samples.series[key]


def _window(points: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """The samples with ``start < t <= end``."""
    lo = bisect.bisect_right(points, (start, math.inf))
    hi = bisect.bisect_right(points, (end, math.inf))
    return points[lo:hi]


def _instant(sel: Selector, samples: Samples, at: float) -> Vector:
    out: Vector = {}
    for key, points in _select(sel, samples):
        recent = _window(points, at - LOOKBACK, at)
        if recent:
            out[key] = recent[-1][1]
    return out


def _drop_name(key: Labels) -> Labels:
    return frozenset(kv for kv in key if kv[0] != "__name__")


def _extrapolated(
    points: Sequence[tuple[float, float]], start: float, end: float, rate: bool
) -> float | None:
    """Prometheus's ``extrapolatedRate`` for a counter over ``(start, end]``: the increase between the
    first and the last sample (resets added back), extrapolated to the window's edges when a sample
    is within 1.1 spacings of them (else by half a spacing), never to below zero at the start."""
    if len(points) < 2:
        return None
    first_t, first_v = points[0]
    last_t, last_v = points[-1]
    result = last_v - first_v
    prev = first_v
    for _, v in points[1:]:
        if v < prev:  # a counter reset: what was counted before it still counts
            result += prev
        prev = v
    sampled = last_t - first_t
    avg = sampled / (len(points) - 1)
    threshold = avg * 1.1
    to_start, to_end = first_t - start, end - last_t
    if to_start >= threshold:
        to_start = avg / 2
    if result > 0 and first_v >= 0:
        to_start = min(to_start, sampled * (first_v / result))
    if to_end >= threshold:
        to_end = avg / 2
    result *= (sampled + to_start + to_end) / sampled
    return result / (end - start) if rate else result


def _scalar_op(op: str, a: float, b: float) -> float | bool:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b if b else (math.nan if a == 0 else math.copysign(math.inf, a))
    return {
        "==": a == b,
        "!=": a != b,
        ">": a > b,
        "<": a < b,
        ">=": a >= b,
        "<=": a <= b,
    }[op]


def _eval(node: Node, samples: Samples, at: float) -> Vector | float:
    if isinstance(node, Number):
        return node.value
    if isinstance(node, Selector):
        if node.range is not None:
            raise PromQLError("a range selector is only supported inside rate() or increase()")
        return _instant(node, samples, at)
    if isinstance(node, Call):
        if node.func == "absent":
            v = _eval(node.arg, samples, at)
            if not isinstance(v, dict):
                raise PromQLError("absent() needs an instant vector")
            if v:
                return {}
            labels: frozenset[tuple[str, str]] = frozenset()
            if isinstance(node.arg, Selector):
                labels = frozenset(
                    (m.name, m.value) for m in node.arg.matchers if m.op == "=" and m.name != "__name__"
                )
            return {labels: 1.0}
        sel = node.arg
        assert isinstance(sel, Selector) and sel.range is not None
        out: Vector = {}
        start = at - sel.range
        for key, points in _select(sel, samples):
            window = _window(points, start, at)
            r = _extrapolated(window, start, at, node.func == "rate")
            if r is not None:
                out[_drop_name(key)] = r
        return out
    if isinstance(node, Aggregate):
        v = _eval(node.arg, samples, at)
        if not isinstance(v, dict):
            raise PromQLError(f"{node.op}() needs an instant vector")
        groups: dict[Labels, list[float]] = {}
        for key, value in v.items():
            if node.without:
                g = frozenset(kv for kv in key if kv[0] not in node.grouping and kv[0] != "__name__")
            else:
                g = frozenset(kv for kv in key if kv[0] in node.grouping)
            groups.setdefault(g, []).append(value)
        agg: dict[str, Callable[[list[float]], float]] = {
            "sum": lambda xs: math.fsum(xs),
            "max": max,
            "min": min,
            "count": lambda xs: float(len(xs)),
            "avg": lambda xs: math.fsum(xs) / len(xs),
        }
        return {g: float(agg[node.op](xs)) for g, xs in groups.items()}
    left, right = _eval(node.left, samples, at), _eval(node.right, samples, at)
    comparison = node.op in _COMPARISONS
    if isinstance(left, float) and isinstance(right, float):
        if comparison and not node.bool_:
            raise PromQLError("comparisons between scalars need bool")
        return float(_scalar_op(node.op, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        raise PromQLError("operations between two vectors are not supported by this evaluator")
    vec, scalar, vec_left = (left, right, True) if isinstance(left, dict) else (right, left, False)
    assert isinstance(vec, dict) and isinstance(scalar, float)
    result: Vector = {}
    for key, value in vec.items():
        a, b = (value, scalar) if vec_left else (scalar, value)
        r = _scalar_op(node.op, a, b)
        if comparison and not node.bool_:
            if r:
                result[key] = value  # a filter keeps the vector's sample as it is
        else:
            result[_drop_name(key)] = float(r)
    return result


def evaluate(expr: str, samples: Samples, at: float) -> Vector:
    """The instant vector ``expr`` gives at time ``at`` (a scalar result is an error: a rule's
    expression is a vector)."""
    v = _eval(parse(expr), samples, at)
    if not isinstance(v, dict):
        raise PromQLError(f"{expr!r} is a scalar, not a vector")
    return v


AlertState = Literal["pending", "firing"]


def alert_states(
    expr: str, for_: float, samples: Samples, instants: Iterable[float]
) -> dict[Labels, AlertState]:
    """The alerts of a rule after it was evaluated at each of ``instants`` (ascending), as the rule
    manager keeps them: an element of the result is active from the first instant of an unbroken run
    and ``firing`` once it has been active for ``for_`` seconds; one missing at an instant is resolved."""
    active: dict[Labels, float] = {}
    last = None
    node = parse(expr)
    for at in instants:
        if last is not None and at <= last:
            raise ValueError("instants must ascend")
        last = at
        v = _eval(node, samples, at)
        if not isinstance(v, dict):
            raise PromQLError(f"{expr!r} is a scalar, not a vector")
        keys = {_drop_name(k) for k in v}
        active = {k: active.get(k, at) for k in keys}
    assert last is not None, "no instants"
    return {k: "firing" if last - since >= for_ else "pending" for k, since in active.items()}
