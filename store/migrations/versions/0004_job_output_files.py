"""job output and error files

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 03:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.migration_ops import drop_columns

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("output", sa.Text(), nullable=False, server_default=""))
    op.add_column("jobs", sa.Column("error", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    drop_columns("jobs", "error", "output")
