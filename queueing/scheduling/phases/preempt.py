"""Preempt: for a head that does not fit, a plan that evicts a minimal set of admitted workloads so
that it does (``preemption.plan_preemption``, Kueue's policies), asked per cohort tree.

The candidates of a cohort tree (admitted there, not yet taken by a plan of this cycle) and their
``CohortState`` for the plan memo are kept while the tree's usage is unchanged (``CycleBook.version``);
``config.verify`` checks a kept pair against one built afresh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from queueing.scheduling.assign import Assigner, Combo
from queueing.scheduling.config import SchedulingConfig
from queueing.scheduling.phases.assign import full_counts
from queueing.scheduling.phases.commit import CycleBook
from queueing.scheduling.placer import Placer
from queueing.scheduling.preemption import CohortState, PlanMemo, PreemptionPlan, plan_preemption
from queueing.scheduling.snapshot import AdmittedWorkload, ClusterQueueSpec, WorkloadInfo
from queueing.scheduling.verify import checked

__all__ = ["Preemptor"]


class Preemptor:
    def __init__(
        self,
        book: CycleBook,
        candidates: list[AdmittedWorkload],
        assigner: Assigner,
        placer: Placer[Any],
        config: SchedulingConfig,
        cqs: Mapping[str, ClusterQueueSpec],
        plan_memo: PlanMemo,
    ) -> None:
        self.book = book
        self.candidates = candidates
        self.assigner = assigner
        self.placer = placer
        self.config = config
        self.cqs = cqs
        self.plan_memo = plan_memo
        self._by_root: dict[str, list[AdmittedWorkload]] | None = None
        # cohort tree -> (the book's version of it, its candidates not taken, their state)
        self._cohorts: dict[str, tuple[int, list[AdmittedWorkload], CohortState]] = {}

    def _pool_by_root(self) -> dict[str, list[AdmittedWorkload]]:
        """The candidates by cohort tree, once per cycle (when a head first needs a plan)."""
        if self._by_root is None:
            tree = self.book.tree
            by_root: dict[str, list[AdmittedWorkload]] = {}
            root_of: dict[str, str] = {}
            for c in self.candidates:
                croot = root_of.get(c.cluster_queue)
                if croot is None:
                    if not tree.has_cq(c.cluster_queue):
                        continue
                    croot = root_of[c.cluster_queue] = tree.root_of(c.cluster_queue)
                by_root.setdefault(croot, []).append(c)
            self._by_root = by_root
        return self._by_root

    def _cohort(self, root: str) -> tuple[list[AdmittedWorkload], CohortState]:
        book, tree = self.book, self.book.tree
        version = book.version.get(root, 0)
        entry = self._cohorts.get(root)
        if entry is None or entry[0] != version:
            pool = [c for c in self._pool_by_root().get(root, ()) if c.key not in book.taken]
            entry = self._cohorts[root] = (version, pool, self.plan_memo.state(tree, root, pool))
        elif self.config.verify:  # the kept pool and state are what they would be built afresh
            fresh = [c for c in self._pool_by_root().get(root, ()) if c.key not in book.taken]
            checked(
                "run_cycle cohort state (pool, CohortState)",
                ([c.key for c in entry[1]], entry[2].id),
                lambda: ([c.key for c in fresh], self.plan_memo.state(tree, root, fresh).id),
                f"cohort tree {root}",
            )
        return entry[1], entry[2]

    def plan(self, cq: ClusterQueueSpec, wl: WorkloadInfo, combos: Sequence[Combo]) -> PreemptionPlan | None:
        """A plan that makes ``wl`` fit in ``cq`` with one of ``combos`` (the flavor combinations
        that could fit by evicting), or None."""
        pool, cohort = self._cohort(self.book.tree.root_of(cq.name))
        return plan_preemption(
            wl,
            cq,
            full_counts(wl),
            combos,
            self.book.tree,
            self.book.state,
            pool,
            self.assigner,
            self.placer,
            self.config,
            self.cqs,
            memo=self.plan_memo,
            cohort=cohort,
        )
