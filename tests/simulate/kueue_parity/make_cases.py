"""Writes the Kueue parity scenarios (``NN-<slug>.yaml`` next to this file) from the compact table below.

Each case translates one case of Kueue's own unit tests (``pkg/scheduler/preemption/*_test.go`` at
kubernetes-sigs/kueue) into a ``queueing simulate`` scenario: Kueue's ClusterQueues, Cohorts and
flavors; its admitted workloads arrive at 0 s (all admitted in the first cycle, as in Kueue's
snapshot) and the incoming one at 10 s, all running for an hour. A header comment names the source
(file, test function, case name), the controller configuration the case runs with (Kueue's preemption
tests run without fair sharing, its fair-sharing tests with it) and what Kueue's test asserts: which
workloads the incoming one preempts (with the reason) and whether it is admitted at 10 s.
``test_kueue_parity.py`` runs them. Rerun after changing the table::

    python tests/simulate/kueue_parity/make_cases.py
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Q = "queueing.dra.io/v1beta1"
HERE = Path(__file__).resolve().parent
ARRIVAL = 10  # seconds: when the incoming workloads arrive

PREEMPTION = "pkg/scheduler/preemption/preemption_test.go TestPreemption"
HIERARCHICAL = "pkg/scheduler/preemption/preemption_hierarchical_test.go TestHierarchicalPreemptions"
FAIR = "pkg/scheduler/preemption/preemption_fair_test.go TestFairPreemptions"
CLASSICAL = {"fairSharing": {"enable": False}}
FAIR_SHARING = {"fairSharing": {"enable": True}}


def k8s(name: str) -> str:
    """Kueue's test names as Kubernetes object names (``q_borrowing`` -> ``q-borrowing``)."""
    return name.replace("_", "-").lower()


@dataclass
class CQ:
    name: str
    quota: dict[str, dict[str, tuple[str, ...]]]  # flavor -> resource -> (nominal[, borrowing[, lending]])
    cohort: str | None = None
    within: str = "Never"
    reclaim: str = "Never"
    borrow_threshold: int | None = None  # borrowWithinCohort LowerPriority with this maxPriorityThreshold
    weight: str | None = None
    strict_fifo: bool = False

    def doc(self) -> dict[str, Any]:
        # flavors covering the same resources form a resource group (Kueue's ResourceGroup)
        groups: list[dict[str, Any]] = []
        for flavor, res in self.quota.items():
            rs: list[dict[str, Any]] = []
            for r, q in res.items():
                item: dict[str, Any] = {"name": r, "nominalQuota": q[0]}
                if len(q) > 1 and q[1]:
                    item["borrowingLimit"] = q[1]
                if len(q) > 2 and q[2]:
                    item["lendingLimit"] = q[2]
                rs.append(item)
            group = next((g for g in groups if g["coveredResources"] == list(res)), None)
            if group is None:
                group = {"coveredResources": list(res), "flavors": []}
                groups.append(group)
            group["flavors"].append({"name": flavor, "resources": rs})
        pre: dict[str, Any] = {"withinClusterQueue": self.within, "reclaimWithinCohort": self.reclaim}
        if self.borrow_threshold is not None:
            pre["borrowWithinCohort"] = {
                "policy": "LowerPriority",
                "maxPriorityThreshold": self.borrow_threshold,
            }
        spec: dict[str, Any] = {"namespaceSelector": {}, "preemption": pre, "resourceGroups": groups}
        if self.cohort:
            spec["cohortName"] = k8s(self.cohort)
        if self.weight is not None:
            spec["fairSharing"] = {"weight": self.weight}
        if self.strict_fifo:
            spec["queueingStrategy"] = "StrictFIFO"
        return {"apiVersion": Q, "kind": "ClusterQueue", "metadata": {"name": k8s(self.name)}, "spec": spec}


@dataclass
class Cohort:
    name: str
    parent: str | None = None
    quota: dict[str, str] = field(default_factory=dict)  # resource -> nominal (flavor "default")

    def doc(self) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        if self.parent:
            spec["parentName"] = k8s(self.parent)
        if self.quota:
            spec["resourceGroups"] = [
                {
                    "coveredResources": list(self.quota),
                    "flavors": [
                        {
                            "name": "default",
                            "resources": [{"name": r, "nominalQuota": q} for r, q in self.quota.items()],
                        }
                    ],
                }
            ]
        return {"apiVersion": Q, "kind": "Cohort", "metadata": {"name": k8s(self.name)}, "spec": spec}


@dataclass
class W:
    name: str
    cq: str
    requests: dict[str, str]
    priority: int = 0
    node_selector: dict[str, str] | None = None
    ns: str = "default"
    queue: str | None = None  # the LocalQueue (in ``ns``); default: named like the ClusterQueue
    count: int = 1  # pods (each with ``requests``)
    arrival: int | None = None  # seconds; default: 0 for admitted workloads, ARRIVAL for incoming ones

    @property
    def key(self) -> str:
        return f"{self.ns}/{k8s(self.name)}"

    @property
    def local_queue(self) -> str:
        return k8s(self.queue or self.cq)

    def doc(self, arrival: int) -> dict[str, Any]:
        if self.arrival is not None:
            arrival = self.arrival
        pod: dict[str, Any] = {
            "containers": [{"name": "main", "image": "x", "resources": {"requests": dict(self.requests)}}]
        }
        if self.node_selector:
            pod["nodeSelector"] = dict(self.node_selector)
        return {
            "apiVersion": Q,
            "kind": "Workload",
            "metadata": {
                "name": k8s(self.name),
                "namespace": self.ns,
                "annotations": {
                    "simulate.queueing.dra.io/arrival": f"{arrival}s",
                    "simulate.queueing.dra.io/duration": "1h",
                },
            },
            "spec": {
                "queueName": self.local_queue,
                "priority": self.priority,
                "podSets": [{"name": "main", "count": self.count, "template": {"spec": pod}}],
            },
        }


