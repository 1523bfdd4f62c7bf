"""SQLAlchemy 2.x ORM models. Private to the store: repositories convert them to domain objects."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

# Stable constraint names so migrations can drop and alter them on both databases.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use UTC-aware datetimes")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {datetime: UTCDateTime, int: BigInteger}


class UserRow(Base):
    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiTokenRow(Base):
    __tablename__ = "api_tokens"

    # Public id: a prefix of the hash, safe to show and used to revoke.
    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user: Mapped[str] = mapped_column(ForeignKey("users.name", ondelete="CASCADE"), index=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    description: Mapped[str] = mapped_column(String(256), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    address: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    agent_version: Mapped[str] = mapped_column(String(64), default="")
    workloads: Mapped[list[str]] = mapped_column(JSON, default=list)
    registered_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_heartbeat: Mapped[datetime] = mapped_column(default=utcnow)

    gpus: Mapped[list[GpuRow]] = relationship(
        back_populates="node",
        cascade="all, delete-orphan",
        order_by="GpuRow.index",
        lazy="selectin",
    )


class GpuRow(Base):
    __tablename__ = "gpus"

    node_name: Mapped[str] = mapped_column(
        ForeignKey("nodes.name", ondelete="CASCADE"), primary_key=True
    )
    index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    type: Mapped[str] = mapped_column(String(64), index=True)
    memory_bytes: Mapped[int] = mapped_column(default=0)
    device_name: Mapped[str] = mapped_column(String(128), default="")
    uuid: Mapped[str] = mapped_column(String(128), default="")
    health: Mapped[str] = mapped_column(String(16), default="HEALTHY")
    utilization: Mapped[float] = mapped_column(Float, default=0.0)
    fake: Mapped[bool] = mapped_column(Boolean, default=False)

    node: Mapped[NodeRow] = relationship(back_populates="gpus")


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    user: Mapped[str] = mapped_column(String(64), index=True)
    # Spec, as columns the scheduler filters and sorts on, plus JSON for the rest.
    name: Mapped[str] = mapped_column(String(128))
    num_gpus: Mapped[int] = mapped_column(Integer)
    iterations: Mapped[int] = mapped_column()
    program_kind: Mapped[str] = mapped_column(String(16))
    workload: Mapped[str] = mapped_column(String(128), default="")
    argv: Mapped[list[str]] = mapped_column(JSON, default=list)
    batch_size: Mapped[int] = mapped_column(Integer, default=0)
    priority: Mapped[float] = mapped_column(Float, default=1.0)
    allowed_gpu_types: Mapped[list[str]] = mapped_column(JSON, default=list)
    preemptible: Mapped[bool] = mapped_column(Boolean, default=True)
    shareable: Mapped[bool] = mapped_column(Boolean, default=False)
    forkable: Mapped[bool] = mapped_column(Boolean, default=False)
    env: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    workdir: Mapped[str] = mapped_column(Text, default="")
    checkpoint_dir: Mapped[str] = mapped_column(Text, default="")
    job_type: Mapped[str] = mapped_column(String(255), default="")
    gpu_memory_bytes: Mapped[int] = mapped_column(default=0)
    # NULL means the default retry limit.
    max_retries: Mapped[int | None] = mapped_column(Integer, default=None)
    output: Mapped[str] = mapped_column(Text, default="")
    error: Mapped[str] = mapped_column(Text, default="")
    # Run time allowed in seconds, summed over attempts; 0 means none.
    time_limit_s: Mapped[int] = mapped_column(default=0)
    # Job arrays: the element's array (its first element's id), index and running cap.
    array_spec: Mapped[str] = mapped_column(Text, default="")
    array_job_id: Mapped[int | None] = mapped_column(BigInteger, default=None, index=True)
    array_index: Mapped[int | None] = mapped_column(Integer, default=None)
    array_max_running: Mapped[int] = mapped_column(Integer, default=0)
    # Dependencies as [[kind, job id], ...]; read for every waiting job each round.
    dependencies: Mapped[list[list[Any]]] = mapped_column(JSON, default=list)
    # Webhook for the job's end; empty: the owner's default. Job states that notify; empty:
    # the default set.
    notify_url: Mapped[str] = mapped_column(Text, default="")
    notify_on: Mapped[list[str]] = mapped_column(JSON, default=list)
    # Not even the owner's default webhook: the job asked for no notification at all.
    no_notify: Mapped[bool] = mapped_column(Boolean, default=False)
    # The warning signal before a stop (sbatch --signal) and how long before; 0: none.
    warn_signal: Mapped[int] = mapped_column(Integer, default=0)
    warn_before_s: Mapped[int] = mapped_column(Integer, default=0)
    # An interactive session (hctl run --pty): its command runs under a terminal.
    interactive: Mapped[bool] = mapped_column(Boolean, default=False)
    # Life.
    state: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    iterations_done: Mapped[int] = mapped_column(default=0)
    checkpoint_iterations: Mapped[int] = mapped_column(default=0)
    attained_service: Mapped[float] = mapped_column(Float, default=0.0)
    retries: Mapped[int] = mapped_column(Integer, default=0)
    exit_code: Mapped[int | None] = mapped_column(Integer, default=None)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    migrations: Mapped[int] = mapped_column(Integer, default=0)
    # Set by the first progress report: the program uses the runtime helper. A script that
    # never reports is pinned where it started, like an opaque command.
    reports_progress: Mapped[bool] = mapped_column(Boolean, default=False)
    # Seconds from a placement to the job's first progress there, smoothed over placements
    # (what a move costs it); None until measured.
    restart_s: Mapped[float | None] = mapped_column(Float, default=None)
    # The last line a failed attempt's process wrote to standard error: the job's own
    # output, so it is kept apart from the reason every user may read.
    failure_output: Mapped[str] = mapped_column(Text, default="", server_default="")
    # Who holds the job back from scheduling (hctl hold, submit --hold); empty: nobody.
    held_by: Mapped[str] = mapped_column(String(64), default="", server_default="")
    # Times it was requeued, and its run time before the last requeue: its time limit
    # counts only the run time after it, as each Slurm requeue starts a new run.
    requeues: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    requeued_run_s: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    submitted_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    version: Mapped[int] = mapped_column(Integer, nullable=False)

    __mapper_args__ = {"version_id_col": version}  # noqa: RUF012


class TaskRow(Base):
    __tablename__ = "tasks"
    __table_args__ = (
        UniqueConstraint("job_id", "task_index", "lease", name="uq_tasks_job_index_lease"),
        Index("ix_tasks_node_state", "node_name", "state"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    task_index: Mapped[int] = mapped_column(Integer)
    node_name: Mapped[str] = mapped_column(ForeignKey("nodes.name", ondelete="CASCADE"))
    lease: Mapped[int] = mapped_column(index=True)
    gpu_indices: Mapped[list[int]] = mapped_column(JSON, default=list)
    gpu_type: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16), index=True)
    rank_offset: Mapped[int] = mapped_column(Integer, default=0)
    local_batch_sizes: Mapped[list[int]] = mapped_column(JSON, default=list)
    accumulation_steps: Mapped[int] = mapped_column(Integer, default=1)
    # HadarE copies: the job runs as num_copies independent groups; this task is in copy_index.
    num_copies: Mapped[int] = mapped_column(Integer, default=1)
    copy_index: Mapped[int] = mapped_column(Integer, default=0)
    shared_with_job_id: Mapped[int] = mapped_column(default=0)
    round: Mapped[int] = mapped_column(default=0)
    iteration_budget: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    acknowledged_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    exit_kind: Mapped[str | None] = mapped_column(String(16), default=None)
    exit_code: Mapped[int | None] = mapped_column(Integer, default=None)


class UsageRow(Base):
    """One ended attempt of a job on one node, kept for accounting.

    The user and job id are copied, not referenced, so the record outlives any clean-up of
    jobs and tasks.
    """

    __tablename__ = "usage_records"
    __table_args__ = (Index("ix_usage_records_user_ended", "user", "ended_at"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    task_id: Mapped[int] = mapped_column(unique=True)
    job_id: Mapped[int] = mapped_column(index=True)
    user: Mapped[str] = mapped_column(String(64))
    node_name: Mapped[str] = mapped_column(String(255))
    lease: Mapped[int] = mapped_column()
    gpu_type: Mapped[str] = mapped_column(String(64))
    num_gpus: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column()
    ended_at: Mapped[datetime] = mapped_column(index=True)
    gpu_seconds: Mapped[float] = mapped_column(Float)
    end_state: Mapped[str] = mapped_column(String(16))
    exit_kind: Mapped[str | None] = mapped_column(String(16), default=None)
    exit_code: Mapped[int | None] = mapped_column(Integer, default=None)


class NotifyDefaultRow(Base):
    """A user's own webhook for jobs that name none."""

    __tablename__ = "notify_defaults"

    user: Mapped[str] = mapped_column(String(64), primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    on_states: Mapped[list[str]] = mapped_column(JSON, default=list)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class NotificationRow(Base):
    """The outbox: one webhook call owed for a job's end, inserted in the transaction that
    ends the job, so a crash can delay it but not lose it."""

    __tablename__ = "notifications"
    __table_args__ = (Index("ix_notifications_status_next", "status", "next_attempt_at"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    user: Mapped[str] = mapped_column(String(64))
    url: Mapped[str] = mapped_column(Text)
    job_state: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    next_attempt_at: Mapped[datetime | None] = mapped_column(default=None)
    delivered_at: Mapped[datetime | None] = mapped_column(default=None)
    last_error: Mapped[str] = mapped_column(Text, default="")
    # Every attempt: [{"at": ISO time, "status_code": int, "error": str}], oldest first.
    history: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)


class RoundRow(Base):
    __tablename__ = "rounds"

    number: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    policy: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column()
    duration_s: Mapped[float] = mapped_column(Float, default=0.0)
    plan: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    actions: Mapped[int] = mapped_column(Integer, default=0)
    dispatch_failures: Mapped[int] = mapped_column(Integer, default=0)


class JobEventRow(Base):
    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    from_state: Mapped[str] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text, default="")
    round: Mapped[int] = mapped_column(default=0)


class ThroughputRow(Base):
    __tablename__ = "throughputs"

    job_type: Mapped[str] = mapped_column(String(255), primary_key=True)
    gpu_type: Mapped[str] = mapped_column(String(64), primary_key=True)
    num_gpus: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    iterations_per_s: Mapped[float] = mapped_column(Float)
    count: Mapped[int] = mapped_column(Integer, default=0)
    source: Mapped[str] = mapped_column(String(16), default="measured")
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class IdempotencyKeyRow(Base):
    __tablename__ = "idempotency_keys"
    __table_args__ = (ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),)

    user: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    job_id: Mapped[int] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Digest of the spec submitted with the key, so that the key reused for another spec
    # is refused rather than answered with a job that is not what was asked for. NULL for
    # keys stored before digests were kept: those match any spec.
    spec_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)


