"""SQLAlchemy 2 declarative models of the ledger.

Times are ``*_ms`` integers (epoch milliseconds, UTC); amounts are :class:`ExactAmount` (exact decimals).
The Alembic migrations in ``migrations/versions/`` (top level) create exactly this schema (a test compares them).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from queueing.api.quantity import Quantity
from queueing.ledger.types import ExactAmount

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# BIGINT on PostgreSQL; INTEGER on SQLite so the primary key is the rowid (autoincrementing).
BigId = BigInteger().with_variant(Integer(), "sqlite")
Name = String(253)

# journal kinds and metrics
RESERVE = "reserve"
RELEASE = "release"
METRIC_QUOTA = "quota"  # charged quota of a (flavor, resource)
METRIC_DEVICES = "devices"  # number of planned devices; resource = device class
METRIC_DEVICE_MEMORY = "device_memory"  # bytes of memory of the planned devices; resource = device class

# workload states
PENDING = "pending"
ADMITTED = "admitted"
FINISHED = "finished"
DELETED = "deleted"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Cohort(Base):
    __tablename__ = "cohorts"

    name: Mapped[str] = mapped_column(Name, primary_key=True)
    parent: Mapped[str | None] = mapped_column(Name)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    updated_at_ms: Mapped[int] = mapped_column(BigInteger)


class QuotaColumns:
    """The quota of one flavor and resource (Kueue's ResourceQuota), in ``quotas`` and ``cohort_quotas``."""

    flavor: Mapped[str] = mapped_column(Name, primary_key=True)
    resource: Mapped[str] = mapped_column(Name, primary_key=True)
    nominal: Mapped[Quantity] = mapped_column(ExactAmount())
    borrowing_limit: Mapped[Quantity | None] = mapped_column(ExactAmount())
    lending_limit: Mapped[Quantity | None] = mapped_column(ExactAmount())


class CohortQuota(QuotaColumns, Base):
    """A Cohort's own quota (its ``spec.resourceGroups``) per flavor and resource: the current spec,
    added to the pool of its subtree (Kueue's hierarchical cohorts)."""

    __tablename__ = "cohort_quotas"

    cohort: Mapped[str] = mapped_column(Name, ForeignKey("cohorts.name"), primary_key=True)


class ClusterQueue(Base):
    __tablename__ = "cluster_queues"

    name: Mapped[str] = mapped_column(Name, primary_key=True)
    cohort: Mapped[str | None] = mapped_column(Name, ForeignKey("cohorts.name"))
    quota_version: Mapped[int] = mapped_column(Integer)
    fair_sharing_weight: Mapped[Quantity] = mapped_column(ExactAmount())
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    updated_at_ms: Mapped[int] = mapped_column(BigInteger)
    deleted_at_ms: Mapped[int | None] = mapped_column(BigInteger)


class QuotaVersion(Base):
    """One version of a ClusterQueue's quota; a new row whenever the spec changes."""

    __tablename__ = "quota_versions"
    __table_args__ = (UniqueConstraint("cluster_queue", "version"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster_queue: Mapped[str] = mapped_column(Name, ForeignKey("cluster_queues.name"))
    version: Mapped[int] = mapped_column(Integer)
    cohort: Mapped[str | None] = mapped_column(Name)
    fair_sharing_weight: Mapped[Quantity] = mapped_column(ExactAmount())
    valid_from_ms: Mapped[int] = mapped_column(BigInteger)
    valid_to_ms: Mapped[int | None] = mapped_column(BigInteger)


class Quota(QuotaColumns, Base):
    __tablename__ = "quotas"

    quota_version_id: Mapped[int] = mapped_column(BigId, ForeignKey("quota_versions.id"), primary_key=True)


class LocalQueue(Base):
    __tablename__ = "local_queues"

    namespace: Mapped[str] = mapped_column(Name, primary_key=True)
    name: Mapped[str] = mapped_column(Name, primary_key=True)
    cluster_queue: Mapped[str] = mapped_column(Name)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    updated_at_ms: Mapped[int] = mapped_column(BigInteger)


class Workload(Base):
    __tablename__ = "workloads"
    __table_args__ = (Index(None, "namespace", "name"), Index(None, "state"))

    uid: Mapped[str] = mapped_column(String(64), primary_key=True)
    namespace: Mapped[str] = mapped_column(Name)
    name: Mapped[str] = mapped_column(Name)
    local_queue: Mapped[str] = mapped_column(Name)
    cluster_queue: Mapped[str | None] = mapped_column(Name)
    priority: Mapped[int] = mapped_column(Integer)
    requests_json: Mapped[str] = mapped_column(Text)
    # the UID of the object that owns the workload (its Job), when it has one
    owner_uid: Mapped[str | None] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    queued_at_ms: Mapped[int] = mapped_column(BigInteger)
    admitted_at_ms: Mapped[int | None] = mapped_column(BigInteger)
    finished_at_ms: Mapped[int | None] = mapped_column(BigInteger)
    updated_at_ms: Mapped[int] = mapped_column(BigInteger)


class Admission(Base):
    """One admission of a workload. At most one *active* (unreleased) admission per workload UID."""

    __tablename__ = "admissions"
    __table_args__ = (
        UniqueConstraint("workload_uid", "attempt"),
        Index(
            "uq_admissions_active_workload",
            "workload_uid",
            unique=True,
            postgresql_where=text("released_at_ms IS NULL"),
            sqlite_where=text("released_at_ms IS NULL"),
        ),
        Index(None, "cluster_queue", "admitted_at_ms"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    workload_uid: Mapped[str] = mapped_column(String(64), ForeignKey("workloads.uid"))
    attempt: Mapped[int] = mapped_column(Integer)
    cluster_queue: Mapped[str] = mapped_column(Name, ForeignKey("cluster_queues.name"))
    quota_version: Mapped[int] = mapped_column(Integer)
    namespace: Mapped[str] = mapped_column(Name)
    local_queue: Mapped[str] = mapped_column(Name)
    flavors_json: Mapped[str] = mapped_column(Text)
    queued_at_ms: Mapped[int] = mapped_column(BigInteger)
    admitted_at_ms: Mapped[int] = mapped_column(BigInteger)
    released_at_ms: Mapped[int | None] = mapped_column(BigInteger)
    release_reason: Mapped[str | None] = mapped_column(String(64))
    # the Workload's status.admission as written (JSON): recovery rewrites a diverged status from it
    status_json: Mapped[str | None] = mapped_column(Text)


class AdmissionCharge(Base):
    __tablename__ = "admission_charges"

    admission_id: Mapped[int] = mapped_column(BigId, ForeignKey("admissions.id"), primary_key=True)
    flavor: Mapped[str] = mapped_column(Name, primary_key=True)
    resource: Mapped[str] = mapped_column(Name, primary_key=True)
    amount: Mapped[Quantity] = mapped_column(ExactAmount())


class AdmissionPod(Base):
    """The plan for one pod: its node and its devices (JSON list of {device, deviceClass, memory})."""

    __tablename__ = "admission_pods"

    admission_id: Mapped[int] = mapped_column(BigId, ForeignKey("admissions.id"), primary_key=True)
    pod_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    pod_set: Mapped[str] = mapped_column(Name)
    pod_name: Mapped[str | None] = mapped_column(Name)
    node: Mapped[str] = mapped_column(Name)
    devices_json: Mapped[str] = mapped_column(Text)


class QueueUsage(Base):
    """Current usage per ClusterQueue/flavor/resource, kept in the same transactions as the journal."""

    __tablename__ = "queue_usage"

    cluster_queue: Mapped[str] = mapped_column(Name, ForeignKey("cluster_queues.name"), primary_key=True)
    flavor: Mapped[str] = mapped_column(Name, primary_key=True)
    resource: Mapped[str] = mapped_column(Name, primary_key=True)
    amount: Mapped[Quantity] = mapped_column(ExactAmount())


class JournalEntry(Base):
    """Append-only: one reserve or release of an amount. Never updated; compaction moves old rows to
    :class:`DailyUsage`."""

    __tablename__ = "usage_journal"
    __table_args__ = (
        CheckConstraint("kind IN ('reserve', 'release')", name="kind"),
        Index(None, "at_ms"),
        Index(None, "admission_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    at_ms: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(8))
    metric: Mapped[str] = mapped_column(String(16))
    workload_uid: Mapped[str] = mapped_column(String(64))
    admission_id: Mapped[int | None] = mapped_column(BigInteger)
    namespace: Mapped[str] = mapped_column(Name)
    local_queue: Mapped[str] = mapped_column(Name)
    cluster_queue: Mapped[str] = mapped_column(Name)
    flavor: Mapped[str] = mapped_column(Name)
    resource: Mapped[str] = mapped_column(Name)
    amount: Mapped[Quantity] = mapped_column(ExactAmount())


class DailyUsage(Base):
    """A compacted day of the journal for one key.

    ``net_amount`` = sum of reserved minus released amounts during the day;
    ``weighted_ms`` = sum of (signed amount x milliseconds from the event to the end of its day).
    Usage at the day's end and the amount-time integral over the day follow from these exactly.
    """

    __tablename__ = "usage_daily"

    day: Mapped[int] = mapped_column(Integer, primary_key=True)  # days since 1970-01-01 (UTC)
    metric: Mapped[str] = mapped_column(String(16), primary_key=True)
    namespace: Mapped[str] = mapped_column(Name, primary_key=True)
    local_queue: Mapped[str] = mapped_column(Name, primary_key=True)
    cluster_queue: Mapped[str] = mapped_column(Name, primary_key=True)
    flavor: Mapped[str] = mapped_column(Name, primary_key=True)
    resource: Mapped[str] = mapped_column(Name, primary_key=True)
    net_amount: Mapped[Quantity] = mapped_column(ExactAmount())
    weighted_ms: Mapped[Quantity] = mapped_column(ExactAmount())
    events: Mapped[int] = mapped_column(Integer)


class EvictionStart(Base):
    """An eviction the controller started, recorded before the cluster sees it (the victim's Workload
    marked Evicted, its pods stopped). The release follows in ``evictions`` once the victim's pods and
    claims are gone; a start without a release is an eviction in progress that a restart resumes."""

    __tablename__ = "eviction_starts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    admission_id: Mapped[int] = mapped_column(BigId, ForeignKey("admissions.id"), unique=True)
    workload_uid: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(String(64))
    preemptor_uid: Mapped[str | None] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)
    started_at_ms: Mapped[int] = mapped_column(BigInteger)


class Eviction(Base):
    __tablename__ = "evictions"
    __table_args__ = (Index(None, "evicted_at_ms"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    admission_id: Mapped[int] = mapped_column(BigId, ForeignKey("admissions.id"), unique=True)
    workload_uid: Mapped[str] = mapped_column(String(64))
    victim_cluster_queue: Mapped[str] = mapped_column(Name)
    victim_namespace: Mapped[str] = mapped_column(Name)
    victim_local_queue: Mapped[str] = mapped_column(Name)
    preemptor_uid: Mapped[str | None] = mapped_column(String(64))
    preemptor_cluster_queue: Mapped[str | None] = mapped_column(Name)
    reason: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)
    evicted_at_ms: Mapped[int] = mapped_column(BigInteger)
    planned_devices_json: Mapped[str] = mapped_column(Text)
    freed_devices_json: Mapped[str] = mapped_column(Text)
    planned_device_count: Mapped[int] = mapped_column(Integer)
    freed_device_count: Mapped[int] = mapped_column(Integer)


class ControllerRun(Base):
    __tablename__ = "controller_runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    identity: Mapped[str] = mapped_column(Name)
    mode: Mapped[str] = mapped_column(String(16))  # "controller" or "simulation"
    version: Mapped[str] = mapped_column(String(64))
    details_json: Mapped[str] = mapped_column(Text)
    started_at_ms: Mapped[int] = mapped_column(BigInteger)
    heartbeat_at_ms: Mapped[int] = mapped_column(BigInteger)
    stopped_at_ms: Mapped[int | None] = mapped_column(BigInteger)


class LeaderTerm(Base):
    __tablename__ = "leader_terms"
    __table_args__ = (UniqueConstraint("lease", "term"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(64), ForeignKey("controller_runs.id"))
    lease: Mapped[str] = mapped_column(Name)
    term: Mapped[int] = mapped_column(Integer)
    acquired_at_ms: Mapped[int] = mapped_column(BigInteger)
    ended_at_ms: Mapped[int | None] = mapped_column(BigInteger)
