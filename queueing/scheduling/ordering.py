"""Queue order within a ClusterQueue, and admission fair sharing with decayed usage.

* Without admission fair sharing a ClusterQueue is a priority queue: higher ``priority`` first,
  then earlier ``order_time`` (creation, or last requeue), then the key for determinism.
* With admission fair sharing (Kueue's UsageBasedAdmissionFairSharing, enabled by the
  configuration and per ClusterQueue), workloads first sort by their LocalQueue's weighted
  decayed usage: ``sum(usage[r] * resourceWeight[r]) / localQueue.weight`` (weight 0 = infinite),
  lower first. The same measure over ClusterQueues orders the heads of a cohort when
  ``cohortLevel`` is on (Kueue issue #9734).
* Decayed usage follows Kueue: ``new = old + (current - old) * alpha`` with
  ``alpha = 1 - 0.5 ** (elapsed / halfLife)``, so it closes half of the gap to the current usage
  every half-life. A half-life of 0 resets usage to 0. An admission adds an entry penalty of
  ``requests * alpha(samplingInterval)`` immediately so one queue's burst does not go first as a whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from fractions import Fraction

from queueing.scheduling.config import AdmissionFairSharingConfig
from queueing.scheduling.snapshot import FlavorResource, WorkloadInfo

__all__ = [
    "alpha_rate",
    "decay_usage",
    "entry_penalty",
    "priority_key",
    "queue_order_key",
    "usage_by_resource",
    "weighted_usage",
]


def priority_key(wl: WorkloadInfo) -> tuple[int, float, str]:
    return (-wl.priority, wl.order_time, wl.key)


def queue_order_key(
    wl: WorkloadInfo, nominated: AbstractSet[str], lq_share: float = 0.0
) -> tuple[int, float, int, float, str]:
    """The order of a ClusterQueue's pending workloads, first to last: a nominated preemptor first,
    then (admission fair sharing) its LocalQueue's weighted decayed usage, then ``priority_key``.
    ``run_cycle`` takes heads in this order; the visibility API numbers positions by it."""
    return (0 if wl.key in nominated else 1, lq_share, *priority_key(wl))


def alpha_rate(elapsed: float, half_life: float) -> float:
    if half_life <= 0:
        return 1.0
    return 1.0 - float(0.5 ** (max(0.0, elapsed) / half_life))


def decay_usage(
    old: Mapping[str, float], current: Mapping[str, float], elapsed: float, half_life: float
) -> dict[str, float]:
    """The decayed usage ``elapsed`` seconds after ``old`` was recorded, with ``current`` in use
    since then."""
    if half_life <= 0:
        return {}
    a = alpha_rate(elapsed, half_life)
    keys = sorted(set(old) | set(current))
    out = {k: old.get(k, 0.0) + (current.get(k, 0.0) - old.get(k, 0.0)) * a for k in keys}
    return {k: v for k, v in out.items() if v > 1e-12}


def entry_penalty(requests: Mapping[str, float], cfg: AdmissionFairSharingConfig) -> dict[str, float]:
    a = alpha_rate(cfg.usage_sampling_interval, cfg.usage_half_life_time)
    return {r: v * a for r, v in requests.items()}


def usage_by_resource(usage: Mapping[FlavorResource, Fraction]) -> dict[str, float]:
    """Flavor-resource usage summed per resource name, as floats (what decayed usage tracks)."""
    out: dict[str, float] = {}
    for (_, r), v in usage.items():
        out[r] = out.get(r, 0.0) + float(v)
    return out


def weighted_usage(usage: Mapping[str, float], cfg: AdmissionFairSharingConfig, weight: Fraction) -> float:
    total = sum(v * cfg.weight(r) for r, v in usage.items())
    if weight == 0:
        return float("inf")
    return total / float(weight)