class CounterRow(Base):
    """Named monotonic counters (the lease fencing token, round numbers)."""

    __tablename__ = "counters"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[int] = mapped_column(default=0)


class PolicyMemoryRow(Base):
    """What a scheduling policy learned and must keep across restarts (a-srpt's completed
    jobs), as the policy exports it: plain JSON, one row per policy name."""

    __tablename__ = "policy_memory"

    policy: Mapped[str] = mapped_column(String(64), primary_key=True)
    memory: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class CompletionNoticeRow(Base):
    """A job that completed and that the scheduling policy has not been told about yet.

    Written in the same transaction as the job's move to COMPLETED and removed in the same
    transaction as the policy's memory that learned from it, so that each completion is
    learned exactly once, across crashes and restarts."""

    __tablename__ = "completion_notices"

    job_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"),
        ForeignKey("jobs.id", ondelete="CASCADE"),
        primary_key=True,
        autoincrement=False,
    )
    completed_at: Mapped[datetime] = mapped_column()


class MasterLeaseRow(Base):
    """The one row that says which master is active: the holder of an unexpired lease.

    ``epoch`` counts masters' terms: every acquisition adds one, so a worker that has seen
    a newer term's orders can refuse an older master's."""

    __tablename__ = "master_lease"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    holder: Mapped[str] = mapped_column(String(255), default="")
    address: Mapped[str] = mapped_column(String(255), default="")
    epoch: Mapped[int] = mapped_column(default=0)
    acquired_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(default=utcnow)
