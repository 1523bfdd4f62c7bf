"""jobs.reports_progress: whether a job's program ever reported progress

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 03:45:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.migration_ops import drop_columns

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Jobs stored before this column are taken as never having reported: a running script
    # among them is pinned until its next progress report (then it is managed again).
    op.add_column(
        "jobs",
        sa.Column("reports_progress", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    drop_columns("jobs", "reports_progress")
