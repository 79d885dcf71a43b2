"""Requeue backoff for evicted or failed workloads (Kueue's waitForPodsReady.requeuingStrategy).

The n-th requeue (n = 1, 2, ...) waits ``min(backoffBaseSeconds * 2**(n-1), backoffMaxSeconds)``
after the eviction. Once a workload would be requeued more than ``backoffLimitCount`` times it is
deactivated instead (``None`` = no limit). Kueue adds a small random jitter; this core is
deterministic and does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from queueing.scheduling.config import RequeuingStrategy

__all__ = ["RequeueDecision", "next_requeue"]


@dataclass(frozen=True)
class RequeueDecision:
    count: int  # requeues so far, including this one
    requeue_at: float | None  # when the workload may be admitted again; None when deactivated
    deactivate: bool
    message: str


def next_requeue(previous_count: int, now: float, strategy: RequeuingStrategy) -> RequeueDecision:
    n = previous_count + 1
    limit = strategy.backoff_limit_count
    if limit is not None and n > limit:
        return RequeueDecision(
            previous_count,
            None,
            True,
            f"deactivated: requeued {previous_count} times, backoffLimitCount is {limit}",
        )
    # cap the exponent so huge counts cannot overflow
    exp = min(n - 1, 64)
    delay = min(strategy.backoff_base_seconds * (2.0**exp), strategy.backoff_max_seconds)
    return RequeueDecision(n, now + delay, False, f"requeue {n} after {delay:g}s backoff")
