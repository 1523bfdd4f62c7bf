"""idempotency_keys.spec_digest: the spec a key was first used with

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.migration_ops import drop_columns

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Unknown for keys already stored: they keep matching any spec, as they did.
    op.add_column("idempotency_keys", sa.Column("spec_digest", sa.String(length=64), nullable=True))


def downgrade() -> None:
    drop_columns("idempotency_keys", "spec_digest")
