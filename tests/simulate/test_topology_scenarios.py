"""Topology-aware gangs in simulation (Topology kind, ResourceFlavor topologyName, pod-set
annotations): a required level never spans two domains, a preferred one spans as few as it must,
preemption for a required gang evicts inside one domain, and bad references are clear reasons."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scenario_builder import Q, cluster_queue, h200, job, local_queue, priority, template
from test_simulate_scenarios import of, simulate

RACK = "example.com/rack"
HOST = "kubernetes.io/hostname"


def racks(per_rack: int = 2, n_racks: int = 2) -> list[dict[str, Any]]:
    hw = h200.hardware()
    docs: list[dict[str, Any]] = []
    for i in range(per_rack * n_racks):
        name = f"h200-{i}"
        docs.append(h200.node(name, {RACK: f"r{i // per_rack}"}))
        docs += h200.node_slices(name, hw, mig=False)
    return docs + [dict(c) for c in h200.CLASSES]


def topology(levels: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": Q,
        "kind": "Topology",
        "metadata": {"name": "dc"},
        "spec": {"levels": levels or [{"nodeLabel": RACK}, {"nodeLabel": HOST}]},
    }


def flavor(topology_name: str | None = "dc", policy: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if topology_name:
        spec["topologyName"] = topology_name
    if policy:
        spec["placementPolicy"] = policy
    return {"apiVersion": Q, "kind": "ResourceFlavor", "metadata": {"name": "h200"}, "spec": spec}


def topo_job(name: str, mode: str, level: str = RACK, **kw: Any) -> dict[str, Any]:
    j = job("ml", name, **kw)
    j["spec"]["template"]["metadata"] = {"annotations": {f"queueing.dra.io/podset-{mode}-topology": level}}
    return j


def base(**kw: Any) -> list[dict[str, Any]]:
    return [
        *racks(),
        topology(),
        flavor(**kw),
        cluster_queue("cq", 32, within="LowerPriority"),
        local_queue("ml", "lq", "cq"),
        *(template("ml", g) for g in (1, 8)),
        priority("low", 10),
        priority("high", 100),
    ]


def rack_of(node: str) -> str:
    return f"r{int(node.rsplit('-', 1)[1]) // 2}"


# one GPU busy on h200-0 (rack r0) and h200-2 (rack r1): every rack has one whole node free
BLOCKERS = [
    job("ml", "block-0", node="h200-0", duration="10m"),
    job("ml", "block-2", node="h200-2", duration="20m"),
]


@pytest.mark.parametrize("policy", [None, "LeastFragmentation"])
def test_required_rack_waits_for_one_rack(tmp_path: Path, policy: str | None) -> None:
    gang = topo_job("gang", "required", pods=2, gpus=8, arrival="1s", duration="5m")
    r = simulate(tmp_path, [*base(policy=policy), *BLOCKERS, gang])
    waits = of(r, "Inadmissible", "ml/gang")
    assert waits and "no single domain of topology level example.com/rack" in waits[0].reason
    (adm,) = of(r, "Admitted", "ml/gang")
    assert adm.time == 600  # when block-0 finishes, rack r0 holds the gang
    assert adm.nodes is not None and {rack_of(n) for n in adm.nodes} == {"r0"}


def test_preferred_rack_spans_racks_only_when_it_must(tmp_path: Path) -> None:
    spans = topo_job("spans", "preferred", pods=2, gpus=8, arrival="1s", duration="5m")
    inside = topo_job("inside", "preferred", pods=2, gpus=8, arrival="700s", duration="5m")
    r = simulate(tmp_path, [*base(), *BLOCKERS, spans, inside])
    (a,) = of(r, "Admitted", "ml/spans")
    assert a.time == 1 and a.nodes is not None and {rack_of(n) for n in a.nodes} == {"r0", "r1"}
    (b,) = of(r, "Admitted", "ml/inside")
    # at 700 s block-0 (until 600 s) and spans (until 301 s) are done: rack r0 is free again
    assert b.nodes is not None and {rack_of(n) for n in b.nodes} == {"r0"}


def test_preemption_for_a_required_gang_evicts_inside_one_rack(tmp_path: Path) -> None:
    fill = [
        job("ml", f"low-{i}", gpus=8, node=f"h200-{i}", priority_class="low", duration="1h") for i in range(4)
    ]
    gang = topo_job("gang", "required", pods=2, gpus=8, arrival="1s", duration="5m", priority_class="high")
    r = simulate(tmp_path, [*base(), *fill, gang])
    victims = sorted(e.job for e in of(r, "Evicted") if e.preemptor == "ml/gang")
    assert len(victims) == 2
    nodes = {f"ml/low-{i}": f"h200-{i}" for i in range(4)}
    assert len({rack_of(nodes[v]) for v in victims}) == 1, victims
    (adm,) = of(r, "Admitted", "ml/gang")
    assert adm.nodes is not None and {rack_of(n) for n in adm.nodes} == {rack_of(nodes[victims[0]])}


def test_a_device_attribute_level_keeps_the_gang_on_one_clique(tmp_path: Path) -> None:
    docs = racks()
    for d in docs:  # NVLink cliques across racks: h200-0 and h200-3 share one
        if d.get("kind") == "ResourceSlice":
            node = d["spec"]["nodeName"]
            clique = "c-a" if node in ("h200-0", "h200-3") else "c-b"
            for dev in d["spec"]["devices"]:
                dev["attributes"]["cliqueId"] = {"string": clique}
    level = f"{h200.DRIVER}/cliqueId"
    topo = topology([{"deviceAttribute": level}, {"nodeLabel": HOST}])
    rest = [x for x in base() if x.get("kind") not in ("Node", "ResourceSlice", "DeviceClass", "Topology")]
    gang = topo_job("gang", "required", level=level, pods=2, gpus=8, arrival="1s", duration="5m")
    block = job("ml", "block-1", node="h200-1", duration="10m")
    r = simulate(tmp_path, [*docs, topo, *rest, block, gang])
    (adm,) = of(r, "Admitted", "ml/gang")
    assert adm.time == 1 and adm.nodes is not None and set(adm.nodes) == {"h200-0", "h200-3"}


def test_bad_topology_references_are_reasons(tmp_path: Path) -> None:
    unknown_level = topo_job("lvl", "required", level="example.com/zone", pods=1, gpus=1, arrival="1s")
    r = simulate(tmp_path, [*base(), unknown_level])
    (w,) = of(r, "Inadmissible", "ml/lvl")[:1]
    assert "level 'example.com/zone' is not a level of Topology dc" in w.reason
    missing = [x for x in base(topology_name="nope") if x.get("kind") != "Topology"]
    r = simulate(tmp_path, [*missing, topo_job("m", "required", pods=1, gpus=1, arrival="1s")])
    assert (
        "ResourceFlavor h200: spec.topologyName: Topology nope not found"
        in of(r, "Inadmissible", "ml/m")[0].reason
    )
    r = simulate(
        tmp_path, [*base(topology_name=None), topo_job("n", "preferred", pods=1, gpus=1, arrival="1s")]
    )
    assert "has no topologyName" in of(r, "Inadmissible", "ml/n")[0].reason


def test_topology_and_flavor_fields_are_validated() -> None:
    from queueing.api.v1beta1 import ResourceFlavor, Topology

    t = Topology.model_validate(
        topology([{"nodeLabel": RACK}, {"deviceAttribute": "gpu.nvidia.com/cliqueId"}])
    )
    assert [lv.key for lv in t.spec.levels] == [RACK, "gpu.nvidia.com/cliqueId"]
    with pytest.raises(ValueError, match="exactly one of nodeLabel and deviceAttribute"):
        Topology.model_validate(topology([{"nodeLabel": RACK, "deviceAttribute": "x/y"}]))
    with pytest.raises(ValueError, match="appears twice"):
        Topology.model_validate(topology([{"nodeLabel": RACK}, {"nodeLabel": RACK}]))
    assert ResourceFlavor.model_validate(flavor("dc")).spec.topology_name == "dc"


def test_the_topology_example_runs_as_documented() -> None:
    """examples/topology/ (docs/simulate.md) is what make_topology_example.py writes, and runs as
    its comments say: the required gang's victims are one low and one mid job of one rack (the two
    lowest-priority jobs are in different racks), the gang runs in that rack, the preferred gang on
    one rack once quota frees."""
    import make_topology_example as mk

    from queueing.simulate.engine import Simulation
    from queueing.simulate.scenario import load_scenario

    for name, (comment, docs) in mk.files().items():
        assert (mk.OUT / name).read_text() == mk.render(comment, docs), (
            f"rerun make_topology_example.py ({name})"
        )
    r = Simulation(load_scenario([str(mk.OUT)])).run()
    victims = sorted(e.job for e in of(r, "Evicted") if e.preemptor == "ml/train")
    assert victims == ["ml/fill-0", "ml/fill-1"]  # rack r0: h200-0 (low) and h200-1 (mid)
    (train,) = of(r, "Admitted", "ml/train")
    assert train.nodes is not None and {rack_of(n) for n in train.nodes} == {"r0"}
    (sweep,) = of(r, "Admitted", "ml/sweep")
    assert sweep.nodes is not None and len({rack_of(n) for n in sweep.nodes}) == 1
    assert not of(r, "Evicted", "ml/fill-2")  # the other rack's low-priority job stays
