"""The ledger's repository: every write the controller (or the simulator) makes, one transaction each.

Usage::

    ledger = Ledger.from_url("sqlite+aiosqlite:///ledger.db")     # or postgresql+asyncpg://...
    await ledger.upsert_cluster_queue(ClusterQueueSpec(...), at=now)
    await ledger.upsert_local_queue(LocalQueueSpec(...), at=now)
    await ledger.add_workload(WorkloadSpec(...), at=now)
    admission_id = await ledger.admit(AdmissionRequest(...), at=now)   # reserve quota + record the plan
    await ledger.finish(uid, at=later)                                 # release
    await ledger.evict(uid, at=later, reason="Preempted", preemptor_uid=...)
    state = await ledger.load_state()                                   # recovery
    await ledger.close()

Quota is checked inside the admitting transaction while holding row locks (PostgreSQL ``SELECT ... FOR
UPDATE`` on the root cohort row of each cohort tree involved, then the ClusterQueue rows, then the
workload rows; SQLite serialises writers with ``BEGIN IMMEDIATE``), with the scheduling core's quota
model (:class:`queueing.ledger.quota.QuotaCheck` over ``QuotaTree``). A second active admission of one
workload UID is refused by a unique index.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from queueing.api.quantity import Quantity
from queueing.ledger import models as m
from queueing.ledger.engine import create_engine
from queueing.ledger.errors import amount_error
from queueing.ledger.quota import QuotaCheck, tree_lock_names, trees_of
from queueing.ledger.state import (
    ActiveAdmission,
    AdmissionRequest,
    Charge,
    ClusterQueueSpec,
    CohortSpec,
    EvictionStarted,
    LedgerState,
    LocalQueueSpec,
    PendingWorkload,
    PlannedDevice,
    PodPlan,
    QuotaSpec,
    ReleaseResult,
    UsageKey,
    WorkloadSpec,
)
from queueing.ledger.types import MS_PER_DAY, to_ms

Time = datetime | int | float  # datetime, or epoch seconds
ZERO = Quantity.from_value(0)


class LedgerError(Exception):
    """Base of the ledger's refusals."""


class UnknownObject(LedgerError):
    pass


class AlreadyAdmitted(LedgerError):
    pass


class NotAdmitted(LedgerError):
    pass


class QuotaExceeded(LedgerError):
    pass


class InvalidSpec(LedgerError, ValueError):
    """An object's values cannot be stored (``str(e)`` names the object and the field): refused before
    any write, the same on PostgreSQL and SQLite."""


@dataclass(frozen=True)
class JournalEvent:
    """A raw journal row, for :meth:`Ledger.append_journal` (bulk import, simulation, benchmarks)."""

    at_ms: int
    kind: str
    metric: str
    workload_uid: str
    namespace: str
    local_queue: str
    cluster_queue: str
    flavor: str
    resource: str
    amount: Quantity
    admission_id: int | None = None


def _ms(t: Time) -> int:
    return to_ms(t)


def _devices_json(devices: Iterable[PlannedDevice]) -> str:
    out = []
    for d in devices:
        item: dict[str, str] = {"device": d.device}
        if d.device_class:
            item["deviceClass"] = d.device_class
        if d.memory is not None:
            item["memory"] = str(d.memory)
        out.append(item)
    return json.dumps(out, sort_keys=True)


def _devices_from_json(text: str) -> tuple[PlannedDevice, ...]:
    return tuple(
        PlannedDevice(
            device=d["device"],
            device_class=d.get("deviceClass", ""),
            memory=Quantity.parse(d["memory"]) if "memory" in d else None,
        )
        for d in json.loads(text)
    )


def device_usage(pods: Iterable[PodPlan]) -> dict[str, tuple[int, Quantity]]:
    """Per device class: (number of devices, total memory) of a plan."""
    out: dict[str, tuple[int, Quantity]] = {}
    for p in pods:
        for d in p.devices:
            n, mem = out.get(d.device_class, (0, ZERO))
            out[d.device_class] = (n + 1, mem + (d.memory or ZERO))
    return out


