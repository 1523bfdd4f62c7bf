"""jobs.failure_output: the last line a failed attempt's process wrote to standard error

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 09:00:00.000000

It used to be part of the job's reason, which every user of the cluster may read; it is the
job's own output, which only its owner and admins may.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.migration_ops import drop_columns

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("failure_output", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    drop_columns("jobs", "failure_output")
