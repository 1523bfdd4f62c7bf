"""jobs.time_limit_s and usage_records: time limits and per-attempt accounting

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 20:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.migration_ops import drop_columns

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing jobs had no limit.
    op.add_column(
        "jobs", sa.Column("time_limit_s", sa.BigInteger(), nullable=False, server_default="0")
    )
    op.create_table(
        "usage_records",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("task_id", sa.BigInteger(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("node_name", sa.String(length=255), nullable=False),
        sa.Column("lease", sa.BigInteger(), nullable=False),
        sa.Column("gpu_type", sa.String(length=64), nullable=False),
        sa.Column("num_gpus", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("gpu_seconds", sa.Float(), nullable=False),
        sa.Column("end_state", sa.String(length=16), nullable=False),
        sa.Column("exit_kind", sa.String(length=16), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_records")),
        sa.UniqueConstraint("task_id", name=op.f("uq_usage_records_task_id")),
    )
    op.create_index(op.f("ix_usage_records_job_id"), "usage_records", ["job_id"])
    op.create_index(op.f("ix_usage_records_ended_at"), "usage_records", ["ended_at"])
    op.create_index("ix_usage_records_user_ended", "usage_records", ["user", "ended_at"])
    # Attempts that ended before accounting existed: their tasks still say who ran where
    # and for how long, so the history starts complete.
    op.execute(
        """
        INSERT INTO usage_records (task_id, job_id, "user", node_name, lease, gpu_type,
            num_gpus, started_at, ended_at, gpu_seconds, end_state, exit_kind, exit_code)
        SELECT t.id, t.job_id, j."user", t.node_name, t.lease, t.gpu_type, 0,
            COALESCE(t.acknowledged_at, t.created_at), t.finished_at, 0.0, t.state,
            t.exit_kind, t.exit_code
        FROM tasks t JOIN jobs j ON j.id = t.job_id
        WHERE t.state IN ('EXITED', 'LOST') AND t.finished_at IS NOT NULL
            AND (t.acknowledged_at IS NOT NULL OR t.exit_kind IS NOT NULL)
        """
    )
    _fill_backfilled_gpu_seconds()


def _fill_backfilled_gpu_seconds() -> None:
    # GPU counts live in a JSON list and durations need date arithmetic, which differ
    # between SQLite and PostgreSQL: finish the back-filled rows in Python.
    bind = op.get_bind()
    tasks = sa.table("tasks", sa.column("id"), sa.column("gpu_indices", sa.JSON()))
    usage = sa.table(
        "usage_records",
        sa.column("id"),
        sa.column("task_id"),
        sa.column("num_gpus"),
        sa.column("started_at", sa.DateTime(timezone=True)),
        sa.column("ended_at", sa.DateTime(timezone=True)),
        sa.column("gpu_seconds"),
    )
    rows = bind.execute(
        sa.select(usage.c.id, usage.c.started_at, usage.c.ended_at, tasks.c.gpu_indices).join(
            tasks, tasks.c.id == usage.c.task_id
        )
    ).all()
    for row_id, started, ended, indices in rows:
        gpus = len(indices or ())
        seconds = max(0.0, (ended - started).total_seconds())
        bind.execute(
            usage.update()
            .where(usage.c.id == row_id)
            .values(num_gpus=gpus, gpu_seconds=seconds * gpus)
        )


def downgrade() -> None:
    op.drop_index("ix_usage_records_user_ended", table_name="usage_records")
    op.drop_index(op.f("ix_usage_records_ended_at"), table_name="usage_records")
    op.drop_index(op.f("ix_usage_records_job_id"), table_name="usage_records")
    op.drop_table("usage_records")
    drop_columns("jobs", "time_limit_s")