# the flavors of the standalone queue: memory in alpha or beta, pinned by node labels
MEMORY_FLAVORS = [
    {"name": "default"},
    {"name": "alpha", "labels": {"memory-flavor": "alpha"}},
    {"name": "beta", "labels": {"memory-flavor": "beta"}},
]
ALPHA = {"memory-flavor": "alpha"}
BETA = {"memory-flavor": "beta"}


@dataclass
class Case:
    source: str  # "<file> <test function>"
    name: str  # Kueue's case name
    cqs: list[CQ]
    admitted: list[W]
    incoming: W
    preempted: dict[str, str]  # workload name -> reason
    config: dict[str, Any] = field(default_factory=lambda: dict(CLASSICAL))
    cohorts: list[Cohort] = field(default_factory=list)
    flavors: list[dict[str, Any]] = field(default_factory=lambda: [{"name": "default"}])
    nodes: list[dict[str, str]] = field(default_factory=lambda: [{}])  # labels per node
    # Kueue's preemption tests check the targets only: with targets the incoming workload is admitted
    # once they are gone (at once in the simulation), without them it stays pending; unless it fits
    # without preempting (then Kueue's flavor assigner would not have asked for preemption)
    fits_without_preemption: bool = False
    # TestSchedule's cases: more workloads arriving with the incoming one, the flavor of cpu each
    # admitted one gets when they arrive, and the ones left pending then
    also_incoming: list[W] = field(default_factory=list)
    admitted_with: dict[str, str] = field(default_factory=dict)  # workload key -> cpu flavor
    pending: list[str] = field(default_factory=list)  # workload keys
    # a deliberate difference from Kueue (docs/migrating-from-kueue.md): the case checks Kueue's
    # expectation and is known to fail it, for this reason
    divergence: str = ""

    def __post_init__(self) -> None:
        if any(q.name == "standalone" for q in self.cqs):  # its memory flavors alpha and beta
            self.flavors, self.nodes = MEMORY_FLAVORS, [ALPHA, BETA]

    @property
    def admitted_at_arrival(self) -> bool:
        return bool(self.preempted) or self.fits_without_preemption

    def _key(self, name: str) -> str:
        """The key of the workload named ``name`` (Kueue's name) in this case."""
        for w in [*self.admitted, self.incoming, *self.also_incoming]:
            if w.name == name:
                return w.key
        raise KeyError(name)

    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")[:70]

    def render(self) -> str:
        expect = {
            "at": ARRIVAL,
            "preemptor": self.incoming.key,
            "preempted": {self._key(k): v for k, v in sorted(self.preempted.items())},
            "admitted": self.admitted_at_arrival,
        }
        if self.admitted_with or self.pending:
            expect["admittedWith"] = dict(sorted(self.admitted_with.items()))
            expect["pending"] = sorted(self.pending)
        quoted = yaml.safe_dump(self.name, default_style='"', width=10000).strip()
        header = [
            "# Kueue parity case (issue 17), generated by make_cases.py: edit the table there.",
            f"# source: {self.source} {quoted}",
            *([f"# divergence: {self.divergence}"] if self.divergence else []),
            f"# config: {yaml.safe_dump(self.config, default_flow_style=True).strip()}",
            f"# expect: {yaml.safe_dump(expect, default_flow_style=True, sort_keys=False, width=1000).strip()}",
        ]
        docs: list[dict[str, Any]] = []
        for i, labels in enumerate(self.nodes):
            meta: dict[str, Any] = {"name": f"node-{i}"}
            if labels:
                meta["labels"] = dict(labels)
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": meta,
                    "status": {"allocatable": {"cpu": "1000", "memory": "1000Gi", "pods": "1000"}},
                }
            )
        for f in self.flavors:
            spec = {"nodeLabels": f["labels"]} if f.get("labels") else {}
            docs.append(
                {"apiVersion": Q, "kind": "ResourceFlavor", "metadata": {"name": f["name"]}, "spec": spec}
            )
        docs += [c.doc() for c in self.cohorts]
        docs += [q.doc() for q in self.cqs]
        everyone = [*self.admitted, self.incoming, *self.also_incoming]
        for ns in sorted({w.ns for w in everyone} - {"default"}):
            docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        queues = {("default", k8s(q.name)): k8s(q.name) for q in self.cqs}
        queues.update({(w.ns, w.local_queue): k8s(w.cq) for w in everyone})
        docs += [
            {
                "apiVersion": Q,
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"clusterQueue": cq},
            }
            for (ns, name), cq in sorted(queues.items())
        ]
        docs += [w.doc(0) for w in self.admitted]
        docs += [w.doc(ARRIVAL) for w in [self.incoming, *self.also_incoming]]
        return "\n".join(header) + "\n" + yaml.safe_dump_all(docs, sort_keys=False)


# ---------------------------------------------------------------- Kueue's tables, translated
def cpu(v: str, **more: str) -> dict[str, str]:
    return {"cpu": v, **more}


