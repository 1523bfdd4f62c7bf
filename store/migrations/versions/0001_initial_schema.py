"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 04:31:09.409141
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "counters",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_counters")),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("num_gpus", sa.Integer(), nullable=False),
        sa.Column("iterations", sa.BigInteger(), nullable=False),
        sa.Column("program_kind", sa.String(length=16), nullable=False),
        sa.Column("workload", sa.String(length=128), nullable=False),
        sa.Column("argv", sa.JSON(), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Float(), nullable=False),
        sa.Column("allowed_gpu_types", sa.JSON(), nullable=False),
        sa.Column("preemptible", sa.Boolean(), nullable=False),
        sa.Column("shareable", sa.Boolean(), nullable=False),
        sa.Column("env", sa.JSON(), nullable=False),
        sa.Column("workdir", sa.Text(), nullable=False),
        sa.Column("checkpoint_dir", sa.Text(), nullable=False),
        sa.Column("job_type", sa.String(length=255), nullable=False),
        sa.Column("gpu_memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("iterations_done", sa.BigInteger(), nullable=False),
        sa.Column("checkpoint_iterations", sa.BigInteger(), nullable=False),
        sa.Column("attained_service", sa.Float(), nullable=False),
        sa.Column("retries", sa.Integer(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("preemptions", sa.Integer(), nullable=False),
        sa.Column("migrations", sa.Integer(), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_jobs_state"), ["state"], unique=False)
        batch_op.create_index(batch_op.f("ix_jobs_user"), ["user"], unique=False)

    op.create_table(
        "nodes",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("address", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("agent_version", sa.String(length=64), nullable=False),
        sa.Column("workloads", sa.JSON(), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_heartbeat", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_nodes")),
    )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_nodes_state"), ["state"], unique=False)

    op.create_table(
        "rounds",
        sa.Column("number", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("policy", sa.String(length=64), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("actions", sa.Integer(), nullable=False),
        sa.Column("dispatch_failures", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("number", name=op.f("pk_rounds")),
    )
    op.create_table(
        "throughputs",
        sa.Column("job_type", sa.String(length=255), nullable=False),
        sa.Column("gpu_type", sa.String(length=64), nullable=False),
        sa.Column("num_gpus", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("iterations_per_s", sa.Float(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job_type", "gpu_type", "num_gpus", name=op.f("pk_throughputs")),
    )
    op.create_table(
        "users",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_users")),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(length=16), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("description", sa.String(length=256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user"], ["users.name"], name=op.f("fk_api_tokens_user_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_tokens_user"), ["user"], unique=False)

    op.create_table(
        "gpus",
        sa.Column("node_name", sa.String(length=255), nullable=False),
        sa.Column("index", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("device_name", sa.String(length=128), nullable=False),
        sa.Column("uuid", sa.String(length=128), nullable=False),
        sa.Column("health", sa.String(length=16), nullable=False),
        sa.Column("utilization", sa.Float(), nullable=False),
        sa.Column("fake", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_name"], ["nodes.name"], name=op.f("fk_gpus_node_name_nodes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("node_name", "index", name=op.f("pk_gpus")),
    )
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gpus_type"), ["type"], unique=False)

    op.create_table(
        "idempotency_keys",
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_idempotency_keys_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("user", "key", name=op.f("pk_idempotency_keys")),
    )
    op.create_table(
        "job_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=False),
        sa.Column("to_state", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("round", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_events_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_events")),
    )
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_events_job_id"), ["job_id"], unique=False)

    op.create_table(
        "tasks",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("task_index", sa.Integer(), nullable=False),
        sa.Column("node_name", sa.String(length=255), nullable=False),
        sa.Column("lease", sa.BigInteger(), nullable=False),
        sa.Column("gpu_indices", sa.JSON(), nullable=False),
        sa.Column("gpu_type", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("rank_offset", sa.Integer(), nullable=False),
        sa.Column("local_batch_sizes", sa.JSON(), nullable=False),
        sa.Column("accumulation_steps", sa.Integer(), nullable=False),
        sa.Column("num_copies", sa.Integer(), nullable=False),
        sa.Column("copy_index", sa.Integer(), nullable=False),
        sa.Column("shared_with_job_id", sa.BigInteger(), nullable=False),
        sa.Column("round", sa.BigInteger(), nullable=False),
        sa.Column("iteration_budget", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("acknowledged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("exit_kind", sa.String(length=16), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_tasks_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["node_name"], ["nodes.name"], name=op.f("fk_tasks_node_name_nodes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
        sa.UniqueConstraint("job_id", "task_index", "lease", name="uq_tasks_job_index_lease"),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tasks_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_tasks_lease"), ["lease"], unique=False)
        batch_op.create_index("ix_tasks_node_state", ["node_name", "state"], unique=False)
        batch_op.create_index(batch_op.f("ix_tasks_state"), ["state"], unique=False)
    # Fencing tokens and round numbers start here and only grow.
    counters = sa.table("counters", sa.column("name", sa.String), sa.column("value", sa.BigInteger))
    op.bulk_insert(counters, [{"name": "lease", "value": 0}, {"name": "round", "value": 0}])


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tasks_state"))
        batch_op.drop_index("ix_tasks_node_state")
        batch_op.drop_index(batch_op.f("ix_tasks_lease"))
        batch_op.drop_index(batch_op.f("ix_tasks_job_id"))

    op.drop_table("tasks")
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_events_job_id"))

    op.drop_table("job_events")
    op.drop_table("idempotency_keys")
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpus_type"))

    op.drop_table("gpus")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_tokens_user"))

    op.drop_table("api_tokens")
    op.drop_table("users")
    op.drop_table("throughputs")
    op.drop_table("rounds")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_nodes_state"))

    op.drop_table("nodes")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_user"))
        batch_op.drop_index(batch_op.f("ix_jobs_state"))

    op.drop_table("jobs")
    op.drop_table("counters")
