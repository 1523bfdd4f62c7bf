"""jobs.notify_url/notify_on, notify_defaults and the notifications outbox: webhooks when jobs end

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 20:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.migration_ops import drop_columns

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing jobs asked for no webhook. Plain ADD COLUMN, not batch mode: on SQLite a batch
    # may rebuild jobs, and dropping the old table cascades to its tasks and events.
    op.add_column("jobs", sa.Column("notify_url", sa.Text(), nullable=False, server_default=""))
    op.add_column("jobs", sa.Column("notify_on", sa.JSON(), nullable=False, server_default="[]"))
    op.add_column(
        "jobs", sa.Column("no_notify", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    op.create_table(
        "notify_defaults",
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("on_states", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("user", name=op.f("pk_notify_defaults")),
    )
    op.create_table(
        "notifications",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("job_state", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_notifications_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifications")),
    )
    op.create_index(op.f("ix_notifications_job_id"), "notifications", ["job_id"])
    op.create_index("ix_notifications_status_next", "notifications", ["status", "next_attempt_at"])


def downgrade() -> None:
    op.drop_index("ix_notifications_status_next", table_name="notifications")
    op.drop_index(op.f("ix_notifications_job_id"), table_name="notifications")
    op.drop_table("notifications")
    op.drop_table("notify_defaults")
    drop_columns("jobs", "no_notify", "notify_on", "notify_url")
