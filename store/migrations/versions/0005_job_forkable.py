"""jobs.forkable: whether a job may run as several averaged copies

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 04:20:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.migration_ops import drop_columns

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing jobs did not ask to be forked: false, not the old implicit yes.
    op.add_column(
        "jobs", sa.Column("forkable", sa.Boolean(), nullable=False, server_default=sa.false())
    )


def downgrade() -> None:
    drop_columns("jobs", "forkable")
