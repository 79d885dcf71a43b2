"""Which MIG profile combinations fit one H200, checked against an independent placement model.

The model below knows nothing of counters or the allocator: it places profile instances on the card's
eight memory slices at NVIDIA's allowed starts (``nvidia-smi mig -lgipp``) without overlap and checks
the engine and memory totals from NVML. The allocator sees the same card as a DRA driver publishes it
(counter sets and MIG devices that consume them) and must agree on every pair and on chosen triples.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from dra_helpers import FIXTURES, claim, exact, load
from hypothesis import given, settings
from hypothesis import strategies as st

from queueing.dra.allocator import Allocator
from queueing.dra.inventory import Inventory, Usage

sys.path.insert(0, str(FIXTURES))
import h200

HW: dict[str, Any] = json.loads((FIXTURES / "h200-hardware.json").read_text())
PROFILES = {p["name"]: p for p in HW["profiles"]}
ENGINES = ("multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines")


def fits_by_placement(names: list[str]) -> bool:
    """Brute force over placement starts: disjoint memory slices, totals respected."""
    totals = HW["totals"]
    if sum(PROFILES[n]["memoryMiB"] for n in names) > HW["usableMemoryMiB"]:
        return False
    for e in ENGINES:
        if sum(PROFILES[n][e] for n in names) > totals[e]:
            return False
    choices = [PROFILES[n]["placementStarts"] for n in names]
    for starts in itertools.product(*choices):
        used: set[int] = set()
        ok = True
        for n, s in zip(names, starts, strict=True):
            span = set(range(s, s + PROFILES[n]["memorySlices"]))
            if span & used:
                ok = False
                break
            used |= span
        if ok:
            return True
    return False


_NODES, _SLICES, _CLASSES = load("h200-mig-1gpu.yaml")
_INV = Inventory(_SLICES)


def fits_by_allocator(names: list[str]) -> bool:
    alloc = Allocator(_INV, _CLASSES)
    reqs = [
        exact(f"r{i}", "mig.nvidia.com", 1, f"device.attributes['gpu.nvidia.com'].profile == '{n}'")
        for i, n in enumerate(names)
    ]
    return alloc.allocate([claim("c", reqs)], _NODES, Usage()).allocated


PAIRS = list(itertools.combinations_with_replacement(sorted(PROFILES), 2))


@pytest.mark.parametrize("names", PAIRS, ids=lambda n: "+".join(n))
def test_profile_pairs_agree_with_placement_model(names: tuple[str, ...]) -> None:
    assert fits_by_allocator(list(names)) == fits_by_placement(list(names))


TRIPLES_AND_MORE = [
    ["4g.71gb", "3g.71gb"],
    ["3g.71gb", "2g.35gb", "2g.35gb"],
    ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"],
    ["2g.35gb", "2g.35gb", "2g.35gb", "1g.18gb"],
    ["1g.35gb", "1g.35gb", "1g.35gb", "1g.35gb"],
    ["1g.35gb", "1g.35gb", "1g.35gb", "1g.18gb", "1g.18gb"],
    ["1g.18gb+me", "1g.18gb", "1g.18gb", "1g.18gb", "1g.18gb", "1g.18gb", "1g.18gb"],
    ["1g.18gb"] * 7,
    ["1g.18gb"] * 8,
    ["3g.71gb", "3g.71gb", "1g.18gb"],
]


@pytest.mark.parametrize("names", TRIPLES_AND_MORE, ids=lambda n: "+".join(n))
def test_larger_combinations_agree(names: list[str]) -> None:
    assert fits_by_allocator(names) == fits_by_placement(names)


def test_known_nvidia_layouts() -> None:
    # documented H200/H100 layouts: 4g+3g and 3x2g+1g fit; 2x4g and 8x1g do not
    assert fits_by_placement(["4g.71gb", "3g.71gb"])
    assert fits_by_placement(["2g.35gb", "2g.35gb", "2g.35gb", "1g.18gb"])
    assert not fits_by_placement(["4g.71gb", "4g.71gb"])
    assert not fits_by_placement(["1g.18gb"] * 8)


def test_device_per_profile_and_placement() -> None:
    names = {d.name for s in _SLICES for d in s.spec.devices}
    expected = 1 + sum(len(p["placementStarts"]) for p in HW["profiles"])
    assert len(names) == expected == 26


HW_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "hardware" / "h200"


@pytest.mark.skipif(not HW_DIR.exists(), reason="../shared/hardware/h200 not present")
def test_committed_hardware_json_matches_the_readout() -> None:
    assert h200.extract(HW_DIR) == HW


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted(PROFILES)), min_size=1, max_size=5))
def test_random_profile_multisets_agree(names: list[str]) -> None:
    assert fits_by_allocator(names) == fits_by_placement(names)
