"""The subset of Kubernetes JSONPath used by ``additionalPrinterColumns`` and a few table helpers.

Supported: ``.field``, ``['field']``, ``[n]`` (negative too), ``[*]``, ``.*``, and filters
``[?(@.path == "value")]`` / ``!=`` / ``<`` / ``>`` / ``<=`` / ``>=`` on strings, numbers and booleans
(``[?(@.path)]`` tests existence). ``evaluate`` returns every match in document order.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

__all__ = ["JSONPathError", "evaluate", "human_duration"]


class JSONPathError(ValueError):
    pass


_TOKEN = re.compile(
    r"""\.(?P<field>[A-Za-z0-9_$\-/]+)
      | \.\*(?P<wild>)
      | \[\s*'(?P<qfield>[^']*)'\s*\]
      | \[\s*"(?P<dqfield>[^"]*)"\s*\]
      | \[\s*(?P<index>-?\d+)\s*\]
      | \[\s*\*\s*\](?P<star>)
      | \[\s*\?\(\s*@(?P<fpath>(?:\.[A-Za-z0-9_\-/]+)+)\s*(?:(?P<op>==|!=|<=|>=|<|>)\s*(?P<lit>"[^"]*"|'[^']*'|-?\d+(?:\.\d+)?|true|false))?\s*\)\s*\]
    """,
    re.VERBOSE,
)


def _tokens(path: str) -> list[tuple[str, Any]]:
    expr = path.strip()
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1].strip()
    if expr.startswith("$"):
        expr = expr[1:]
    if expr and not expr.startswith((".", "[")):
        expr = "." + expr
    out: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            raise JSONPathError(f"unsupported JSONPath {path!r} at {expr[pos:]!r}")
        pos = m.end()
        if m.group("field") is not None:
            out.append(("field", m.group("field")))
        elif m.group("qfield") is not None:
            out.append(("field", m.group("qfield")))
        elif m.group("dqfield") is not None:
            out.append(("field", m.group("dqfield")))
        elif m.group("index") is not None:
            out.append(("index", int(m.group("index"))))
        elif m.group("wild") is not None or m.group("star") is not None:
            out.append(("star", None))
        else:
            lit = m.group("lit")
            value: Any = None
            if lit is not None:
                value = lit[1:-1] if lit[0] in "\"'" else json.loads(lit)
            out.append(("filter", (m.group("fpath")[1:].split("."), m.group("op"), value)))
    return out


def _lookup(obj: Any, parts: list[str]) -> tuple[bool, Any]:
    cur = obj
    for p in parts:
        if not isinstance(cur, dict) or p not in cur:
            return False, None
        cur = cur[p]
    return True, cur


def _compare(left: Any, op: str, right: Any) -> bool:
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    try:
        return bool({"<": left < right, ">": left > right, "<=": left <= right, ">=": left >= right}[op])
    except TypeError:
        return False


def evaluate(path: str, obj: Any) -> list[Any]:
    current = [obj]
    for kind, arg in _tokens(path):
        nxt: list[Any] = []
        for node in current:
            if kind == "field":
                if isinstance(node, dict) and arg in node:
                    nxt.append(node[arg])
            elif kind == "index":
                if isinstance(node, list) and -len(node) <= arg < len(node):
                    nxt.append(node[arg])
            elif kind == "star":
                if isinstance(node, list):
                    nxt.extend(node)
                elif isinstance(node, dict):
                    nxt.extend(node.values())
            else:
                parts, op, value = arg
                items = node if isinstance(node, list) else [node]
                for item in items:
                    found, left = _lookup(item, parts)
                    if found and (op is None or _compare(left, op, value)):
                        nxt.append(item)
        current = nxt
    return current


def human_duration(seconds: float) -> str:
    """Kubernetes' ``duration.HumanDuration`` (the AGE column)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rem = s % 60
        return f"{minutes}m" if rem == 0 else f"{minutes}m{rem}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rem = minutes % 60
        return f"{hours}h" if rem == 0 else f"{hours}h{rem}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rem = hours % 24
        return f"{hours // 24}d" if rem == 0 else f"{hours // 24}d{rem}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def parse_time(value: str) -> datetime | None:
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)
