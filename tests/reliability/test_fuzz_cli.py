"""Fuzzing the YAML and CEL inputs of ``queueing allocate`` and ``queueing simulate`` (hypothesis):
whatever the input, the command never shows a traceback; it exits 0/1 (valid input) or 2 with one
``error:`` line on stderr that names what is wrong.

Mutations start from a small valid scenario (tests/reliability/data/small-scenario.yaml): a field at a
random path replaced by a random value (wrong types, nulls, huge or deeply nested values), a CEL
expression replaced by random text built from CEL tokens, or the YAML text itself mangled."""

from __future__ import annotations

import contextlib
import copy
import io
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queueing.cli import main

BASE = Path(__file__).parent / "data" / "small-scenario.yaml"
DOCS: list[dict[str, Any]] = [d for d in yaml.safe_load_all(BASE.read_text()) if d]
ALLOCATE_KINDS = {"Node", "ResourceSlice", "DeviceClass", "ResourceClaimTemplate", "Job"}

CEL_TOKENS = [
    "device", ".driver", ".attributes", '["gpu.example.com"]', ".index", ".capacity", ".memory",
    "==", "!=", ">=", "&&", "||", "!", "(", ")", "[", "]", "{", "}", ",", ".", "?", ":",
    '"gpu.example.com"', "'x'", "1", "-1", "9223372036854775807", "1.5", "true", "null",
    "quantity(", '"40Gi"', ")", ".compareTo(", "semver(", '"1.2.3"', ".isGreaterThan(", "size(",
    ".exists(d, d", ".all(x,", "in", "has(", "matches(", '"[a-"', "dyn(", "int(", "string(",
    " ", "\\", "\x00", "💥",
]  # fmt: skip

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["", "-1", "1e309", "NaN", "80Gi", "1.5Ti", "0x10", "a" * 300, "Ki", "12Qi"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
cel_text = st.lists(st.sampled_from(CEL_TOKENS), min_size=0, max_size=14).map("".join)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for p in path[:-1]:
        obj = obj[p]
    obj[path[-1]] = value


def _nested(depth: int) -> Any:
    v: Any = "deep"
    for _ in range(depth):
        v = {"a": [v]}
    return v


@st.composite
def mutated(draw: st.DrawFn) -> str:
    docs = copy.deepcopy(DOCS)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["field", "cel", "delete", "deep", "text"]))
        i = draw(st.integers(0, len(docs) - 1))
        doc = docs[i]
        paths = _paths(doc)
        if kind == "cel":
            cel = [p for p in paths if p and p[-1] == "expression"]
            if cel:
                _set(doc, draw(st.sampled_from(cel)), draw(cel_text))
                continue
        path = draw(st.sampled_from(paths))
        if kind == "delete":
            parent: Any = doc
            for p in path[:-1]:
                parent = parent[p]
            del parent[path[-1]]
        elif kind == "deep":
            _set(doc, path, _nested(draw(st.integers(20, 120))))
        else:
            _set(doc, path, draw(values))
    out = yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True, width=10_000)
    if draw(st.integers(0, 9)) == 0:  # mangle the YAML text itself
        cut = draw(st.integers(0, len(out)))
        out = (
            out[:cut]
            + draw(st.sampled_from(["\t", ": :", "- [", "{", "&a *b", "\x07", "%YAML 9\n"]))
            + out[cut:]
        )
    return out


class TooSlow(Exception):
    pass


def _too_slow(signum: int, frame: object) -> None:
    raise TooSlow(f"the command ran for more than {CLI_SECONDS} s")


# an input that makes a command run (nearly) forever is a bug too: it fails with the input, not a hang
CLI_SECONDS = 120


def run_cli(args: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    old = signal.signal(signal.SIGALRM, _too_slow)
    signal.alarm(CLI_SECONDS)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                rc = main(args)
            except SystemExit as e:  # argparse
                rc = int(e.code or 0)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, err.getvalue()


def check_contract(rc: int, err: str, text: str) -> None:
    assert "Traceback" not in err, f"traceback for input:\n{text}\n{err}"
    assert rc in (0, 1, 2), (rc, err, text)
    if rc == 2:
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        others = [
            line for line in err.splitlines() if not line.startswith(("error:", "warning:", "simulating"))
        ]
        assert len(errors) == 1 and not others, f"expected one error line, got:\n{err}\nfor:\n{text}"
        assert len(errors[0]) > len("error: ") + 5


# the same examples on every run (CI must not depend on luck); QUEUEING_FUZZ_RANDOM=1 explores anew
SETTINGS = settings(
    max_examples=int(os.environ.get("QUEUEING_FUZZ_EXAMPLES", "40")),
    derandomize=not os.environ.get("QUEUEING_FUZZ_RANDOM"),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


@SETTINGS
@given(mutated())
def test_allocate_never_crashes(text: str) -> None:
    docs = [d for d in text.split("\n---\n")]
    keep = "\n---\n".join(
        d for d in docs if any(f"kind: {k}\n" in d for k in ALLOCATE_KINDS) or "kind:" not in d
    )
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "in.yaml"
        f.write_text(keep)
        rc, err = run_cli(["allocate", "-f", str(f)])
    check_contract(rc, err, keep)


@SETTINGS
@given(mutated())
def test_simulate_never_crashes(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "in.yaml"
        f.write_text(text)
        rc, err = run_cli(["simulate", "-f", str(f), "-o", "json"])
    check_contract(rc, err, text)


def test_the_unmutated_scenario_is_valid() -> None:
    """The fuzz base must be valid, or every mutation would only test the first error."""
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "in.yaml"
        f.write_text(BASE.read_text())
        assert run_cli(["simulate", "-f", str(f), "-o", "json"])[0] == 0
        assert run_cli(["allocate", "-f", str(f)])[0] == 0


def test_simulate_without_nodes() -> None:
    """Found by the fuzzer (the Node's apiVersion emptied: no Node at all): the pending Jobs' reason
    was computed from the best node, and there was none (``max()`` of nothing)."""
    text = "---\n".join(yaml.safe_dump(d) for d in DOCS if d["kind"] != "Node")
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "in.yaml"
        f.write_text(text)
        rc, err = run_cli(["simulate", "-f", str(f), "-o", "json"])
    check_contract(rc, err, text)
