"""master_lease: the active master's lease and its fencing epoch

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 20:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    table = op.create_table(
        "master_lease",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=False),
        sa.Column("address", sa.String(length=255), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_master_lease")),
    )
    # The row exists from the start, already expired: acquiring is always an update of it,
    # which both databases serialize.
    long_ago = datetime(1970, 1, 1, tzinfo=UTC)
    op.bulk_insert(
        table,
        [
            {
                "id": 1,
                "holder": "",
                "address": "",
                "epoch": 0,
                "acquired_at": long_ago,
                "expires_at": long_ago,
            }
        ],
    )


def downgrade() -> None:
    op.drop_table("master_lease")
