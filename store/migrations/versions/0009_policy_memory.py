"""policy_memory and completion_notices: what a policy learned survives a restart

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 19:45:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "policy_memory",
        sa.Column("policy", sa.String(64), nullable=False),
        sa.Column("memory", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("policy", name=op.f("pk_policy_memory")),
    )
    # Jobs completed before this revision are not told: their policy never heard of them
    # while it ran either.
    op.create_table(
        "completion_notices",
        sa.Column(
            "job_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=False,
            nullable=False,
        ),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_completion_notices_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_completion_notices")),
    )


def downgrade() -> None:
    op.drop_table("completion_notices")
    op.drop_table("policy_memory")