def default_cqs() -> list[CQ]:
    """TestPreemption's defaultClusterQueues (``Resource(r, nominal, borrowingLimit, lendingLimit)``)."""
    lp, anyp = "LowerPriority", "Any"
    cap = {"default": {"cpu": ("6", "6"), "memory": ("3Gi", "3Gi")}}
    plain = {"default": {"cpu": ("6",), "memory": ("3Gi",)}}
    shared = {"cohort": "with_shared_cq", "reclaim": lp, "borrow_threshold": 0}
    return [
        CQ(
            "standalone",
            {"default": {"cpu": ("6",)}, "alpha": {"memory": ("3Gi",)}, "beta": {"memory": ("3Gi",)}},
            within=lp,
        ),
        CQ("c1", cap, "cohort", lp, lp),
        CQ("c2", cap, "cohort", "Never", anyp),
        CQ("d1", plain, "cohort-no-limits", lp, lp),
        CQ("d2", plain, "cohort-no-limits", "Never", anyp),
        CQ("l1", {"default": {"cpu": ("6", "12"), "memory": ("3Gi", "6Gi")}}, "legion", lp, lp),
        CQ("preventStarvation", {"default": {"cpu": ("6",)}}, within="LowerOrNewerEqualPriority"),
        CQ("a_standard", {"default": {"cpu": ("1", "12")}}, within="Never", **shared),  # type: ignore[arg-type]
        CQ(
            "b_standard",
            {"default": {"cpu": ("1", "12")}},
            within=lp,
            cohort="with_shared_cq",
            reclaim=anyp,
            borrow_threshold=0,
        ),
        CQ("a_best_effort", {"default": {"cpu": ("1", "12")}}, within="Never", **shared),  # type: ignore[arg-type]
        CQ("b_best_effort", {"default": {"cpu": ("0", "13")}}, within="Never", **shared),  # type: ignore[arg-type]
        CQ("shared", {"default": {"cpu": ("10",)}}, "with_shared_cq"),
        CQ("lend1", {"default": {"cpu": ("6", "", "4")}}, "cohort-lend", lp, lp),
        CQ("lend2", {"default": {"cpu": ("6", "", "2")}}, "cohort-lend", lp, lp),
        CQ("a", {"default": {"cpu": ("2",), "memory": ("2",)}}, "cohort-three", lp, anyp),
        CQ("b", {"default": {"cpu": ("2",), "memory": ("2",)}}, "cohort-three"),
        CQ("c", {"default": {"cpu": ("2",), "memory": ("2",)}}, "cohort-three"),
    ]


def only(names: str) -> list[CQ]:
    """The default ClusterQueues a case uses (the others stay empty and change nothing)."""
    wanted = set(names.split())
    return [q for q in default_cqs() if q.name in wanted]


def low_mid_high(low: str, mid: str, high: str | None = None) -> list[W]:
    """TestPreemption's usual standalone workloads: low (-1), mid (0) and high (1) with these cpus."""
    out = [W("low", "standalone", cpu(low), -1), W("mid", "standalone", cpu(mid))]
    return out + ([W("high", "standalone", cpu(high), 1)] if high else [])


def exhausted(memory: bool) -> list[W]:
    """The cohort-three workloads of the "target queue is exhausted" cases (a's low, b's at 0)."""
    more = {"memory": "1"} if memory else {}
    adm = [
        W("a1", "a", cpu("1", **more), -2),
        W("a2", "a", cpu("1", **more), -2),
        W("a3", "a", cpu("1", **more), -1),
    ]
    return adm + [W(n, "b", cpu("1", **more)) for n in ("b1", "b2", "b3")]


