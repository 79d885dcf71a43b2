"""Carry out the ledger side of :func:`queueing.ledger.reconcile.reconcile`'s actions."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime

from queueing.ledger.reconcile import Action, EvictAdmission, ForgetWorkload, ReleaseAdmission
from queueing.ledger.repository import Ledger, NotAdmitted


async def apply_ledger_actions(
    ledger: Ledger, actions: Sequence[Action], *, at: datetime | int | float
) -> list[Action]:
    """Write the ledger part of each action (one transaction each); return the actions left for the
    cluster side (ApplyAdmission, RevokeAdmission, RecordWorkload, and evictions to carry out)."""
    rest: list[Action] = []
    for a in actions:
        if isinstance(a, ReleaseAdmission):
            with contextlib.suppress(NotAdmitted):  # already released: idempotent
                await ledger.release(a.workload_uid, at=at, reason=a.reason, final_state=a.final_state)
        elif isinstance(a, EvictAdmission):
            with contextlib.suppress(NotAdmitted):
                await ledger.evict(a.workload_uid, at=at, reason=a.reason, message=a.message)
            rest.append(a)
        elif isinstance(a, ForgetWorkload):
            await ledger.forget_workload(a.workload_uid, at=at)
        else:
            rest.append(a)
    return rest
