"""Unit tests: feature gates, capacity policy rounding, model round-trips, caches across calls, the CLI
as a process, and a smoke run of the benchmark."""

from __future__ import annotations

import runpy
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from dra_helpers import claim, device_class, exact

from queueing.api.core import Node
from queueing.api.quantity import Quantity
from queueing.api.resource import DeviceCapacity, ResourceClaim, ResourceSlice
from queueing.dra.allocator import Allocator, SelectorCache, consumed_capacity
from queueing.dra.features import Features
from queueing.dra.inventory import Inventory

REPO = Path(__file__).resolve().parents[2]
DRIVER = "gpu.example.com"


def test_feature_gates_parse() -> None:
    f = Features.parse("DRAAdminAccess=false, DRADeviceTaints=true")
    assert not f.admin_access and f.device_taints and f.prioritized_list
    assert Features.parse("") == Features()
    with pytest.raises(ValueError, match="unknown feature gate"):
        Features.parse("Nope=true")
    with pytest.raises(ValueError, match="Name=true"):
        Features.parse("DRAAdminAccess=maybe")


def cap(value: str, **policy: object) -> DeviceCapacity:
    return DeviceCapacity.model_validate(
        {"value": value, "requestPolicy": policy} if policy else {"value": value}
    )


@pytest.mark.parametrize(
    ("requested", "capacity", "expected"),
    [
        (None, cap("100G"), Fraction(100 * 10**9)),  # no policy, nothing asked: the whole capacity
        ("30G", cap("100G"), Fraction(30 * 10**9)),  # no policy: as asked
        (None, cap("100G", default="10G"), Fraction(10 * 10**9)),
        ("15G", cap("100G", validRange={"min": "10G", "step": "10G"}), Fraction(20 * 10**9)),
        ("5G", cap("100G", validRange={"min": "10G", "step": "10G"}), Fraction(10 * 10**9)),
        ("20G", cap("100G", validRange={"min": "10G", "step": "10G"}), Fraction(20 * 10**9)),
        ("95G", cap("100G", validRange={"min": "10G", "max": "90G", "step": "10G"}), None),
        ("1500m", cap("4", validRange={"min": "1"}), Fraction(3, 2)),  # no step: as asked
        ("20G", cap("100G", validValues=["10G", "40G", "100G"]), Fraction(40 * 10**9)),
        ("101G", cap("100G", validValues=["10G", "40G", "100G"]), None),
    ],
)
def test_consumed_capacity_rounding(
    requested: str | None, capacity: DeviceCapacity, expected: Fraction | None
) -> None:
    req = Quantity.parse(requested).value if requested else None
    assert consumed_capacity(req, capacity) == expected


def test_models_round_trip() -> None:
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "d"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "x", "count": 2}]}
                ],
                "constraints": [{"requests": ["r"], "distinctAttribute": "x.io/n"}],
                "unknownField": 1,
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "r/a",
                            "driver": "x.io",
                            "pool": "p",
                            "device": "d",
                            "shareID": "u",
                            "consumedCapacity": {"bw": "1G"},
                        }
                    ]
                }
            }
        },
    }
    assert ResourceClaim.model_validate(obj).to_dict() == obj


def slice_with(n: int) -> ResourceSlice:
    return ResourceSlice.model_validate(
        {
            "metadata": {"name": "s"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "n",
                "devices": [{"name": f"d{i}"} for i in range(n)],
            },
        }
    )