def preemption_cases() -> list[Case]:
    s = PREEMPTION
    std = only("standalone")
    c12 = only("c1 c2")
    cases = [
        Case(
            s,
            "preempt lowest priority",
            std,
            low_mid_high("2", "2", "2"),
            W("in", "standalone", cpu("2"), 1),
            {"low": "InClusterQueue"},
        ),
        Case(
            s,
            "preempt multiple",
            std,
            low_mid_high("2", "2", "2"),
            W("in", "standalone", cpu("3"), 1),
            {"low": "InClusterQueue", "mid": "InClusterQueue"},
        ),
        Case(
            s,
            "no preemption for low priority",
            std,
            low_mid_high("3", "3"),
            W("in", "standalone", cpu("1"), -1),
            {},
        ),
        Case(
            s,
            "not enough low priority workloads",
            std,
            low_mid_high("3", "3"),
            W("in", "standalone", cpu("4")),
            {},
        ),
        Case(
            s,
            "some free quota, preempt low priority",
            std,
            low_mid_high("1", "1", "3"),
            W("in", "standalone", cpu("2"), 1),
            {"low": "InClusterQueue"},
        ),
        Case(
            s,
            "minimal set excludes low priority",
            std,
            low_mid_high("1", "2", "3"),
            W("in", "standalone", cpu("2"), 1),
            {"mid": "InClusterQueue"},
        ),
        Case(
            s,
            "only preempt workloads using the chosen flavor",
            std,
            [
                W("low", "standalone", {"memory": "2Gi"}, -1, ALPHA),
                W("mid", "standalone", {"memory": "1Gi"}, 0, BETA),
                W("high", "standalone", {"memory": "1Gi"}, 1, BETA),
            ],
            W("in", "standalone", {"cpu": "1", "memory": "2Gi"}, 1, BETA),
            {"mid": "InClusterQueue"},
        ),
        Case(
            s,
            "reclaim quota from borrower",
            c12,
            [W("c1-low", "c1", cpu("3"), -1), W("c2-mid", "c2", cpu("3")), W("c2-high", "c2", cpu("6"), 1)],
            W("in", "c1", cpu("3"), 1),
            {"c2-mid": "InCohortReclamation"},
        ),
        Case(
            s,
            "reclaim quota if workload requests 0 resources for a resource at nominal quota",
            c12,
            [
                W("c1-low", "c1", cpu("3", memory="3Gi"), -1),
                W("c2-mid", "c2", cpu("3")),
                W("c2-high", "c2", cpu("6"), 1),
            ],
            W("in", "c1", cpu("3", memory="0"), 1),
            {"c2-mid": "InCohortReclamation"},
        ),
        Case(
            s,
            "no workloads borrowing",
            c12,
            [W("c1-high", "c1", cpu("4"), 1), W("c2-low-1", "c2", cpu("4"), -1)],
            W("in", "c1", cpu("4"), 1),
            {},
            fits_without_preemption=True,
        ),
        Case(
            s,
            "not enough workloads borrowing",
            c12,
            [
                W("c1-high", "c1", cpu("4"), 1),
                W("c2-low-1", "c2", cpu("4"), -1),
                W("c2-low-2", "c2", cpu("4"), -1),
            ],
            W("in", "c1", cpu("4"), 1),
            {},
        ),
        Case(
            s,
            "preempting locally and borrowing other resources in cohort, without cohort candidates",
            c12,
            [
                W("c1-low", "c1", cpu("4"), -1),
                W("c2-low-1", "c2", cpu("4"), -1),
                W("c2-high-2", "c2", cpu("4"), 1),
            ],
            W("in", "c1", cpu("4", memory="5Gi"), 1),
            {"c1-low": "InClusterQueue"},
        ),
        Case(
            s,
            "preempting locally and borrowing same resource in cohort",
            c12,
            [W("c1-med", "c1", cpu("4")), W("c1-low", "c1", cpu("4"), -1), W("c2-low-1", "c2", cpu("4"), -1)],
            W("in", "c1", cpu("4"), 1),
            {"c1-low": "InClusterQueue"},
        ),
        Case(
            s,
            "preempting locally and borrowing same resource in cohort; no borrowing limit in the cohort",
            only("d1 d2"),
            [W("d1-med", "d1", cpu("4")), W("d1-low", "d1", cpu("4"), -1), W("d2-low-1", "d2", cpu("4"), -1)],
            W("in", "d1", cpu("4"), 1),
            {"d1-low": "InClusterQueue"},
        ),
        Case(
            s,
            "preempting locally and borrowing other resources in cohort, with cohort candidates",
            c12,
            [
                W("c1-med", "c1", cpu("4")),
                W("c2-low-1", "c2", cpu("5"), -1),
                W("c2-low-2", "c2", cpu("1"), -1),
                W("c2-low-3", "c2", cpu("1"), -1),
            ],
            W("in", "c1", cpu("2", memory="5Gi"), 1),
            {"c1-med": "InClusterQueue"},
        ),
        Case(
            s,
            "preempting locally and not borrowing same resource in 1-queue cohort",
            only("l1"),
            [W("l1-med", "l1", cpu("4")), W("l1-low", "l1", cpu("2"), -1)],
            W("in", "l1", cpu("4"), 1),
            {"l1-med": "InClusterQueue"},
        ),
        Case(
            s,
            "do not reclaim borrowed quota from same priority for withinCohort=ReclaimFromLowerPriority",
            c12,
            [W("c1", "c1", cpu("2")), W("c2-1", "c2", cpu("4")), W("c2-2", "c2", cpu("4"))],
            W("in", "c1", cpu("4")),
            {},
        ),
        Case(
            s,
            "reclaim borrowed quota from same priority for withinCohort=ReclaimFromAny",
            c12,
            [W("c1-1", "c1", cpu("4")), W("c1-2", "c1", cpu("4"), 1), W("c2", "c2", cpu("2"))],
            W("in", "c2", cpu("4")),
            {"c1-1": "InCohortReclamation"},
        ),
        Case(
            s,
            "preempt from all ClusterQueues in cohort",
            c12,
            [
                W("c1-low", "c1", cpu("3"), -1),
                W("c1-mid", "c1", cpu("2")),
                W("c2-low", "c2", cpu("3"), -1),
                W("c2-mid", "c2", cpu("4")),
            ],
            W("in", "c1", cpu("4")),
            {"c1-low": "InClusterQueue", "c2-low": "InCohortReclamation"},
        ),
        Case(
            s,
            "can't preempt workloads in ClusterQueue for withinClusterQueue=Never",
            only("c2"),
            [W("c2-low", "c2", cpu("3"), -1)],
            W("in", "c2", cpu("4"), 1),
            {},
        ),
    ]
    shared = only("a_standard b_standard a_best_effort b_best_effort shared")
    cases += [
        Case(
            s,
            "use BorrowWithinCohort; allow preempting a lower-priority workload from another ClusterQueue while borrowing",
            shared,
            [
                W("a_best_effort_low", "a_best_effort", cpu("10"), -1),
                W("b_best_effort_low", "b_best_effort", cpu("1"), -1),
            ],
            W("in", "a_standard", cpu("10")),
            {"a_best_effort_low": "InCohortReclaimWhileBorrowing"},
        ),
        Case(
            s,
            "use BorrowWithinCohort; don't allow preempting a lower-priority workload with priority above MaxPriorityThreshold, if borrowing is required even after the preemption",
            shared,
            [W("b_standard", "b_standard", cpu("10"), 1)],
            W("in", "a_standard", cpu("10"), 2),
            {},
        ),
        Case(
            s,
            "use BorrowWithinCohort; allow preempting a lower-priority workload with priority above MaxPriorityThreshold, if borrowing is not required after the preemption",
            shared,
            [W("b_standard", "b_standard", cpu("13"), 1)],
            W("in", "a_standard", cpu("1"), 2),
            {"b_standard": "InCohortReclamation"},
        ),
        Case(
            s,
            "use BorrowWithinCohort; don't allow for preemption of lower-priority workload from the same ClusterQueue",
            shared,
            [W("a_standard", "a_standard", cpu("13"), 1)],
            W("in", "a_standard", cpu("1"), 2),
            {},
        ),
        Case(
            s,
            "use BorrowWithinCohort; only preempt from CQ if no workloads below threshold and already above nominal",
            shared,
            [
                W("a_standard_1", "a_standard", cpu("10"), 1),
                W("a_standard_2", "a_standard", cpu("1"), 1),
                W("b_standard_1", "b_standard", cpu("1"), 1),
                W("b_standard_2", "b_standard", cpu("1"), 2),
            ],
            W("in", "b_standard", cpu("1"), 3),
            {"b_standard_1": "InClusterQueue"},
        ),
        Case(
            s,
            "use BorrowWithinCohort; preempt from CQ and from other CQs with workloads below threshold",
            shared,
            [
                W("b_standard_high", "b_standard", cpu("10"), 2),
                W("b_standard_mid", "b_standard", cpu("1"), 1),
                W("a_best_effort_low", "a_best_effort", cpu("1"), -1),
                W("a_best_effort_lower", "a_best_effort", cpu("1"), -2),
            ],
            W("in", "b_standard", cpu("2"), 2),
            {"a_best_effort_lower": "InCohortReclaimWhileBorrowing", "b_standard_mid": "InClusterQueue"},
        ),
    ]
    lend = only("lend1 lend2")
    three = only("a b c")
    cases += [
        Case(
            s,
            "reclaim quota from lender",
            lend,
            [
                W("lend1-low", "lend1", cpu("3"), -1),
                W("lend2-mid", "lend2", cpu("3")),
                W("lend2-high", "lend2", cpu("4"), 1),
            ],
            W("in", "lend1", cpu("3"), 1),
            {"lend2-mid": "InCohortReclamation"},
        ),
        Case(
            s,
            "preempt from all ClusterQueues in cohort-lend",
            lend,
            [
                W("lend1-low", "lend1", cpu("3"), -1),
                W("lend1-mid", "lend1", cpu("2")),
                W("lend2-low", "lend2", cpu("3"), -1),
                W("lend2-mid", "lend2", cpu("4")),
            ],
            W("in", "lend1", cpu("4")),
            {"lend1-low": "InClusterQueue", "lend2-low": "InCohortReclamation"},
        ),
        Case(
            s,
            "cannot preempt from other ClusterQueues if exceeds requestable quota including lending limit",
            lend,
            [W("lend2-low", "lend2", cpu("10"), -1)],
            W("in", "lend1", cpu("9")),
            {},
        ),
        Case(
            s,
            "preemptions from cq when target queue is exhausted for the single requested resource",
            three,
            exhausted(memory=False),
            W("in", "a", cpu("2")),
            {"a1": "InClusterQueue", "a2": "InClusterQueue"},
        ),
        Case(
            s,
            "preemptions from cq when target queue is exhausted for two requested resources",
            three,
            exhausted(memory=True),
            W("in", "a", cpu("2", memory="2")),
            {"a1": "InClusterQueue", "a2": "InClusterQueue"},
        ),
        Case(
            s,
            "preemptions from cq when target queue is exhausted for one requested resource, but not the other",
            three,
            exhausted(memory=False),
            W("in", "a", cpu("2", memory="2")),
            {"a1": "InClusterQueue", "a2": "InClusterQueue"},
        ),
        Case(
            s,
            "allow preemption from other cluster queues if target cq is not exhausted for the requested resource",
            three,
            [
                W("a1", "a", cpu("1"), -1),
                W("b1", "b", cpu("1")),
                W("b2", "b", cpu("1")),
                W("b3", "b", cpu("1")),
                W("b4", "b", cpu("1")),
                W("b5", "b", cpu("1"), -1),
            ],
            W("in", "a", cpu("2")),
            {"a1": "InClusterQueue", "b5": "InCohortReclamation"},
        ),
    ]
    return cases