class Ledger:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @classmethod
    def from_url(cls, url: str | None = None, **engine_kwargs: Any) -> Ledger:
        return cls(create_engine(url, **engine_kwargs))

    async def close(self) -> None:
        await self.engine.dispose()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    # ------------------------------------------------------------------ queues and cohorts
    async def upsert_cohort(self, spec: CohortSpec, *, at: Time) -> None:
        """Record a Cohort's parent and own quota (the current spec; a deleted Cohort object is recorded
        as ``CohortSpec(name)``: no parent, no quota of its own, as Kueue treats an implicit cohort).
        Locks the trees it leaves and joins, so admissions in them see the old or the new spec."""
        at_ms = _ms(at)
        _check_unique_quotas("Cohort", spec.name, spec.quotas)
        async with self.engine.begin() as c:
            await self._ensure_cohort(c, spec.name, at_ms)
            if spec.parent:
                await self._ensure_cohort(c, spec.parent, at_ms)

            async def involved() -> set[str]:
                return {spec.name, *([spec.parent] if spec.parent else [])}

            parents = await self._lock_trees(c, involved)
            current = await self._cohort_specs(c, [spec.name], parents)
            if current[spec.name] == _normalized_cohort(spec):
                return
            await c.execute(
                update(m.Cohort)
                .where(m.Cohort.name == spec.name)
                .values(parent=spec.parent, updated_at_ms=at_ms)
            )
            await c.execute(delete(m.CohortQuota).where(m.CohortQuota.cohort == spec.name))
            if spec.quotas:
                await c.execute(insert(m.CohortQuota), _quota_rows(spec.quotas, cohort=spec.name))

    async def cohorts(self) -> dict[str, CohortSpec]:
        """Every cohort the ledger holds, with its parent and own quota."""
        async with self.engine.connect() as c:
            parents = await self._cohort_parents(c)
            return await self._cohort_specs(c, parents, parents)

    async def _ensure_cohort(self, c: AsyncConnection, name: str, at_ms: int) -> None:
        """Insert the cohort's row (no parent) if it is not there: every cohort named has a row to lock."""
        row = (await c.execute(select(m.Cohort.name).where(m.Cohort.name == name))).first()
        if row is None:
            await c.execute(
                insert(m.Cohort).values(name=name, parent=None, created_at_ms=at_ms, updated_at_ms=at_ms)
            )

    async def _cohort_parents(self, c: AsyncConnection) -> dict[str, str | None]:
        return {r.name: r.parent for r in (await c.execute(select(m.Cohort.name, m.Cohort.parent))).all()}

    async def _lock_trees(
        self, c: AsyncConnection, cohorts: Callable[[], Awaitable[Iterable[str]]]
    ) -> dict[str, str | None]:
        """Lock the rows that stand for the trees of the cohorts ``cohorts()`` names (each tree's root
        cohort, in name order; see ``tree_lock_names``), and return every cohort's parent as it is
        under those locks. A tree that changed before the lock was taken (a cohort moved) is read
        again and its new root locked too, until what is read is what is locked."""
        locked: set[str] = set()
        while True:
            parents = await self._cohort_parents(c)
            need = {n for co in await cohorts() for n in tree_lock_names(co, parents)}
            todo = sorted(need - locked)
            if not todo:
                return parents
            await c.execute(
                select(m.Cohort.name).where(m.Cohort.name.in_(todo)).order_by(m.Cohort.name).with_for_update()
            )
            locked.update(todo)

    async def _cohort_specs(
        self, c: AsyncConnection, names: Iterable[str], parents: Mapping[str, str | None]
    ) -> dict[str, CohortSpec]:
        """The stored specs of the cohorts ``names`` (parents as read under the tree locks)."""
        names = sorted(set(names))
        quotas: dict[str, list[QuotaSpec]] = defaultdict(list)
        if names:
            for r in (
                await c.execute(
                    select(m.CohortQuota)
                    .where(m.CohortQuota.cohort.in_(names))
                    .order_by(m.CohortQuota.cohort, m.CohortQuota.flavor, m.CohortQuota.resource)
                )
            ).all():
                quotas[r.cohort].append(_quota_of_row(r))
        return {n: CohortSpec(n, parents.get(n), tuple(quotas.get(n, ()))) for n in names}

    async def upsert_cluster_queue(self, spec: ClusterQueueSpec, *, at: Time) -> int:
        """Record a ClusterQueue's spec; returns its quota version (new version only when it changed)."""
        at_ms = _ms(at)
        _check_unique_quotas("ClusterQueue", spec.name, spec.quotas)
        if (why := amount_error(spec.fair_sharing_weight)) is not None:
            raise InvalidSpec(f"ClusterQueue {spec.name}: fairSharing.weight: {why}")
        async with self.engine.begin() as c:
            if spec.cohort:
                await self._ensure_cohort(c, spec.cohort, at_ms)

            async def involved() -> set[str]:  # the tree it is in and the one it joins
                old = (
                    await c.execute(select(m.ClusterQueue.cohort).where(m.ClusterQueue.name == spec.name))
                ).scalar_one_or_none()
                return {n for n in (old, spec.cohort) if n}

            await self._lock_trees(c, involved)
            row = (
                await c.execute(
                    select(m.ClusterQueue).where(m.ClusterQueue.name == spec.name).with_for_update()
                )
            ).first()
            if row is not None:
                current = await self._quota_spec(c, spec.name, row.quota_version)
                if current == _normalized(spec) and row.deleted_at_ms is None:
                    return int(row.quota_version)
                version = int(row.quota_version) + 1
                await c.execute(
                    update(m.QuotaVersion)
                    .where(m.QuotaVersion.cluster_queue == spec.name, m.QuotaVersion.valid_to_ms.is_(None))
                    .values(valid_to_ms=at_ms)
                )
                await c.execute(
                    update(m.ClusterQueue)
                    .where(m.ClusterQueue.name == spec.name)
                    .values(
                        cohort=spec.cohort,
                        quota_version=version,
                        fair_sharing_weight=spec.fair_sharing_weight,
                        updated_at_ms=at_ms,
                        deleted_at_ms=None,
                    )
                )
            else:
                version = 1
                await c.execute(
                    insert(m.ClusterQueue).values(
                        name=spec.name,
                        cohort=spec.cohort,
                        quota_version=version,
                        fair_sharing_weight=spec.fair_sharing_weight,
                        created_at_ms=at_ms,
                        updated_at_ms=at_ms,
                    )
                )
            vid = (
                await c.execute(
                    insert(m.QuotaVersion)
                    .values(
                        cluster_queue=spec.name,
                        version=version,
                        cohort=spec.cohort,
                        fair_sharing_weight=spec.fair_sharing_weight,
                        valid_from_ms=at_ms,
                    )
                    .returning(m.QuotaVersion.id)
                )
            ).scalar_one()
            if spec.quotas:
                await c.execute(insert(m.Quota), _quota_rows(spec.quotas, quota_version_id=vid))
            return version

    async def delete_cluster_queue(self, name: str, *, at: Time) -> None:
        at_ms = _ms(at)
        async with self.engine.begin() as c:
            await c.execute(
                update(m.ClusterQueue).where(m.ClusterQueue.name == name).values(deleted_at_ms=at_ms)
            )
            await c.execute(
                update(m.QuotaVersion)
                .where(m.QuotaVersion.cluster_queue == name, m.QuotaVersion.valid_to_ms.is_(None))
                .values(valid_to_ms=at_ms)
            )

    async def _quota_spec(self, c: AsyncConnection, name: str, version: int) -> ClusterQueueSpec:
        qv = (
            await c.execute(
                select(m.QuotaVersion).where(
                    m.QuotaVersion.cluster_queue == name, m.QuotaVersion.version == version
                )
            )
        ).one()
        rows = (
            await c.execute(
                select(m.Quota)
                .where(m.Quota.quota_version_id == qv.id)
                .order_by(m.Quota.flavor, m.Quota.resource)
            )
        ).all()
        return ClusterQueueSpec(
            name=name,
            cohort=qv.cohort,
            fair_sharing_weight=qv.fair_sharing_weight,
            quotas=tuple(_quota_of_row(r) for r in rows),
        )

    async def upsert_local_queue(self, spec: LocalQueueSpec, *, at: Time) -> None:
        at_ms = _ms(at)
        async with self.engine.begin() as c:
            row = (
                await c.execute(
                    select(m.LocalQueue.cluster_queue).where(
                        m.LocalQueue.namespace == spec.namespace, m.LocalQueue.name == spec.name
                    )
                )
            ).first()
            if row is None:
                await c.execute(
                    insert(m.LocalQueue).values(
                        namespace=spec.namespace,
                        name=spec.name,
                        cluster_queue=spec.cluster_queue,
                        created_at_ms=at_ms,
                        updated_at_ms=at_ms,
                    )
                )
            elif row.cluster_queue != spec.cluster_queue:
                await c.execute(
                    update(m.LocalQueue)
                    .where(m.LocalQueue.namespace == spec.namespace, m.LocalQueue.name == spec.name)
                    .values(cluster_queue=spec.cluster_queue, updated_at_ms=at_ms)
                )

    # ------------------------------------------------------------------ workloads
    async def add_workload(self, spec: WorkloadSpec, *, at: Time) -> bool:
        """Record a workload (pending). Returns False when the UID is already known (no change)."""
        return bool(await self.add_workloads([spec], at=at))

    async def add_workloads(self, specs: Sequence[WorkloadSpec], *, at: Time) -> list[str]:
        """Record several workloads (pending) in one transaction; the UIDs already known are left as
        they are. Each waits since its ``queued_at_ms`` (its Job's creation), else since ``at``.
        Returns the UIDs recorded now."""
        at_ms = _ms(at)
        by_uid = {s.uid: s for s in specs}
        if not by_uid:
            return []
        async with self.engine.begin() as c:
            uids = list(by_uid)
            known: set[str] = set()
            for i in range(0, len(uids), 500):  # bounded statements (SQLite's variable limit)
                chunk = uids[i : i + 500]
                known.update(
                    (await c.execute(select(m.Workload.uid).where(m.Workload.uid.in_(chunk)))).scalars()
                )
            rows = [
                {
                    "uid": s.uid,
                    "namespace": s.namespace,
                    "name": s.name,
                    "local_queue": s.local_queue,
                    "priority": s.priority,
                    "requests_json": json.dumps(s.requests, sort_keys=True, default=str),
                    "owner_uid": s.owner_uid,
                    "state": m.PENDING,
                    "created_at_ms": at_ms,
                    "queued_at_ms": at_ms if s.queued_at_ms is None else s.queued_at_ms,
                    "updated_at_ms": at_ms,
                }
                for s in by_uid.values()
                if s.uid not in known
            ]
            for i in range(0, len(rows), 500):
                await c.execute(insert(m.Workload), rows[i : i + 500])
        return [str(r["uid"]) for r in rows]

    async def transfer_admission(self, old_uid: str, new: WorkloadSpec, *, at: Time) -> int:
        """The active admission of ``old_uid`` (a Workload deleted while its Job runs) becomes the
        admission of ``new`` (the Workload recreated for the same Job), in one transaction: quota,
        plan and journal stay as they are; the old workload is recorded deleted. The new workload
        takes the old one's wait (``queued_at_ms``). Returns the admission id; raises NotAdmitted
        when ``old_uid`` holds no active admission, AlreadyAdmitted when ``new`` holds one."""
        at_ms = _ms(at)
        async with self.engine.begin() as c:
            adm = (
                await c.execute(
                    select(m.Admission)
                    .where(m.Admission.workload_uid == old_uid, m.Admission.released_at_ms.is_(None))
                    .with_for_update()
                )
            ).first()
            if adm is None:
                raise NotAdmitted(f"workload {old_uid} has no active admission to hand over")
            old = (await c.execute(select(m.Workload).where(m.Workload.uid == old_uid))).one()
            cur = (await c.execute(select(m.Workload).where(m.Workload.uid == new.uid))).first()
            if cur is not None and cur.state == m.ADMITTED:
                raise AlreadyAdmitted(f"workload {new.namespace}/{new.name} ({new.uid}) is already admitted")
            values = {
                "namespace": new.namespace,
                "name": new.name,
                "local_queue": old.local_queue,
                "cluster_queue": adm.cluster_queue,
                "priority": new.priority,
                "requests_json": json.dumps(new.requests, sort_keys=True, default=str),
                "owner_uid": new.owner_uid,
                "state": m.ADMITTED,
                "queued_at_ms": old.queued_at_ms,
                "admitted_at_ms": old.admitted_at_ms,
                "updated_at_ms": at_ms,
            }
            if cur is None:
                await c.execute(insert(m.Workload).values(uid=new.uid, created_at_ms=at_ms, **values))
            else:
                await c.execute(update(m.Workload).where(m.Workload.uid == new.uid).values(**values))
            attempts = (
                await c.execute(select(func.count()).where(m.Admission.workload_uid == new.uid))
            ).scalar_one()
            await c.execute(
                update(m.Admission)
                .where(m.Admission.id == adm.id)
                .values(workload_uid=new.uid, attempt=int(attempts) + 1)
            )
            await c.execute(
                update(m.EvictionStart)
                .where(m.EvictionStart.admission_id == adm.id)
                .values(workload_uid=new.uid)
            )
            await c.execute(
                update(m.Workload)
                .where(m.Workload.uid == old_uid)
                .values(state=m.DELETED, cluster_queue=None, finished_at_ms=at_ms, updated_at_ms=at_ms)
            )
            return int(adm.id)

    async def forget_workload(self, uid: str, *, at: Time) -> None:
        """Mark a pending workload deleted (releases first if it is admitted)."""
        if await self._active_admission_id(uid) is not None:
            await self.release(uid, at=at, reason="WorkloadDeleted", final_state=m.DELETED)
            return
        async with self.engine.begin() as c:
            await c.execute(
                update(m.Workload)
                .where(m.Workload.uid == uid)
                .values(state=m.DELETED, finished_at_ms=_ms(at), updated_at_ms=_ms(at))
            )

    # ------------------------------------------------------------------ admit
    async def admit(self, req: AdmissionRequest, *, at: Time) -> int:
        """Reserve quota and record the plan in one transaction; returns the admission id.

        Raises UnknownObject, AlreadyAdmitted or QuotaExceeded (nothing is written then).
        """
        return (await self.admit_many([req], at=at))[0]

    async def admit_many(self, reqs: Sequence[AdmissionRequest], *, at: Time) -> list[int]:
        """Admit several workloads in ONE transaction, all or none, in request order (batching for
        throughput: a constant number of statements per batch). Returns the admission ids."""
        if not reqs:
            return []
        for req in reqs:
            _check_request_amounts(req)
        at_ms = _ms(at)
        try:
            async with self.engine.begin() as c:
                return await self._admit_batch(c, reqs, at_ms)
        except IntegrityError as e:
            # the unique index on the active admission (a concurrent admission of the same UID)
            uids = ", ".join(r.workload_uid for r in reqs)
            raise AlreadyAdmitted(f"workload {uids} is already admitted") from e

    async def _lock_queues(
        self, c: AsyncConnection, names: Iterable[str]
    ) -> tuple[dict[str, Any], dict[str, str | None]]:
        """Lock the root cohort of every tree the ClusterQueues are in, then the ClusterQueues, each
        in name order (no deadlocks between batches). Returns the locked ClusterQueue rows and every
        cohort's parent."""
        names = sorted(set(names))

        async def cohorts() -> set[str]:
            found = {
                r.name: r
                for r in (await c.execute(select(m.ClusterQueue).where(m.ClusterQueue.name.in_(names)))).all()
            }
            for n in names:
                if n not in found or found[n].deleted_at_ms is not None:
                    raise UnknownObject(f"ClusterQueue {n} is not in the ledger")
            return {r.cohort for r in found.values() if r.cohort}

        parents = await self._lock_trees(c, cohorts)
        locked = (
            await c.execute(
                select(m.ClusterQueue)
                .where(m.ClusterQueue.name.in_(names))
                .order_by(m.ClusterQueue.name)
                .with_for_update()
            )
        ).all()
        return {r.name: r for r in locked}, parents

    async def _admit_batch(
        self, c: AsyncConnection, reqs: Sequence[AdmissionRequest], at_ms: int
    ) -> list[int]:
        cqs, parents = await self._lock_queues(c, [r.cluster_queue for r in reqs])
        uids = [r.workload_uid for r in reqs]
        if len(set(uids)) != len(uids):
            raise AlreadyAdmitted("the batch admits a workload twice")
        wls = {
            r.uid: r
            for r in (
                await c.execute(
                    select(m.Workload)
                    .where(m.Workload.uid.in_(uids))
                    .order_by(m.Workload.uid)
                    .with_for_update()
                )
            ).all()
        }
        for uid in uids:
            wl = wls.get(uid)
            if wl is None:
                raise UnknownObject(f"workload {uid} is not in the ledger")
            if wl.state == m.ADMITTED:
                raise AlreadyAdmitted(f"workload {wl.namespace}/{wl.name} ({wl.uid}) is already admitted")
            if wl.state in (m.FINISHED, m.DELETED):
                raise LedgerError(f"workload {wl.namespace}/{wl.name} ({wl.uid}) is {wl.state}")

        # the whole tree of every ClusterQueue involved: its cohorts (parents, own quotas) and their
        # ClusterQueues' quotas and usage, checked with the core's model
        roots = {n for q in cqs.values() if q.cohort for n in tree_lock_names(q.cohort, parents)}
        cohorts = sorted(trees_of(roots, parents))
        members: dict[str, str | None] = {name: q.cohort for name, q in cqs.items()}
        if cohorts:
            for mr in (
                await c.execute(
                    select(m.ClusterQueue.name, m.ClusterQueue.cohort).where(
                        m.ClusterQueue.cohort.in_(cohorts), m.ClusterQueue.deleted_at_ms.is_(None)
                    )
                )
            ).all():
                members[mr.name] = mr.cohort
        names = sorted(members)
        quotas: dict[str, list[QuotaSpec]] = defaultdict(list)
        for r in (
            await c.execute(
                select(m.QuotaVersion.cluster_queue, m.Quota)
                .join(m.Quota, m.Quota.quota_version_id == m.QuotaVersion.id)
                .where(m.QuotaVersion.cluster_queue.in_(names), m.QuotaVersion.valid_to_ms.is_(None))
                .order_by(m.QuotaVersion.cluster_queue, m.Quota.flavor, m.Quota.resource)
            )
        ).all():
            quotas[r.cluster_queue].append(_quota_of_row(r))
        old_usage: dict[UsageKey, Quantity] = {
            (r.cluster_queue, r.flavor, r.resource): r.amount
            for r in (
                await c.execute(select(m.QueueUsage).where(m.QueueUsage.cluster_queue.in_(names)))
            ).all()
        }
        check = QuotaCheck(
            [ClusterQueueSpec(n, tuple(quotas.get(n, ())), members[n]) for n in names],
            (await self._cohort_specs(c, cohorts, parents)).values(),
            old_usage,
        )
        usage = dict(old_usage)
        merged = [_merge_charges(r.charges) for r in reqs]
        for req, charges in zip(reqs, merged, strict=True):
            why = check.charge(req.cluster_queue, charges)
            if why:
                raise QuotaExceeded(why)
            for ch in charges:
                k = (req.cluster_queue, ch.flavor, ch.resource)
                usage[k] = usage.get(k, ZERO) + ch.amount

        prior = dict(
            (
                await c.execute(
                    select(m.Admission.workload_uid, func.count())
                    .where(m.Admission.workload_uid.in_(uids))
                    .group_by(m.Admission.workload_uid)
                )
            ).all()
        )
        rows = [
            {
                "workload_uid": req.workload_uid,
                "attempt": int(prior.get(req.workload_uid, 0)) + 1,
                "cluster_queue": req.cluster_queue,
                "quota_version": cqs[req.cluster_queue].quota_version,
                "namespace": wls[req.workload_uid].namespace,
                "local_queue": wls[req.workload_uid].local_queue,
                "flavors_json": json.dumps(dict(req.flavors), sort_keys=True),
                "status_json": json.dumps(req.status, sort_keys=True) if req.status is not None else None,
                "queued_at_ms": wls[req.workload_uid].queued_at_ms,
                "admitted_at_ms": at_ms,
            }
            for req in reqs
        ]
        if len(rows) == 1:
            ids = [
                (await c.execute(insert(m.Admission).values(rows[0]).returning(m.Admission.id))).scalar_one()
            ]
        else:
            ids = list(
                (
                    await c.execute(
                        insert(m.Admission).returning(m.Admission.id, sort_by_parameter_order=True), rows
                    )
                ).scalars()
            )
        charge_rows: list[dict[str, Any]] = []
        pod_rows: list[dict[str, Any]] = []
        journal_rows: list[dict[str, Any]] = []
        for aid, req, charges in zip(ids, reqs, merged, strict=True):
            wl = wls[req.workload_uid]
            charge_rows += [
                {"admission_id": aid, "flavor": ch.flavor, "resource": ch.resource, "amount": ch.amount}
                for ch in charges
            ]
            pod_rows += [
                {
                    "admission_id": aid,
                    "pod_index": p.pod_index,
                    "pod_set": p.pod_set,
                    "pod_name": p.pod_name,
                    "node": p.node,
                    "devices_json": _devices_json(p.devices),
                }
                for p in req.pods
            ]
            journal_rows += _journal_rows(
                m.RESERVE,
                at_ms,
                wl.uid,
                aid,
                wl.namespace,
                wl.local_queue,
                req.cluster_queue,
                charges,
                req.pods,
            )
        if charge_rows:
            await c.execute(insert(m.AdmissionCharge), charge_rows)
        if pod_rows:
            await c.execute(insert(m.AdmissionPod), pod_rows)
        if journal_rows:
            await c.execute(insert(m.JournalEntry), journal_rows)
        await self._write_usage(c, old_usage, usage)
        await c.execute(
            update(m.Workload)
            .where(m.Workload.uid == bindparam("b_uid"))
            .values(
                state=m.ADMITTED,
                cluster_queue=bindparam("b_cq"),
                admitted_at_ms=at_ms,
                updated_at_ms=at_ms,
            ),
            [{"b_uid": r.workload_uid, "b_cq": r.cluster_queue} for r in reqs],
        )
        return [int(i) for i in ids]

    async def _write_usage(
        self, c: AsyncConnection, old: Mapping[UsageKey, Quantity], new: Mapping[UsageKey, Quantity]
    ) -> None:
        ins = [
            {"cluster_queue": k[0], "flavor": k[1], "resource": k[2], "amount": v}
            for k, v in new.items()
            if k not in old
        ]
        upd = [
            {"b_cq": k[0], "b_flavor": k[1], "b_resource": k[2], "b_amount": v}
            for k, v in new.items()
            if k in old and old[k] != v
        ]
        if ins:
            await c.execute(insert(m.QueueUsage), ins)
        if upd:
            await c.execute(
                update(m.QueueUsage)
                .where(
                    m.QueueUsage.cluster_queue == bindparam("b_cq"),
                    m.QueueUsage.flavor == bindparam("b_flavor"),
                    m.QueueUsage.resource == bindparam("b_resource"),
                )
                .values(amount=bindparam("b_amount")),
                upd,
            )

    # ------------------------------------------------------------------ release / evict
    async def finish(self, uid: str, *, at: Time, reason: str = "Finished") -> ReleaseResult:
        """The workload finished: release its quota."""
        return await self.release(uid, at=at, reason=reason, final_state=m.FINISHED)

    async def release(
        self, uid: str, *, at: Time, reason: str, final_state: str = m.PENDING
    ) -> ReleaseResult:
        """Release the active admission of ``uid`` (one transaction). ``final_state`` is the workload's
        state afterwards: pending (requeued), finished or deleted."""
        at_ms = _ms(at)
        async with self.engine.begin() as c:
            return await self._release(c, uid, at_ms, reason, final_state)

    async def evict(
        self,
        uid: str,
        *,
        at: Time,
        reason: str,
        preemptor_uid: str | None = None,
        freed_devices: Sequence[str] | None = None,
        message: str = "",
        requeue: bool = True,
    ) -> ReleaseResult:
        """Evict: release the admission and record who/why, planned vs freed devices (one transaction).

        ``freed_devices`` defaults to the planned devices (all of them were freed)."""
        at_ms = _ms(at)
        async with self.engine.begin() as c:
            res = await self._release(c, uid, at_ms, reason, m.PENDING if requeue else m.FINISHED)
            preemptor_cq_name = None
            if preemptor_uid is not None:
                preemptor_cq_name = await self._queue_of(c, preemptor_uid)
            adm = (await c.execute(select(m.Admission).where(m.Admission.id == res.admission_id))).one()
            freed = list(res.devices if freed_devices is None else freed_devices)
            await c.execute(
                insert(m.Eviction).values(
                    admission_id=res.admission_id,
                    workload_uid=uid,
                    victim_cluster_queue=adm.cluster_queue,
                    victim_namespace=adm.namespace,
                    victim_local_queue=adm.local_queue,
                    preemptor_uid=preemptor_uid,
                    preemptor_cluster_queue=preemptor_cq_name,
                    reason=reason,
                    message=message,
                    evicted_at_ms=at_ms,
                    planned_devices_json=json.dumps(list(res.devices)),
                    freed_devices_json=json.dumps(freed),
                    planned_device_count=len(res.devices),
                    freed_device_count=len(freed),
                )
            )
            return res

    async def begin_eviction(
        self,
        uid: str,
        *,
        at: Time,
        reason: str,
        preemptor_uid: str | None = None,
        message: str = "",
    ) -> bool:
        """Record that the eviction of the workload's active admission starts (before the cluster sees
        it). The quota stays charged until ``evict`` releases it. Idempotent: False when this
        admission's eviction was already started. Raises ``NotAdmitted`` without an active admission."""
        async with self.engine.begin() as c:
            adm_id = (
                await c.execute(
                    select(m.Admission.id)
                    .where(m.Admission.workload_uid == uid, m.Admission.released_at_ms.is_(None))
                    .with_for_update()
                )
            ).scalar_one_or_none()
            if adm_id is None:
                raise NotAdmitted(f"workload {uid} has no active admission to evict")
            started = (
                await c.execute(select(m.EvictionStart.id).where(m.EvictionStart.admission_id == adm_id))
            ).scalar_one_or_none()
            if started is not None:
                return False
            await c.execute(
                insert(m.EvictionStart).values(
                    admission_id=adm_id,
                    workload_uid=uid,
                    reason=reason,
                    preemptor_uid=preemptor_uid,
                    message=message,
                    started_at_ms=_ms(at),
                )
            )
            return True

    async def _queue_of(self, c: AsyncConnection, uid: str) -> str | None:
        """The ClusterQueue a workload is admitted to, else the one its LocalQueue points to."""
        wl = (
            await c.execute(
                select(m.Workload.namespace, m.Workload.local_queue, m.Workload.cluster_queue).where(
                    m.Workload.uid == uid
                )
            )
        ).first()
        if wl is None:
            return None
        if wl.cluster_queue is not None:
            return str(wl.cluster_queue)
        return (
            await c.execute(
                select(m.LocalQueue.cluster_queue).where(
                    m.LocalQueue.namespace == wl.namespace, m.LocalQueue.name == wl.local_queue
                )
            )
        ).scalar_one_or_none()

    async def rebind(
        self, uid: str, pods: Sequence[PodPlan], status: Mapping[str, Any] | None = None
    ) -> bool:
        """Record the node and devices the pods of ``uid``'s active admission actually got (when
        kube-scheduler allocated other devices than planned): the plan rows of those pods are
        replaced (and the Workload's ``status.admission`` kept with it, when given); charges and the
        journal stay (the same number of devices of the same classes). False when the workload has
        no active admission."""
        async with self.engine.begin() as c:
            aid = (
                await c.execute(
                    select(m.Admission.id).where(
                        m.Admission.workload_uid == uid, m.Admission.released_at_ms.is_(None)
                    )
                )
            ).scalar_one_or_none()
            if aid is None:
                return False
            if status is not None:
                await c.execute(
                    update(m.Admission)
                    .where(m.Admission.id == aid)
                    .values(status_json=json.dumps(status, sort_keys=True))
                )
            for p in pods:
                await c.execute(
                    update(m.AdmissionPod)
                    .where(m.AdmissionPod.admission_id == aid, m.AdmissionPod.pod_index == p.pod_index)
                    .values(node=p.node, devices_json=_devices_json(p.devices))
                )
        return True

    async def _active_admission_id(self, uid: str) -> int | None:
        async with self.engine.connect() as c:
            return (
                await c.execute(
                    select(m.Admission.id).where(
                        m.Admission.workload_uid == uid, m.Admission.released_at_ms.is_(None)
                    )
                )
            ).scalar_one_or_none()

    async def _release(
        self, c: AsyncConnection, uid: str, at_ms: int, reason: str, final_state: str
    ) -> ReleaseResult:
        return (await self._release_batch(c, [(uid, reason, final_state)], at_ms))[0]

    async def release_many(self, items: Sequence[tuple[str, str, str]], *, at: Time) -> list[ReleaseResult]:
        """Release several admissions in ONE transaction, all or none: items are
        (workload UID, reason, final state). A constant number of statements per batch."""
        if not items:
            return []
        async with self.engine.begin() as c:
            return await self._release_batch(c, items, _ms(at))

    async def finish_many(
        self, uids: Sequence[str], *, at: Time, reason: str = "Finished"
    ) -> list[ReleaseResult]:
        return await self.release_many([(u, reason, m.FINISHED) for u in uids], at=at)

    async def _release_batch(
        self, c: AsyncConnection, items: Sequence[tuple[str, str, str]], at_ms: int
    ) -> list[ReleaseResult]:
        uids = [u for u, _, _ in items]
        if len(set(uids)) != len(uids):
            raise LedgerError("the batch releases a workload twice")
        active = m.Admission.released_at_ms.is_(None)
        found = (
            (
                await c.execute(
                    select(m.Admission.cluster_queue).where(m.Admission.workload_uid.in_(uids), active)
                )
            )
            .scalars()
            .all()
        )
        await self._lock_queues(c, found)
        adms = {
            r.workload_uid: r
            for r in (
                await c.execute(
                    select(m.Admission)
                    .where(m.Admission.workload_uid.in_(uids), active)
                    .order_by(m.Admission.id)
                    .with_for_update()
                )
            ).all()
        }
        for uid in uids:
            if uid not in adms:
                raise NotAdmitted(f"workload {uid} has no active admission")
        ids = [adms[u].id for u in uids]
        charges: dict[int, list[Charge]] = defaultdict(list)
        for r in (
            await c.execute(
                select(m.AdmissionCharge)
                .where(m.AdmissionCharge.admission_id.in_(ids))
                .order_by(
                    m.AdmissionCharge.admission_id, m.AdmissionCharge.flavor, m.AdmissionCharge.resource
                )
            )
        ).all():
            charges[r.admission_id].append(Charge(r.flavor, r.resource, r.amount))
        pods = await self._pods(c, ids)
        cq_names = sorted({adms[u].cluster_queue for u in uids})
        old_usage: dict[UsageKey, Quantity] = {
            (r.cluster_queue, r.flavor, r.resource): r.amount
            for r in (
                await c.execute(select(m.QueueUsage).where(m.QueueUsage.cluster_queue.in_(cq_names)))
            ).all()
        }
        usage = dict(old_usage)
        journal: list[dict[str, Any]] = []
        results = []
        for uid in uids:
            adm = adms[uid]
            chs = tuple(charges.get(adm.id, ()))
            plan = pods.get(adm.id, ())
            for ch in chs:
                k = (adm.cluster_queue, ch.flavor, ch.resource)
                usage[k] = usage.get(k, ZERO) - ch.amount
            journal += _journal_rows(
                m.RELEASE, at_ms, uid, adm.id, adm.namespace, adm.local_queue, adm.cluster_queue, chs, plan
            )
            results.append(
                ReleaseResult(
                    admission_id=int(adm.id),
                    workload_uid=uid,
                    cluster_queue=adm.cluster_queue,
                    released=chs,
                    devices=tuple(d.device for p in plan for d in p.devices),
                )
            )
        await c.execute(
            update(m.Admission)
            .where(m.Admission.id == bindparam("b_id"))
            .values(released_at_ms=at_ms, release_reason=bindparam("b_reason")),
            [{"b_id": adms[u].id, "b_reason": reason} for u, reason, _ in items],
        )
        if journal:
            await c.execute(insert(m.JournalEntry), journal)
        await self._write_usage(c, old_usage, usage)
        for state in sorted({st for _, _, st in items}):
            values: dict[str, Any] = {"state": state, "updated_at_ms": at_ms}
            if state == m.PENDING:
                values.update(queued_at_ms=at_ms, cluster_queue=None)
            else:
                values["finished_at_ms"] = at_ms
            await c.execute(
                update(m.Workload).where(m.Workload.uid == bindparam("b_uid")).values(**values),
                [{"b_uid": u} for u, _, st in items if st == state],
            )
        return results

    async def _pods(self, c: AsyncConnection, ids: Sequence[int]) -> dict[int, tuple[PodPlan, ...]]:
        out: dict[int, list[PodPlan]] = defaultdict(list)
        if not ids:
            return {}
        for r in (
            await c.execute(
                select(m.AdmissionPod)
                .where(m.AdmissionPod.admission_id.in_(list(ids)))
                .order_by(m.AdmissionPod.admission_id, m.AdmissionPod.pod_index)
            )
        ).all():
            out[r.admission_id].append(
                PodPlan(
                    pod_index=r.pod_index,
                    node=r.node,
                    devices=_devices_from_json(r.devices_json),
                    pod_set=r.pod_set,
                    pod_name=r.pod_name,
                )
            )
        return {k: tuple(v) for k, v in out.items()}

    # ------------------------------------------------------------------ runs and leader terms
    async def start_run(
        self,
        *,
        identity: str,
        at: Time,
        mode: str = "controller",
        version: str = "",
        details: Mapping[str, Any] | None = None,
    ) -> str:
        run_id = str(uuid.uuid4())
        at_ms = _ms(at)
        async with self.engine.begin() as c:
            await c.execute(
                insert(m.ControllerRun).values(
                    id=run_id,
                    identity=identity,
                    mode=mode,
                    version=version,
                    details_json=json.dumps(dict(details or {}), sort_keys=True, default=str),
                    started_at_ms=at_ms,
                    heartbeat_at_ms=at_ms,
                )
            )
        return run_id

    async def heartbeat(self, run_id: str, *, at: Time) -> None:
        async with self.engine.begin() as c:
            await c.execute(
                update(m.ControllerRun).where(m.ControllerRun.id == run_id).values(heartbeat_at_ms=_ms(at))
            )

    async def stop_run(self, run_id: str, *, at: Time) -> None:
        at_ms = _ms(at)
        async with self.engine.begin() as c:
            await c.execute(
                update(m.ControllerRun)
                .where(m.ControllerRun.id == run_id)
                .values(stopped_at_ms=at_ms, heartbeat_at_ms=at_ms)
            )
            await c.execute(
                update(m.LeaderTerm)
                .where(m.LeaderTerm.run_id == run_id, m.LeaderTerm.ended_at_ms.is_(None))
                .values(ended_at_ms=at_ms)
            )

    async def begin_leader_term(self, run_id: str, *, lease: str, at: Time) -> int:
        """Record that ``run_id`` became leader of ``lease``; returns the new term number (1, 2, ...).
        Ends any open term of the lease. Two runs cannot get the same term (unique constraint)."""
        at_ms = _ms(at)
        async with self.engine.begin() as c:
            last = (
                await c.execute(select(func.max(m.LeaderTerm.term)).where(m.LeaderTerm.lease == lease))
            ).scalar_one()
            term = int(last or 0) + 1
            await c.execute(
                update(m.LeaderTerm)
                .where(m.LeaderTerm.lease == lease, m.LeaderTerm.ended_at_ms.is_(None))
                .values(ended_at_ms=at_ms)
            )
            await c.execute(
                insert(m.LeaderTerm).values(run_id=run_id, lease=lease, term=term, acquired_at_ms=at_ms)
            )
            return term

    async def end_leader_term(self, run_id: str, *, lease: str, at: Time) -> None:
        async with self.engine.begin() as c:
            await c.execute(
                update(m.LeaderTerm)
                .where(
                    m.LeaderTerm.run_id == run_id,
                    m.LeaderTerm.lease == lease,
                    m.LeaderTerm.ended_at_ms.is_(None),
                )
                .values(ended_at_ms=_ms(at))
            )

    # ------------------------------------------------------------------ reading
    async def load_state(self) -> LedgerState:
        """Everything the controller needs to rebuild its in-memory state after a restart."""
        async with self.engine.connect() as c:
            cqs: dict[str, ClusterQueueSpec] = {}
            for r in (
                await c.execute(select(m.ClusterQueue).where(m.ClusterQueue.deleted_at_ms.is_(None)))
            ).all():
                cqs[r.name] = await self._quota_spec(c, r.name, r.quota_version)
            parents = await self._cohort_parents(c)
            cohorts = await self._cohort_specs(c, parents, parents)
            lqs = {
                (r.namespace, r.name): LocalQueueSpec(r.namespace, r.name, r.cluster_queue)
                for r in (await c.execute(select(m.LocalQueue))).all()
            }
            rows = (
                await c.execute(
                    select(m.Admission, m.Workload.name, m.Workload.owner_uid)
                    .join(m.Workload, m.Workload.uid == m.Admission.workload_uid)
                    .where(m.Admission.released_at_ms.is_(None))
                )
            ).all()
            ids = [r.id for r in rows]
            pods = await self._pods(c, ids)
            charges: dict[int, list[Charge]] = defaultdict(list)
            if ids:
                for ch in (
                    await c.execute(
                        select(m.AdmissionCharge)
                        .where(m.AdmissionCharge.admission_id.in_(ids))
                        .order_by(m.AdmissionCharge.flavor, m.AdmissionCharge.resource)
                    )
                ).all():
                    charges[ch.admission_id].append(Charge(ch.flavor, ch.resource, ch.amount))
            evictions: dict[int, EvictionStarted] = {}
            if ids:
                for e in (
                    await c.execute(select(m.EvictionStart).where(m.EvictionStart.admission_id.in_(ids)))
                ).all():
                    evictions[e.admission_id] = EvictionStarted(
                        e.reason, e.preemptor_uid, e.message, e.started_at_ms
                    )
            admissions = {
                r.workload_uid: ActiveAdmission(
                    admission_id=int(r.id),
                    workload_uid=r.workload_uid,
                    namespace=r.namespace,
                    name=r.name,
                    local_queue=r.local_queue,
                    cluster_queue=r.cluster_queue,
                    admitted_at_ms=r.admitted_at_ms,
                    charges=tuple(charges.get(r.id, ())),
                    pods=pods.get(r.id, ()),
                    eviction=evictions.get(r.id),
                    status=json.loads(r.status_json) if r.status_json else None,
                    owner_uid=r.owner_uid,
                )
                for r in rows
            }
            pending = {
                r.uid: PendingWorkload(r.uid, r.namespace, r.name, r.local_queue, r.priority, r.queued_at_ms)
                for r in (await c.execute(select(m.Workload).where(m.Workload.state == m.PENDING))).all()
            }
            usage = {
                (r.cluster_queue, r.flavor, r.resource): r.amount
                for r in (await c.execute(select(m.QueueUsage))).all()
                if not r.amount.is_zero()
            }
        return LedgerState(cqs, lqs, admissions, pending, usage, cohorts)

    async def usage_at(self, at: Time, *, metric: str = m.METRIC_QUOTA) -> dict[UsageKey, Quantity]:
        """Usage per (ClusterQueue, flavor, resource) at a time, from the journal (and, for compacted days,
        the daily rollups: exact at day ends)."""
        at_ms = _ms(at)
        out: dict[UsageKey, Quantity] = defaultdict(lambda: ZERO)
        async with self.engine.connect() as c:
            for r in (
                await c.execute(
                    select(
                        m.JournalEntry.cluster_queue,
                        m.JournalEntry.flavor,
                        m.JournalEntry.resource,
                        m.JournalEntry.kind,
                        m.JournalEntry.amount,
                    ).where(m.JournalEntry.at_ms <= at_ms, m.JournalEntry.metric == metric)
                )
            ).all():
                k = (r.cluster_queue, r.flavor, r.resource)
                out[k] = out[k] + (r.amount if r.kind == m.RESERVE else -r.amount)
            day = at_ms // MS_PER_DAY
            for d in (
                await c.execute(
                    select(
                        m.DailyUsage.cluster_queue,
                        m.DailyUsage.flavor,
                        m.DailyUsage.resource,
                        m.DailyUsage.net_amount,
                    ).where(m.DailyUsage.day < day, m.DailyUsage.metric == metric)
                )
            ).all():
                k = (d.cluster_queue, d.flavor, d.resource)
                out[k] = out[k] + d.net_amount
        return {k: v for k, v in sorted(out.items()) if not v.is_zero()}

    async def append_journal(self, events: Sequence[JournalEvent]) -> int:
        """Append raw journal rows in one batched INSERT (no quota check: imports and benchmarks)."""
        if not events:
            return 0
        async with self.engine.begin() as c:
            await c.execute(
                insert(m.JournalEntry),
                [
                    {
                        "at_ms": e.at_ms,
                        "kind": e.kind,
                        "metric": e.metric,
                        "workload_uid": e.workload_uid,
                        "admission_id": e.admission_id,
                        "namespace": e.namespace,
                        "local_queue": e.local_queue,
                        "cluster_queue": e.cluster_queue,
                        "flavor": e.flavor,
                        "resource": e.resource,
                        "amount": e.amount,
                    }
                    for e in events
                ],
            )
        return len(events)

    async def journal_count(self) -> int:
        async with self.engine.connect() as c:
            return int((await c.execute(select(func.count()).select_from(m.JournalEntry))).scalar_one())

    async def delete_everything(self) -> None:
        """Empty every table (tests and benchmarks only)."""
        async with self.engine.begin() as c:
            for t in reversed(m.Base.metadata.sorted_tables):
                await c.execute(delete(t))


