"""jobs.restart_s: measured seconds from a placement to the job's first progress there

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 20:20:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.migration_ops import drop_columns

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Unknown for existing jobs: the master's restart_cost_s stands in until measured.
    op.add_column("jobs", sa.Column("restart_s", sa.Float(), nullable=True))


def downgrade() -> None:
    drop_columns("jobs", "restart_s")
