"""jobs.warn_signal, jobs.warn_before_s: the signal a job is warned with before a stop

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 19:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.migration_ops import drop_columns

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Jobs stored before asked for no warning.
    op.add_column(
        "jobs", sa.Column("warn_signal", sa.Integer(), nullable=False, server_default="0")
    )
    op.add_column(
        "jobs", sa.Column("warn_before_s", sa.Integer(), nullable=False, server_default="0")
    )


def downgrade() -> None:
    drop_columns("jobs", "warn_signal", "warn_before_s")
