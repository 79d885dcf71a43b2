"""The incremental cluster cache: one long-lived view of the cluster that informer deltas (or the
simulator) update in place, and that scheduling cycles read through a :class:`DraPlacer` it keeps.

See :mod:`queueing.cache.cluster` and docs/architecture.md.
"""

from queueing.cache.cluster import CacheMismatch, ClusterCache, differences
from queueing.cache.pods import counted_pods_selectors, light_pod

__all__ = ["CacheMismatch", "ClusterCache", "counted_pods_selectors", "differences", "light_pod"]
