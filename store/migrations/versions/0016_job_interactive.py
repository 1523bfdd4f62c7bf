"""jobs.interactive: the job is an interactive session (hctl run --pty)

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 20:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.migration_ops import drop_columns

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Jobs stored before were all batch jobs.
    op.add_column(
        "jobs",
        sa.Column("interactive", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    drop_columns("jobs", "interactive")
