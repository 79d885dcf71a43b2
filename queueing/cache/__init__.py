"""The incremental cluster cache: one long-lived view of the cluster that informer deltas (or the
simulator) update in place, and that scheduling cycles read through a :class:`DraPlacer` it keeps.

See :mod:`queueing.cache.cluster` and docs/architecture.md.
"""

from queueing.cache.cluster import CacheMismatch, ClusterCache, differences
from queueing.cache.pods import light_pod

__all__ = ["CacheMismatch", "ClusterCache", "differences", "light_pod"]
