"""Bad input at the edge: ``queueing allocate`` and ``queueing simulate`` refuse every generated bad
input with exit 2 and ONE line on stderr that names the object and the field, in well under 10 s.

Unlike ``test_fuzz_cli.py`` (random mutations, any exit allowed as long as nothing crashes), every case
here is known to be invalid for a real API server (or for the ledger), so the only right answer is
exit 2. The cases are generated from the valid base scenario (tests/reliability/data/small-scenario.yaml)
by families: wrong types, huge and negative numbers, non-DNS names, oversize lists, attributes with two
value types or none, bad versions, deep nesting (YAML and JSON, 5,000 levels), expensive and broken CEL,
quantities too large for the ledger, bad Job names, parallelism and durations. Each case runs in process
through ``queueing.cli.main``; a few also run through the real ``queueing`` console script. "Under 10 s"
is CPU time (the machine is shared: wall-clock would measure the neighbours).

``python -m tests.reliability.test_cli_fuzz`` prints the counts per family (docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from queueing.cli import main

BASE = Path(__file__).parent / "data" / "small-scenario.yaml"
DOCS: list[dict[str, Any]] = [d for d in yaml.safe_load_all(BASE.read_text()) if d]
ALLOCATE_KINDS = {"Node", "ResourceSlice", "DeviceClass", "ResourceClaimTemplate", "Job"}
SECONDS = 10.0
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
L300 = "[" + ",".join(str(i) for i in range(300)) + "]"


@dataclass(frozen=True)
class Case:
    family: str
    name: str
    kind: str  # the kind of the object the line must name
    field: str  # a substring of the field path the line must name
    mutate: Callable[[list[dict[str, Any]]], None] | None = None
    text: str | None = None  # the whole input, instead of a mutation of the base
    commands: tuple[str, ...] = ("allocate", "simulate")


def _doc(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind)


def _set(kind: str, path: tuple[Any, ...], value: Any) -> Callable[[list[dict[str, Any]]], None]:
    def mutate(docs: list[dict[str, Any]]) -> None:
        obj: Any = _doc(docs, kind)
        for p in path[:-1]:
            obj = obj[p]
        obj[path[-1]] = copy.deepcopy(value)

    return mutate


def _nested(depth: int) -> Any:
    v: Any = "deep"
    for _ in range(depth):
        v = {"a": [v]}
    return v


# ------------------------------------------------------------------ the paths the cases mutate
DEVICE0 = ("spec", "devices", 0)
REQUEST0 = ("spec", "spec", "devices", "requests", 0)
EXACT0 = (*REQUEST0, "exactly")
QUOTA0 = ("spec", "resourceGroups", 0, "flavors", 0, "resources", 0)

BAD_NAMES = [
    "",
    "UPPER",
    "under_score",
    "dots.in.label",
    "ünicode",
    "-lead",
    "trail-",
    "a" * 64,
    "a" * 300,
    "a b",
]
BAD_SUBDOMAINS = ["UPPER", "under_score", "ünicode", "-lead", "a..b", "a" * 254, "a/b", "a b"]
WRONG_INT = [True, "3", 1.5, [1], {"a": 1}, "१"]


def _slice_devices(n: int) -> Callable[[list[dict[str, Any]]], None]:
    def mutate(docs: list[dict[str, Any]]) -> None:
        s = _doc(docs, "ResourceSlice")
        s["spec"]["devices"] = [
            {
                "name": f"gpu-{i}",
                "attributes": {"index": {"int": i}},
                "capacity": {"memory": {"value": "80Gi"}},
            }
            for i in range(n)
        ]

    return mutate


def _many(
    kind: str, path: tuple[Any, ...], item: Callable[[int], Any], n: int
) -> Callable[[list[dict[str, Any]]], None]:
    return _set(kind, path, [item(i) for i in range(n)])


def cases() -> Iterator[Case]:
    # --- wrong types
    for v in WRONG_INT:
        yield Case(
            "wrong type",
            f"count={v!r}",
            "ResourceClaimTemplate",
            "count",
            _set("ResourceClaimTemplate", (*EXACT0, "count"), v),
        )
        yield Case(
            "wrong type", f"parallelism={v!r}", "Job", "parallelism", _set("Job", ("spec", "parallelism"), v)
        )
        yield Case(
            "wrong type",
            f"attribute int={v!r}",
            "ResourceSlice",
            "attributes",
            _set("ResourceSlice", (*DEVICE0, "attributes", "index", "int"), v),
        )
        yield Case(
            "wrong type",
            f"pool generation={v!r}",
            "ResourceSlice",
            "generation",
            _set("ResourceSlice", ("spec", "pool", "generation"), v),
        )
    for v in [True, [1], {"a": 1}, None, "12Qi", "1e", "0x10", "NaN", "--1"]:
        yield Case(
            "wrong type",
            f"capacity={v!r}",
            "ResourceSlice",
            "capacity",
            _set("ResourceSlice", (*DEVICE0, "capacity", "memory", "value"), v),
        )
        yield Case(
            "wrong type",
            f"nominalQuota={v!r}",
            "ClusterQueue",
            "nominalQuota",
            _set("ClusterQueue", (*QUOTA0, "nominalQuota"), v),
            commands=("simulate",),
        )
    for v in [1, True, [], {"x": 1}]:
        yield Case(
            "wrong type",
            f"device name={v!r}",
            "ResourceSlice",
            "name",
            _set("ResourceSlice", (*DEVICE0, "name"), v),
        )
        yield Case(
            "wrong type",
            f"cel expression={v!r}",
            "DeviceClass",
            "expression",
            _set("DeviceClass", ("spec", "selectors", 0, "cel", "expression"), v),
        )
        yield Case(
            "wrong type",
            f"attribute bool={v!r}",
            "ResourceSlice",
            "attributes",
            _set("ResourceSlice", (*DEVICE0, "attributes", "index"), {"bool": v if v is not True else "yes"}),
        )
    # --- huge and negative numbers
    for v in [0, -3, -(2**63), 2**63, 10**40]:
        yield Case(
            "number",
            f"count={v}",
            "ResourceClaimTemplate",
            "count",
            _set("ResourceClaimTemplate", (*EXACT0, "count"), v),
        )
    for v in [-1, 2**31, 10**40]:
        yield Case(
            "number", f"parallelism={v}", "Job", "parallelism", _set("Job", ("spec", "parallelism"), v)
        )
        yield Case(
            "number", f"completions={v}", "Job", "completions", _set("Job", ("spec", "completions"), v)
        )
        yield Case(
            "number", f"backoffLimit={v}", "Job", "backoffLimit", _set("Job", ("spec", "backoffLimit"), v)
        )
    for v in [2**63, -(2**63) - 1, 10**40]:
        yield Case(
            "number",
            f"attribute int={v}",
            "ResourceSlice",
            "attributes",
            _set("ResourceSlice", (*DEVICE0, "attributes", "index", "int"), v),
        )
    for v in ["-80Gi", "-1", -5, "-0.5m"]:
        yield Case(
            "number",
            f"capacity={v}",
            "ResourceSlice",
            "capacity",
            _set("ResourceSlice", (*DEVICE0, "capacity", "memory", "value"), v),
        )
        yield Case(
            "number",
            f"capacity request={v}",
            "ResourceClaimTemplate",
            "capacity",
            _set("ResourceClaimTemplate", (*EXACT0, "capacity"), {"requests": {"memory": v}}),
        )
        yield Case(
            "number",
            f"nominalQuota={v}",
            "ClusterQueue",
            "nominalQuota",
            _set("ClusterQueue", (*QUOTA0, "nominalQuota"), v),
            commands=("simulate",),
        )
    for v in ["1e29", "1e100", "100000000000000000000000000000", "1e30"]:
        yield Case(
            "ledger bound",
            f"nominalQuota={v}",
            "ClusterQueue",
            "nominalQuota",
            _set("ClusterQueue", (*QUOTA0, "nominalQuota"), v),
            commands=("simulate",),
        )
    yield Case(
        "number",
        "resourceSliceCount=0",
        "ResourceSlice",
        "resourceSliceCount",
        _set("ResourceSlice", ("spec", "pool", "resourceSliceCount"), 0),
    )
    yield Case(
        "number",
        "generation=-1",
        "ResourceSlice",
        "generation",
        _set("ResourceSlice", ("spec", "pool", "generation"), -1),
    )
    # --- names
    for v in BAD_NAMES:
        yield Case(
            "name",
            f"device name {v[:20]!r}",
            "ResourceSlice",
            "devices[0].name",
            _set("ResourceSlice", (*DEVICE0, "name"), v),
        )
        yield Case(
            "name",
            f"request name {v[:20]!r}",
            "ResourceClaimTemplate",
            "requests[0].name",
            _set("ResourceClaimTemplate", (*REQUEST0, "name"), v),
        )
        yield Case(
            "name",
            f"pod claim name {v[:20]!r}",
            "Job",
            "resourceClaims[0].name",
            _set("Job", ("spec", "template", "spec", "resourceClaims", 0, "name"), v),
        )
        if v:
            yield Case(
                "name",
                f"namespace {v[:20]!r}",
                "ResourceClaimTemplate",
                "metadata.namespace",
                _set("ResourceClaimTemplate", ("metadata", "namespace"), v),
            )
    for v in BAD_SUBDOMAINS:
        yield Case(
            "name",
            f"template name {v[:20]!r}",
            "ResourceClaimTemplate",
            "metadata.name",
            _set("ResourceClaimTemplate", ("metadata", "name"), v),
        )
        yield Case(
            "name",
            f"slice name {v[:20]!r}",
            "ResourceSlice",
            "metadata.name",
            _set("ResourceSlice", ("metadata", "name"), v),
        )
        yield Case(
            "name",
            f"device class name {v[:20]!r}",
            "ResourceClaimTemplate",
            "deviceClassName",
            _set("ResourceClaimTemplate", (*EXACT0, "deviceClassName"), v),
        )
    for v in [*BAD_SUBDOMAINS, "a" * 64]:
        yield Case(
            "name", f"job name {v[:20]!r}", "Job", "metadata.name", _set("Job", ("metadata", "name"), v)
        )
    yield Case(
        "name",
        "driver name of 64 characters",
        "ResourceSlice",
        "driver",
        _set("ResourceSlice", ("spec", "driver"), "a" * 60 + ".com"),
    )
    for v in ["1x", "9a", "a" * 33, "bad-dash", "dom.ain/", "UP.per/x"]:
        yield Case(
            "name",
            f"attribute name {v!r}",
            "ResourceSlice",
            "attributes",
            _set("ResourceSlice", (*DEVICE0, "attributes"), {v: {"int": 1}}),
        )
    # --- oversize lists
    for n in (129, 1000, 10_000):  # 10,000 devices (1.1 MB, 2 s of CPU to parse) through one command only
        cmds = ("simulate",) if n == 10_000 else ("allocate", "simulate")
        yield Case(
            "list size",
            f"{n} devices in a slice",
            "ResourceSlice",
            "spec.devices",
            _slice_devices(n),
            commands=cmds,
        )
    yield Case(
        "list size",
        "33 requests",
        "ResourceClaimTemplate",
        "requests",
        _many(
            "ResourceClaimTemplate",
            ("spec", "spec", "devices", "requests"),
            lambda i: {"name": f"r{i}", "exactly": {"deviceClassName": "gpu.example.com"}},
            33,
        ),
    )
    yield Case(
        "list size",
        "33 selectors",
        "DeviceClass",
        "selectors",
        _many("DeviceClass", ("spec", "selectors"), lambda i: {"cel": {"expression": "true"}}, 33),
    )
    yield Case(
        "list size",
        "17 tolerations",
        "ResourceClaimTemplate",
        "tolerations",
        _many("ResourceClaimTemplate", (*EXACT0, "tolerations"), lambda i: {"operator": "Exists"}, 17),
    )
    yield Case(
        "list size",
        "33 attributes",
        "ResourceSlice",
        "devices[0]",
        _set("ResourceSlice", (*DEVICE0, "attributes"), {f"a{i}": {"int": i} for i in range(33)}),
    )
    yield Case(
        "list size",
        "17 device taints",
        "ResourceSlice",
        "taints",
        _many("ResourceSlice", (*DEVICE0, "taints"), lambda i: {"key": f"k{i}", "effect": "NoSchedule"}, 17),
    )
    yield Case(
        "list size",
        "9 firstAvailable",
        "ResourceClaimTemplate",
        "firstAvailable",
        _set(
            "ResourceClaimTemplate",
            REQUEST0,
            {
                "name": "gpu",
                "firstAvailable": [{"name": f"s{i}", "deviceClassName": "gpu.example.com"} for i in range(9)],
            },
        ),
    )
    yield Case(
        "list size",
        "a 10 KiB + 1 CEL expression",
        "DeviceClass",
        "expression",
        _set("DeviceClass", ("spec", "selectors", 0, "cel", "expression"), "true" + " " * (10 * 1024 - 3)),
    )
    yield Case(
        "list size",
        "a 65-character string attribute",
        "ResourceSlice",
        "attributes",
        _set("ResourceSlice", (*DEVICE0, "attributes", "index"), {"string": "x" * 65}),
    )
    # --- attribute typing and versions
    for v in [
        {},
        {"int": 1, "string": "x"},
        {"bool": True, "version": "1.0.0"},
        {"int": 1, "bool": False, "string": "a", "version": "1.2.3"},
    ]:
        yield Case(
            "attribute",
            f"attribute {v}",
            "ResourceSlice",
            "attributes.index",
            _set("ResourceSlice", (*DEVICE0, "attributes", "index"), v),
        )
    for v in ["1.2", "v1.2.3", "01.2.3", "1.2.3-", "१.२.३", "1.2.3+", "x", "1." * 40 + "1"]:
        yield Case(
            "attribute",
            f"version {v[:20]!r}",
            "ResourceSlice",
            "attributes.index",
            _set("ResourceSlice", (*DEVICE0, "attributes", "index"), {"version": v}),
        )
    # --- CEL the API server refuses
    expensive = [
        f"{L300}.all(x, {L300}.all(y, {L300}.all(z, x + y + z >= 0)))",
        f"{L300}.exists(x, {L300}.exists(y, {L300}.exists(z, x == y + z + 1000)))",
        f"{L300}.map(x, {L300}.map(y, {L300}.filter(z, z > x + y))).size() > 0",
        f"{L300}.all(x, {L300}.all(y, {L300}.all(z, string(x + y + z).matches('^9+$'))))",
    ]
    broken = [
        "device.driver ==",
        "device.nosuch == 1",
        "1 + 'a'",
        "device.driver",
        "(((",
        "🙂",
        "size(device.attributes) +",
    ]
    for i, expr in enumerate(expensive + broken):
        fam = "CEL cost" if i < len(expensive) else "CEL compile"
        yield Case(
            fam,
            f"class selector #{i}: {expr[:30]!r}",
            "DeviceClass",
            "spec.selectors[0].cel.expression",
            _set("DeviceClass", ("spec", "selectors", 0, "cel", "expression"), expr),
        )
        yield Case(
            fam,
            f"template selector #{i}: {expr[:30]!r}",
            "ResourceClaimTemplate",
            "selectors[0].cel.expression",
            _set("ResourceClaimTemplate", (*EXACT0, "selectors", 0, "cel", "expression"), expr),
        )
    # --- durations (simulate)
    ann = ("metadata", "annotations", "simulate.queueing.dra.io/duration")
    for v in ["99999999999999999h", "१०m", "-5m", "10x", "", "1h 30m", "2562048h", "1e3s", "٣s"]:
        yield Case(
            "duration",
            f"duration {v!r}",
            "Job",
            "simulate.queueing.dra.io/duration",
            _set("Job", ann, v),
            commands=("simulate",),
        )
    yield Case(
        "duration",
        "arrival 99999999999999999h",
        "Job",
        "simulate.queueing.dra.io/arrival",
        _set("Job", ("metadata", "annotations", "simulate.queueing.dra.io/arrival"), "99999999999999999h"),
        commands=("simulate",),
    )
    # --- deep nesting: YAML and JSON, 5,000 levels, anywhere; 200 levels inside a typed field
    for where in ("top", "annotations", "spec"):
        yield Case(
            "deep nesting",
            f"YAML 5000 deep at {where}",
            "<file>",
            "nest",
            text=_deep_yaml(5000, where),
        )
    yield Case("deep nesting", "JSON 5000 deep", "<file>", "nest", text="[" * 5000 + "]" * 5000)
    yield Case(
        "deep nesting",
        "flow YAML 5000 deep",
        "<file>",
        "nest",
        text="{a: " * 5000 + "x" + "}" * 5000,
    )
    yield Case(
        "deep nesting",
        "100 deep in a count",
        "ResourceClaimTemplate",
        "count",
        _set("ResourceClaimTemplate", (*EXACT0, "count"), _nested(100)),
    )
    yield Case(
        "deep nesting",
        "100 deep in a device name",
        "ResourceSlice",
        "name",
        _set("ResourceSlice", (*DEVICE0, "name"), _nested(100)),
    )


def _deep_yaml(depth: int, where: str) -> str:
    if where == "top":
        return "a:\n" + "".join(" " * (i + 1) + "- \n" for i in range(depth))
    docs = copy.deepcopy(DOCS)
    job = _doc(docs, "Job")
    deep = "[" * depth + "]" * depth
    marker = "__DEEP__"
    if where == "annotations":
        job["metadata"]["annotations"]["x"] = marker
    else:
        job["spec"]["extra"] = marker
    text = yaml.safe_dump_all(docs, sort_keys=False, width=10_000)
    return text.replace(f"'{marker}'", deep).replace(marker, deep)


CASES = list(cases())


def _input(case: Case, command: str) -> str:
    if case.text is not None:
        return case.text
    docs = copy.deepcopy(DOCS)
    assert case.mutate is not None
    case.mutate(docs)
    if command == "allocate":
        docs = [d for d in docs if d["kind"] in ALLOCATE_KINDS]
    return yaml.dump_all(docs, Dumper=DUMPER, sort_keys=False, allow_unicode=True, width=100_000)


def run_in_process(args: list[str]) -> tuple[int, str, float]:
    """Exit code, stderr and the CPU seconds the command used (not wall-clock: the machine is shared,
    and a CPU limit is what "never takes more than 10 s" means for an input)."""
    err = io.StringIO()
    t0 = time.process_time()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(args)
        except SystemExit as e:  # argparse
            rc = int(e.code or 0)
    return rc, err.getvalue(), time.process_time() - t0


def check(case: Case, rc: int, err: str, seconds: float, text: str) -> None:
    where = f"case {case.family}/{case.name}"
    assert "Traceback" not in err, f"{where}: traceback\n{err}"
    lines = err.splitlines()
    assert rc == 2, f"{where}: exit {rc}, stderr:\n{err}\ninput:\n{text[:2000]}"
    assert len(lines) == 1, f"{where}: expected one line on stderr, got:\n{err}"
    line = lines[0]
    assert line.startswith("error: "), f"{where}: {line}"
    assert "internal error" not in line, f"{where}: {line}"
    if case.kind != "<file>":
        assert f"{case.kind} " in line, f"{where}: the line does not name the {case.kind}: {line}"
    assert case.field in line, f"{where}: the line does not name the field {case.field!r}: {line}"
    assert seconds < SECONDS, f"{where}: took {seconds:.1f} s of CPU"


RUNS = [(c, cmd) for c in CASES for cmd in c.commands]


def test_there_are_enough_cases() -> None:
    assert len(RUNS) >= 200, len(RUNS)
    assert len({c.family for c in CASES}) >= 10


def test_the_base_is_valid(tmp_path: Path) -> None:
    """Each case differs from a valid input in one place, so each line is about that place."""
    for cmd in ("allocate", "simulate"):
        f = tmp_path / f"{cmd}.yaml"
        docs = [d for d in DOCS if cmd == "simulate" or d["kind"] in ALLOCATE_KINDS]
        f.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        rc, err, _ = run_in_process([cmd, "-f", str(f)])
        assert rc == 0, err


def test_every_bad_input_exits_2_with_one_line() -> None:
    """The function behind ``python -m tests.reliability.test_cli_fuzz`` (the counts in the docs)."""
    result = summary()
    failures = result["failures"]
    assert not failures, f"{len(failures)} of {len(RUNS)} failed:\n" + "\n\n".join(failures[:15])
    assert result["slowest"][0] < SECONDS


QUEUEING = shutil.which("queueing", path=str(Path(sys.executable).parent))
PICKS = ["YAML 5000 deep at top", "count=-3", "nominalQuota=1e100"]
PICK_PREFIX = "class selector #0:"


@pytest.mark.skipif(QUEUEING is None, reason="the queueing console script is not installed")
def test_the_console_script_gives_the_same_one_line(tmp_path: Path) -> None:
    picked = [
        (c, cmd)
        for c, cmd in RUNS
        if (c.name in PICKS or c.name.startswith(PICK_PREFIX)) and cmd == "simulate"
    ]
    assert len(picked) == len(PICKS) + 1
    assert QUEUEING is not None
    for i, (case, cmd) in enumerate(picked):
        text = _input(case, cmd)
        f = tmp_path / f"{i}.yaml"
        f.write_text(text)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run([QUEUEING, cmd, "-f", str(f)], capture_output=True, text=True, timeout=300)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        check(case, p.returncode, p.stderr, cpu, text)
        assert p.stdout == ""


def summary() -> dict[str, Any]:
    """Run every case: counts per family and command (right / all), the failures, the slowest case."""
    import tempfile

    counts: Counter[tuple[str, str]] = Counter()
    ok: Counter[tuple[str, str]] = Counter()
    failures: list[str] = []
    slowest = (0.0, "")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (case, cmd) in enumerate(RUNS):
            text = _input(case, cmd)
            f = Path(tmp) / f"{i}.yaml"
            f.write_text(text)
            rc, err, seconds = run_in_process([cmd, "-f", str(f)])
            counts[(case.family, cmd)] += 1
            try:
                check(case, rc, err, seconds, text)
                ok[(case.family, cmd)] += 1
            except AssertionError as e:
                failures.append(f"[{cmd}] {e}")
            slowest = max(slowest, (seconds, f"{cmd} {case.family}/{case.name}"))
    return {
        "runs": len(RUNS),
        "right": sum(ok.values()),
        "families": {f"{fam} ({cmd})": f"{ok[(fam, cmd)]}/{n}" for (fam, cmd), n in sorted(counts.items())},
        "slowest": [round(slowest[0], 2), slowest[1]],
        "failures": failures,
    }


if __name__ == "__main__":
    out = summary()
    out["failures"] = out["failures"][:5]
    print(json.dumps(out, indent=1))