def _normalized(spec: ClusterQueueSpec) -> ClusterQueueSpec:
    return ClusterQueueSpec(
        name=spec.name,
        cohort=spec.cohort,
        fair_sharing_weight=spec.fair_sharing_weight,
        quotas=tuple(sorted(spec.quotas, key=lambda q: (q.flavor, q.resource))),
    )


def _quota_rows(quotas: Iterable[QuotaSpec], **key: Any) -> list[dict[str, Any]]:
    """Rows of ``quotas`` (table ``quotas`` or ``cohort_quotas``), each with the ``key`` columns."""
    return [
        {
            **key,
            "flavor": q.flavor,
            "resource": q.resource,
            "nominal": q.nominal,
            "borrowing_limit": q.borrowing_limit,
            "lending_limit": q.lending_limit,
        }
        for q in quotas
    ]


def _quota_of_row(row: Any) -> QuotaSpec:
    """A QuotaSpec from a row of ``quotas`` or ``cohort_quotas``."""
    return QuotaSpec(row.flavor, row.resource, row.nominal, row.borrowing_limit, row.lending_limit)


def _check_unique_quotas(kind: str, name: str, quotas: Iterable[QuotaSpec]) -> None:
    quotas = tuple(quotas)
    keys = [(q.flavor, q.resource) for q in quotas]
    if len(set(keys)) != len(keys):
        raise LedgerError(f"{kind} {name}: a (flavor, resource) appears twice in its quotas")
    for q in quotas:
        for field_name, value in (
            ("nominalQuota", q.nominal),
            ("borrowingLimit", q.borrowing_limit),
            ("lendingLimit", q.lending_limit),
        ):
            why = amount_error(value) if value is not None else None
            if why is not None:
                raise InvalidSpec(
                    f"{kind} {name}: flavor {q.flavor}, resource {q.resource}: {field_name}: {why}"
                )


