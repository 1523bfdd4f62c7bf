"""jobs: array elements (array, array_job_id, array_index, array_max_running) and
dependencies

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 20:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.migration_ops import drop_columns

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("dependencies", "array_max_running", "array_index", "array_job_id", "array_spec")


def upgrade() -> None:
    # Existing jobs belong to no array and wait for nothing.
    op.add_column("jobs", sa.Column("array_spec", sa.Text(), nullable=False, server_default=""))
    op.add_column("jobs", sa.Column("array_job_id", sa.BigInteger(), nullable=True))
    op.add_column("jobs", sa.Column("array_index", sa.Integer(), nullable=True))
    op.add_column(
        "jobs", sa.Column("array_max_running", sa.Integer(), nullable=False, server_default="0")
    )
    op.add_column("jobs", sa.Column("dependencies", sa.JSON(), nullable=False, server_default="[]"))
    op.create_index(op.f("ix_jobs_array_job_id"), "jobs", ["array_job_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_jobs_array_job_id"), table_name="jobs")
    drop_columns("jobs", *_COLUMNS)