def hierarchical_cases() -> list[Case]:
    s = HIERARCHICAL
    lp, anyp = "LowerPriority", "Any"

    def q(
        name: str, cohort: str, nominal: str = "0", reclaim: str = anyp, threshold: int | None = None
    ) -> CQ:
        return CQ(name, {"default": {"cpu": (nominal,)}}, cohort, lp, reclaim, threshold)

    def tree(c: str, r: str = "", **more: str) -> list[Cohort]:
        out = [Cohort("r", quota=cpu(r) if r else {}), Cohort("c", "r", cpu(c))]
        out += [Cohort(n, "r", cpu(v)) for n, v in more.items()]
        return out

    return [
        Case(
            s,
            "preempt with hierarchical advantage",
            [q("q", "c"), q("q_borrowing", "r")],
            [W("admitted2", "q_borrowing", cpu("2"))],
            W("in", "q", cpu("2")),
            {"admitted2": "InCohortReclamation"},
            cohorts=tree("2"),
        ),
        Case(
            s,
            "avoid queues within nominal quota",
            [q("q_nominal", "r", "2"), q("q", "c"), q("q_borrowing", "r")],
            [W("admitted1", "q_nominal", cpu("2"), -10), W("admitted2", "q_borrowing", cpu("2"))],
            W("in", "q", cpu("2")),
            {"admitted2": "InCohortReclamation"},
            cohorts=tree("2"),
        ),
        Case(
            s,
            "preempt multiple with hierarchical advantage",
            [q("q", "c"), q("q_borrowing", "r")],
            [W("admitted1", "q_borrowing", cpu("1"), 1), W("admitted2", "q_borrowing", cpu("1"), 2)],
            W("in", "q", cpu("2")),
            {"admitted1": "InCohortReclamation", "admitted2": "InCohortReclamation"},
            cohorts=tree("2"),
        ),
        Case(
            s,
            "preempt in cohort and own CQ",
            [q("q", "c", threshold=0), q("q_same_cohort", "c")],
            [
                W("admitted_not_preemptible", "q_same_cohort", cpu("1"), 1),
                W("admitted_preemptible", "q_same_cohort", cpu("1")),
                W("admitted_own_queue", "q", cpu("1"), -1),
            ],
            W("in", "q", cpu("2"), 1),
            {"admitted_own_queue": "InClusterQueue", "admitted_preemptible": "InCohortReclaimWhileBorrowing"},
            cohorts=tree("3"),
        ),
        Case(
            s,
            "prefer to preempt hierarchical candidate",
            [q("q", "c"), q("q_borrowing", "r")],
            [
                W("admitted_borrowing", "q_borrowing", cpu("1"), 1),
                W("admitted_same_queue", "q", cpu("1"), -2),
            ],
            W("in", "q", cpu("1")),
            {"admitted_borrowing": "InCohortReclamation"},
            cohorts=tree("2"),
        ),
        Case(
            s,
            "forced to preempt priority candidate",
            [q("q", "c", threshold=0), q("q_nominal", "r", "2"), q("q_same_cohort", "c")],
            [
                W("admitted_nominal", "q_nominal", cpu("2"), -10),
                W("admitted_same_cohort", "q_same_cohort", cpu("2"), -1),
            ],
            W("in", "q", cpu("2")),
            {"admitted_same_cohort": "InCohortReclaimWhileBorrowing"},
            cohorts=tree("2"),
        ),
        Case(
            s,
            "incoming workload fits in CQ nominal quota",
            [q("q", "c", "4"), q("q_borrowing", "r"), q("q_same_cohort", "c")],
            [
                W("admitted_borrowing", "q_borrowing", cpu("3"), 10),
                W("admitted_same_cohort", "q_same_cohort", cpu("3"), 10),
            ],
            W("in", "q", cpu("4")),
            {"admitted_borrowing": "InCohortReclamation", "admitted_same_cohort": "InCohortReclamation"},
            cohorts=tree("2"),
        ),
        Case(
            s,
            "preempt hierarchical and priority candidates",
            [q("q", "c", reclaim=lp, threshold=0), q("q_borrowing", "r"), q("q_same_cohort", "c")],
            [
                W("admitted_borrowing", "q_borrowing", cpu("2"), -1),
                W("admitted_same_cohort_preemptible", "q_same_cohort", cpu("1"), -1),
                W("admitted_borrowing_not_preemptible", "q_borrowing", cpu("2"), 1),
            ],
            W("in", "q", cpu("3")),
            {
                "admitted_borrowing": "InCohortReclamation",
                "admitted_same_cohort_preemptible": "InCohortReclaimWhileBorrowing",
            },
            cohorts=tree("4", "1"),
        ),
        Case(
            s,
            "preempt hierarchical candidates and inside CQ",
            [q("q", "c", reclaim=lp, threshold=0), q("q_borrowing", "r"), q("q_same_cohort", "c")],
            [
                W("admitted_borrowing", "q_borrowing", cpu("2"), -1),
                W("admitted_same_queue_preemptible", "q", cpu("1"), -1),
                W("admitted_borrowing_not_preemptible", "q_borrowing", cpu("2"), 1),
            ],
            W("in", "q", cpu("3")),
            {
                "admitted_borrowing": "InCohortReclamation",
                "admitted_same_queue_preemptible": "InClusterQueue",
            },
            cohorts=tree("4", "1"),
        ),
        Case(
            s,
            "reclaim nominal quota from lowest priority workload, excluding non-borrowing",
            [q("q", "c"), q("q_borrowing", "r"), q("q_nominal", "r", "2")],
            [
                W("admitted_borrowing_prio_8", "q_borrowing", cpu("1"), 8),
                W("admitted_borrowing_prio_9", "q_borrowing", cpu("1"), 9),
                W("admitted_borrowing_prio_10", "q_borrowing", cpu("1"), 9),
                W("admitted_nominal", "q_nominal", cpu("2"), -2),
            ],
            W("in", "q", cpu("1")),
            {"admitted_borrowing_prio_8": "InCohortReclamation"},
            cohorts=tree("3"),
        ),
        Case(
            s,
            "infeasible preemption all available workloads in pruned subtrees",
            [q("q_other", "c_other"), q("q", "c"), q("q_same_cohort", "c")],
            [
                W("admitted_other_1", "q_other", cpu("1"), -10),
                W("admitted_other_2", "q_other", cpu("1"), -10),
                W("admitted_same_cohort", "q_same_cohort", cpu("2")),
            ],
            W("in", "q", cpu("2")),
            {},
            cohorts=tree("2", c_other="2"),
        ),
    ]