def _check_request_amounts(req: AdmissionRequest) -> None:
    """Every amount of an admission fits the ledger's column (else InvalidSpec naming it, nothing written)."""
    for ch in req.charges:
        if (why := amount_error(ch.amount)) is not None:
            raise InvalidSpec(f"workload {req.workload_uid}: charge {ch.flavor}/{ch.resource}: {why}")
    for pod in req.pods:
        for d in pod.devices:
            if d.memory is not None and (why := amount_error(d.memory)) is not None:
                raise InvalidSpec(f"workload {req.workload_uid}: device {d.device} memory: {why}")


def _normalized_cohort(spec: CohortSpec) -> CohortSpec:
    return CohortSpec(
        spec.name, spec.parent, tuple(sorted(spec.quotas, key=lambda q: (q.flavor, q.resource)))
    )


def _merge_charges(charges: Iterable[Charge]) -> tuple[Charge, ...]:
    total: dict[tuple[str, str], Quantity] = {}
    for ch in charges:
        if ch.amount < ZERO:
            raise LedgerError(f"charge for {ch.flavor}/{ch.resource} is negative: {ch.amount}")
        k = (ch.flavor, ch.resource)
        total[k] = total[k] + ch.amount if k in total else ch.amount
    return tuple(Charge(f, r, a) for (f, r), a in sorted(total.items()))


def _journal_rows(
    kind: str,
    at_ms: int,
    uid: str,
    aid: int,
    namespace: str,
    local_queue: str,
    cq: str,
    charges: Sequence[Charge],
    pods: Sequence[PodPlan],
) -> list[dict[str, Any]]:
    base = {
        "at_ms": at_ms,
        "kind": kind,
        "workload_uid": uid,
        "admission_id": aid,
        "namespace": namespace,
        "local_queue": local_queue,
        "cluster_queue": cq,
    }
    rows: list[dict[str, Any]] = [
        {**base, "metric": m.METRIC_QUOTA, "flavor": ch.flavor, "resource": ch.resource, "amount": ch.amount}
        for ch in charges
    ]
    for dclass, (n, mem) in sorted(device_usage(pods).items()):
        rows.append(
            {
                **base,
                "metric": m.METRIC_DEVICES,
                "flavor": "",
                "resource": dclass,
                "amount": Quantity.from_value(n),
            }
        )
        if mem:
            rows.append(
                {**base, "metric": m.METRIC_DEVICE_MEMORY, "flavor": "", "resource": dclass, "amount": mem}
            )
    return rows
