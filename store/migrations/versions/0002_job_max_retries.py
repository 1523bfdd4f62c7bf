"""per-job retry limit

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24 03:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.migration_ops import drop_columns

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # NULL (every existing job) means the default limit, as before this column existed.
    op.add_column("jobs", sa.Column("max_retries", sa.Integer(), nullable=True))


def downgrade() -> None:
    drop_columns("jobs", "max_retries")