def fair_cases() -> list[Case]:
    s = FAIR
    pol = {"within": "LowerPriority", "reclaim": "Any", "borrow_threshold": -3}
    base = [CQ(n, {"default": {"cpu": ("3",)}}, "all", **pol) for n in ("a", "b", "c")]  # type: ignore[arg-type]
    base.append(CQ("preemptible", {"default": {"cpu": ("0",)}}, "all"))

    def units(names: str, cq: str, priority: int = 0) -> list[W]:
        return [W(n, cq, cpu("1"), priority) for n in names.split()]

    def w(name: str, cq: str, v: str, priority: int = 0) -> W:
        return W(name, cq, cpu(v), priority)

    fs = dict(FAIR_SHARING)
    rows: list[tuple[str, list[W], W, dict[str, str]]] = [
        (
            "reclaim nominal from user using the most",
            units("a1 a2 a3", "a") + units("b1 b2 b3 b4 b5", "b") + units("c1", "c"),
            w("c_incoming", "c", "1"),
            {"b1": "InCohortReclamation"},
        ),
        (
            "can reclaim from queue using less, if taking the latest workload from user using the most isn't enough",
            [w("a1", "a", "3"), w("a2", "a", "1"), w("b1", "b", "2"), w("b2", "b", "3")],
            w("c_incoming", "c", "3"),
            {"a1": "InCohortReclamation"},
        ),
        (
            "reclaim borrowable quota from user using the most",
            units("a1 a2 a3", "a") + units("b1 b2 b3 b4 b5", "b") + units("c1", "c"),
            w("a_incoming", "a", "1"),
            {"b1": "InCohortFairSharing"},
        ),
        (
            "preempt one from each CQ borrowing",
            [
                w("a1", "a", "0.5"),
                w("a2", "a", "0.5"),
                w("a3", "a", "3"),
                w("b1", "b", "0.5"),
                w("b2", "b", "0.5"),
                w("b3", "b", "3"),
            ],
            w("c_incoming", "c", "2"),
            {"a1": "InCohortReclamation", "b1": "InCohortReclamation"},
        ),
        (
            "can't preempt when everyone under nominal",
            units("a1 a2 a3", "a") + units("b1 b2 b3", "b") + units("c1 c2 c3", "c"),
            w("c_incoming", "c", "1"),
            {},
        ),
        (
            "can't preempt when it would switch the imbalance",
            units("a1 a2 a3", "a") + units("b1 b2 b3 b4 b5", "b"),
            w("a_incoming", "a", "2"),
            {},
        ),
        (
            "can preempt lower priority workloads from same CQ",
            units("a1_low a2_low", "a", -1) + units("a3 a4", "a") + units("b1 b2 b3 b4 b5", "b"),
            w("a_incoming", "a", "2"),
            {"a1_low": "InClusterQueue", "a2_low": "InClusterQueue"},
        ),
        (
            "can preempt a combination of same CQ and highest user",
            units("a_low", "a", -1) + units("a2 a3", "a") + units("b1 b2 b3 b4 b5 b6", "b"),
            w("a_incoming", "a", "2"),
            {"a_low": "InClusterQueue", "b1": "InCohortFairSharing"},
        ),
        (
            "preempt huge workload if there is no other option, as long as the target CQ gets a lower share",
            [w("b1", "b", "9")],
            w("a_incoming", "a", "2"),
            {"b1": "InCohortReclamation"},
        ),
        (
            "can't preempt huge workload if the incoming is also huge",
            [w("a1", "a", "2"), w("b1", "b", "7")],
            w("a_incoming", "a", "5"),
            {},
        ),
        (
            "can't preempt 2 smaller workloads if the incoming is huge",
            [w("b1", "b", "2"), w("b2", "b", "2"), w("b3", "b", "3")],
            w("a_incoming", "a", "6"),
            {},
        ),
        (
            "preempt from target and others even if over nominal",
            [w("a1_low", "a", "2", -1), w("a2_low", "a", "1", -1), w("b1", "b", "3"), w("b2", "b", "3")],
            w("a_incoming", "a", "4"),
            {"a1_low": "InClusterQueue", "b1": "InCohortFairSharing"},
        ),
        (
            "prefer to preempt workloads that don't make the target CQ have the biggest share",
            [w("b1", "b", "2"), w("b2", "b", "1"), w("b3", "b", "2"), w("c1", "c", "1")],
            w("a_incoming", "a", "3.5"),
            {"b2": "InCohortFairSharing"},
        ),
        (
            "preempt from different cluster queues if the end result has a smaller max share",
            [w("b1", "b", "2"), w("b2", "b", "2.5"), w("c1", "c", "2"), w("c2", "c", "2.5")],
            w("a_incoming", "a", "3.5"),
            {"b1": "InCohortFairSharing", "c1": "InCohortFairSharing"},
        ),
        (
            "scenario above does not flap",
            [w("a1", "a", "3.5"), w("b2", "b", "2.5"), w("c2", "c", "2.5")],
            w("b_incoming", "b", "2"),
            {},
        ),
        (
            "cannot preempt if it would make the candidate CQ go under nominal after preempting one element",
            [w("b1", "b", "3"), w("b2", "b", "3"), w("c1", "c", "3")],
            w("a_incoming", "a", "4"),
            {},
        ),
    ]
    return [Case(s, name, base, adm, inc, want, config=fs) for name, adm, inc, want in rows]


