"""The ledger's last-line quota check is the scheduling core's own model, ``QuotaTree``.

This module only converts: the ledger's stored specs (ClusterQueues with their cohort, Cohorts with
their parent and own quota) and usage become a :class:`~queueing.scheduling.quota.QuotaTree`, and a
request is admitted exactly when the core's ``fit`` says ``Fit`` (hierarchical cohorts, a cohort's own
quota, borrowing and lending limits, per Kueue). No arithmetic of its own.

It also says which cohort rows stand for a tree (:func:`tree_lock_names`): the repository locks
them so that two admissions into one tree serialise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction

from queueing.api.quantity import Quantity
from queueing.ledger.state import Charge, ClusterQueueSpec, CohortSpec, QuotaSpec, UsageKey
from queueing.scheduling.quota import QuotaTree
from queueing.scheduling.snapshot import ClusterQueueSpec as CoreClusterQueue
from queueing.scheduling.snapshot import CohortSpec as CoreCohort
from queueing.scheduling.snapshot import FlavorQuotas, FlavorResource, ResourceGroup, ResourceQuota

__all__ = ["QuotaCheck", "quota_specs", "tree_lock_names", "trees_of"]


def quota_specs(quotas: Mapping[FlavorResource, ResourceQuota]) -> tuple[QuotaSpec, ...]:
    """The ledger's quota rows of a core quota map (a ClusterQueue's or a Cohort's ``quotas()``), sorted
    by flavor and resource."""
    return tuple(
        QuotaSpec(
            f,
            r,
            Quantity.from_value(q.nominal),
            None if q.borrowing_limit is None else Quantity.from_value(q.borrowing_limit),
            None if q.lending_limit is None else Quantity.from_value(q.lending_limit),
        )
        for (f, r), q in sorted(quotas.items())
    )


def _resource_groups(quotas: Iterable[QuotaSpec]) -> tuple[ResourceGroup, ...]:
    """Core resource groups holding the quotas (one group per flavor: only ``quotas()`` is read)."""
    by_flavor: dict[str, dict[str, ResourceQuota]] = {}
    for q in quotas:
        by_flavor.setdefault(q.flavor, {})[q.resource] = ResourceQuota(
            q.nominal.value,
            None if q.borrowing_limit is None else q.borrowing_limit.value,
            None if q.lending_limit is None else q.lending_limit.value,
        )
    return tuple(
        ResourceGroup(tuple(sorted(res)), (FlavorQuotas(f, res),)) for f, res in sorted(by_flavor.items())
    )


def tree_lock_names(cohort: str, parents: Mapping[str, str | None]) -> tuple[str, ...]:
    """The cohort rows that stand for ``cohort``'s tree: its root, or, when the parent chain runs into a
    cycle, every cohort on that cycle. ``parents`` maps each stored cohort to its parent."""
    path: list[str] = []
    cur: str | None = cohort
    while cur is not None and cur not in path:
        path.append(cur)
        cur = parents.get(cur)
    if cur is None:
        return (path[-1],)
    return tuple(sorted(path[path.index(cur) :]))


def trees_of(names: Iterable[str], parents: Mapping[str, str | None]) -> set[str]:
    """The cohorts of ``parents`` whose tree (by :func:`tree_lock_names`) shares a row with ``names``."""
    wanted = set(names)
    return {c for c in parents if wanted.intersection(tree_lock_names(c, parents))}


class QuotaCheck:
    """The core's quota tree over the ledger's ClusterQueues, Cohorts and usage (the trees of the
    ClusterQueues being admitted to). :meth:`charge` admits one request or says why not."""

    def __init__(
        self,
        cluster_queues: Iterable[ClusterQueueSpec],
        cohorts: Iterable[CohortSpec],
        usage: Mapping[UsageKey, Quantity],
    ) -> None:
        self.specs = {cq.name: cq for cq in cluster_queues}
        self.tree = QuotaTree(
            [CoreClusterQueue(cq.name, _resource_groups(cq.quotas), cq.cohort) for cq in self.specs.values()],
            [CoreCohort(c.name, c.parent, _resource_groups(c.quotas)) for c in cohorts],
        )
        for (cq, flavor, resource), amount in sorted(usage.items()):
            if cq in self.specs and not amount.is_zero():
                self.tree.add_usage(cq, {(flavor, resource): amount.value})

    def charge(self, cq: str, charges: Sequence[Charge]) -> str:
        """Add ``charges`` to the ClusterQueue's usage if the core's ``fit`` says they fit now; else
        change nothing and return why (naming the ClusterQueue, its cohort, flavor and resource)."""
        spec = self.specs[cq]
        if cq in self.tree.disabled:
            return f"ClusterQueue {cq} is inactive: {self.tree.disabled[cq]}"
        covered = {(q.flavor, q.resource) for q in spec.quotas}
        request: dict[FlavorResource, Fraction] = {}
        for ch in charges:
            if ch.amount.is_zero():
                continue
            if (ch.flavor, ch.resource) not in covered:
                return f"ClusterQueue {cq} has no quota for flavor {ch.flavor} resource {ch.resource}"
            fr = (ch.flavor, ch.resource)
            request[fr] = request.get(fr, Fraction(0)) + ch.amount.value
        fit = self.tree.fit(cq, request)
        if fit.mode != "Fit":
            where = f"ClusterQueue {cq}" + (f" (cohort {spec.cohort})" if spec.cohort else "")
            return f"{where}: {fit.message()}"
        self.tree.add_usage(cq, request)
        return ""