def test_misses_are_forgotten_after_a_release() -> None:
    inv = Inventory([slice_with(2)])
    alloc = Allocator(inv, [device_class("c", f'device.driver == "{DRIVER}"')])
    nodes = [Node.model_validate({"metadata": {"name": "n"}})]
    usage = inv.usage([])
    first = alloc.allocate([claim("a", [exact("r", "c", 2)])], nodes, usage)
    assert first.allocated
    for ca in first.claims:
        for p in ca.picks:
            usage.take(p)
    assert not alloc.allocate([claim("b", [exact("r", "c", 1)])], nodes, usage).allocated
    assert not alloc.allocate([claim("b", [exact("r", "c", 1)])], nodes, usage).allocated  # remembered miss
    usage.give_back(first.claims[0].picks[0])  # a real release starts a new epoch
    again = alloc.allocate([claim("b", [exact("r", "c", 1)])], nodes, usage)
    assert again.allocated and again.claims[0].allocation.devices.results[0].device == "d0"


def test_each_selector_is_evaluated_once_per_device_and_generation() -> None:
    cache = SelectorCache()
    inv = Inventory([slice_with(3)])
    alloc = Allocator(inv, [device_class("c", f'device.driver == "{DRIVER}"')], cache=cache)
    nodes = [Node.model_validate({"metadata": {"name": "n"}})]
    for i in range(5):
        alloc.allocate(
            [claim(f"c{i}", [exact("r", "c", 1, 'device.attributes["gpu.example.com"].size == 1 || true')])],
            nodes,
            inv.usage([]),
        )
    assert len(cache) == 6  # 2 selectors x 3 devices, however many claims
    # a new inventory of the same generation reuses the memo; a new generation does not
    Allocator(
        Inventory([slice_with(3)]), [device_class("c", f'device.driver == "{DRIVER}"')], cache=cache
    ).allocate([claim("x", [exact("r", "c", 1)])], nodes, inv.usage([]))
    assert len(cache) == 6


def test_cli_as_a_process() -> None:
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "queueing",
            "allocate",
            "-f",
            str(REPO / "examples/allocate/h200-node.yaml"),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert '"allocated": true' in ok.stdout and '"node": "h200-0"' in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "queueing", "allocate", "-f", "/nonexistent.yaml"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1 and "/nonexistent.yaml" in bad.stderr


def test_bench_smoke(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["allocator.py", "--nodes", "12", "--samples", "10", "--gang", "2"])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(REPO / "bench" / "allocator.py"), run_name="__main__")
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "placements/s" in out and "gang: 2 pods" in out


def test_prepare_renamed_is_prepare_claim_of_the_renamed_claim() -> None:
    """Claims from one template differ in their names only: preparing one and renaming it gives what
    preparing the other gives (messages name the claim: alternatives and request selectors)."""
    alloc = Allocator(Inventory([]), [device_class("gpu", f'device.driver == "{DRIVER}"')])
    requests = [
        exact("a", "gpu", 2, "device.attributes['gpu.example.com'].index >= 0"),
        {
            "name": "b",
            "firstAvailable": [
                {"name": "x", "deviceClassName": "gpu", "count": 4},
                {"name": "y", "deviceClassName": "gpu", "selectors": [{"cel": {"expression": "true"}}]},
            ],
        },
    ]
    cons = [{"matchAttribute": "gpu.example.com/index", "requests": ["a"]}]
    first, second = claim("pod-0-gpu", requests, cons), claim("pod-1-gpu", requests, cons)
    got = alloc.prepare_renamed(alloc.prepare_claim(first), second)
    want = alloc.prepare_claim(second)
    assert (got.claim, got.ref, got.constraints, got.shape) == (
        want.claim,
        want.ref,
        want.constraints,
        want.shape,
    )

    def fields(pc: object) -> list[object]:
        return [
            (
                a.claim_ref,
                a.request,
                a.parent,
                a.field,
                a.class_name,
                a.device_class,
                [(s.compiled.expression, s.obj, s.field) for s in a.selectors],
                a.all_mode,
                a.count,
                a.admin_access,
                a.tolerations,
                a.capacity,
                a.signature,
            )
            for alts in pc.requests  # type: ignore[attr-defined]
            for a in alts
        ]

    assert fields(got) == fields(want)
    assert any("pod-1-gpu" in s.obj for alts in got.requests for a in alts for s in a.selectors)