SCHEDULE = "pkg/scheduler/scheduler_test.go TestSchedule"


def schedule_cases() -> list[Case]:
    """TestSchedule's ClusterQueues (namespace selectors left out: every namespace here is selected)
    and LocalQueues ``main`` in namespaces ``sales``, ``eng-alpha``, ``eng-beta``."""
    s = SCHEDULE
    lp, anyp = "LowerPriority", "Any"
    cqs = [
        CQ("sales", {"default": {"cpu": ("50",)}}, strict_fifo=True),
        CQ(
            "eng-alpha",
            {"on-demand": {"cpu": ("50", "50")}, "spot": {"cpu": ("100", "0")}},
            "eng",
            strict_fifo=True,
        ),
        CQ(
            "eng-beta",
            {
                "on-demand": {"cpu": ("50", "10")},
                "spot": {"cpu": ("0", "100")},
                "model-a": {"example.com/gpu": ("20", "0")},
            },
            "eng",
            lp,
            anyp,
            strict_fifo=True,
        ),
        CQ("lend-a", {"default": {"cpu": ("3", "", "2")}}, "lend"),
        CQ("lend-b", {"default": {"cpu": ("2", "", "2")}}, "lend"),
    ]
    flavors = [{"name": n} for n in ("default", "on-demand", "spot", "model-a")]

    def w(name: str, ns: str, pods: int, cpus: str = "1", priority: int = 0, arrival: int | None = None) -> W:
        cq = {"sales": "sales", "eng-alpha": "eng-alpha", "eng-beta": "eng-beta"}.get(ns, "lend-b")
        queue = "main" if ns != "lend" else "lend-b-queue"
        return W(name, cq, cpu(cpus), priority, ns=ns, queue=queue, count=pods, arrival=arrival)

    def case(name: str, admitted: list[W], incoming: list[W], **kw: Any) -> Case:
        return Case(
            s,
            name,
            cqs,
            admitted,
            incoming[0],
            kw.pop("preempted", {}),
            cohorts=[],
            flavors=flavors,
            also_incoming=incoming[1:],
            **kw,
        )

    def both_on_demand(name: str, alpha: int, beta: int) -> Case:
        """eng-alpha/new and eng-beta/new, with these pod counts, both admitted on on-demand."""
        return case(
            name,
            [],
            [w("new", "eng-alpha", alpha), w("new", "eng-beta", beta)],
            admitted_with={"eng-alpha/new": "on-demand", "eng-beta/new": "on-demand"},
            fits_without_preemption=True,
        )

    return [
        case(
            "single clusterQueue full",
            [w("assigned", "sales", 40)],
            [w("new", "sales", 11)],
            pending=["sales/new"],
        ),
        case(
            "admit in different cohorts",
            [],
            [w("new", "sales", 1), w("new", "eng-alpha", 51)],
            admitted_with={"sales/new": "default", "eng-alpha/new": "on-demand"},
            fits_without_preemption=True,
        ),
        both_on_demand("admit in same cohort with no borrowing", 40, 40),
        both_on_demand("can borrow if cohort was assigned and will not result in overadmission", 45, 55),
        case(
            "workload exceeds lending limit when borrow in cohort",
            [w("a", "lend", 1, "2")],
            [w("b", "lend", 1, "3")],
            pending=["lend/b"],
        ),
        case(
            "preempt workloads in ClusterQueue and cohort",
            # use-all-spot arrives after the others so that on-demand is full and it gets spot, as in
            # Kueue's snapshot
            [
                w("low-1", "eng-beta", 1, "30", -1),
                w("low-2", "eng-beta", 1, "10", -2),
                w("borrower", "eng-alpha", 1, "60"),
                w("use-all-spot", "eng-alpha", 1, "100", arrival=1),
            ],
            [w("preemptor", "eng-beta", 1, "20")],
            preempted={"borrower": "InCohortReclamation", "low-2": "InClusterQueue"},
            divergence=(
                "fewest victims: queueing evicts low-1 alone (the preemptor then fits without "
                "borrowing), Kueue evicts borrower and low-2 in candidate order"
            ),
        ),
    ]


def cases() -> list[Case]:
    return preemption_cases() + hierarchical_cases() + fair_cases() + schedule_cases()


def rendered() -> dict[str, str]:
    """File name -> contents of every case."""
    return {f"{i:02d}-{c.slug()}.yaml": c.render() for i, c in enumerate(cases(), 1)}


def doc_table() -> str:
    """The Markdown table of the cases for docs/migrating-from-kueue.md (a test keeps it in step)."""
    lines = ["| # | Kueue test (kubernetes-sigs/kueue) | case | preempted (reason) |", "|---|---|---|---|"]
    for i, c in enumerate(cases(), 1):
        file, test = c.source.split(" ")
        got = ", ".join(f"{k8s(k)} ({v})" for k, v in sorted(c.preempted.items())) or "none"
        lines.append(f"| {i:02d} | `{file.rsplit('/', 1)[-1]}` `{test}` | {c.name} | {got} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    for old in HERE.glob("[0-9][0-9]-*.yaml"):
        old.unlink()
    for name, text in rendered().items():
        (HERE / name).write_text(text)
    print(f"wrote {len(rendered())} cases to {HERE}; the table for docs/migrating-from-kueue.md:\n")
    print(doc_table(), end="")


if __name__ == "__main__":
    main()
