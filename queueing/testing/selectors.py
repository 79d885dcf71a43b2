"""Label and field selectors as the Kubernetes API server understands them (query-string form).

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a`` (exists),
``!a`` (does not exist), comma-separated and ANDed. Field selectors: ``path=value``, ``path==value``,
``path!=value`` over any dotted path of the object (the real API server only allows a few fields per
kind; the emulator is permissive). A missing field compares as the empty string.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["SelectorError", "field_value", "parse_field_selector", "parse_label_selector"]


class SelectorError(ValueError):
    pass


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        val = labels.get(self.key)
        if self.op == "=":
            return present and val == self.values[0]
        if self.op == "!=":
            return not present or val != self.values[0]
        if self.op == "in":
            return present and val in self.values
        if self.op == "notin":
            return not present or val not in self.values
        if self.op == "exists":
            return present
        return not present


_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_RE = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


def _split_top(sel: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in sel:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for p in (s.strip() for s in parts) if p]


def parse_label_selector(sel: str | None) -> Callable[[dict[str, str]], bool]:
    """Return a predicate over a label map; raise SelectorError on a malformed selector."""
    reqs: list[LabelRequirement] = []
    for part in _split_top(sel or ""):
        if m := _SET_RE.match(part):
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append(LabelRequirement(m.group(1), m.group(2), values))
            continue
        if m := _EQ_RE.match(part):
            op = "!=" if m.group(2) == "!=" else "="
            reqs.append(LabelRequirement(m.group(1), op, (m.group(3),)))
            continue
        if m := _EXISTS_RE.match(part):
            reqs.append(LabelRequirement(m.group(2), "!exists" if m.group(1) else "exists"))
            continue
        raise SelectorError(f"unable to parse requirement: {part!r}")
    return lambda labels: all(r.matches(labels) for r in reqs)


def field_value(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for p in path.split("."):
        if not isinstance(cur, dict) or p not in cur:
            return ""
        cur = cur[p]
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


_FIELD_RE = re.compile(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$")


def parse_field_selector(sel: str | None) -> Callable[[dict[str, Any]], bool]:
    reqs: list[tuple[str, bool, str]] = []
    for part in _split_top(sel or ""):
        m = _FIELD_RE.match(part)
        if not m:
            raise SelectorError(f"invalid field selector: {part!r}")
        reqs.append((m.group(1), m.group(2) != "!=", m.group(3)))
    return lambda obj: all((field_value(obj, p) == v) == eq for p, eq, v in reqs)
