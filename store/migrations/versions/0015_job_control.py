"""jobs.held_by, requeues, requeued_run_s: user holds and requeues (hctl hold/requeue)

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 19:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.migration_ops import drop_columns

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Jobs already stored are neither held nor requeued.
    op.add_column("jobs", sa.Column("held_by", sa.String(64), nullable=False, server_default=""))
    op.add_column("jobs", sa.Column("requeues", sa.Integer(), nullable=False, server_default="0"))
    op.add_column(
        "jobs", sa.Column("requeued_run_s", sa.Float(), nullable=False, server_default="0")
    )


def downgrade() -> None:
    drop_columns("jobs", "held_by", "requeues", "requeued_run_s")
