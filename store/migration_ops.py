"""Schema operations the migrations share."""

from __future__ import annotations

from alembic import op


def drop_columns(table: str, *columns: str) -> None:
    """Drop plain columns from ``table`` without rebuilding it.

    Alembic's batch mode rebuilds a SQLite table to drop a column: it copies the rows to a new
    table and drops the old one, and dropping ``jobs`` fires its ON DELETE CASCADE, taking
    every task and event with it. SQLite 3.35+ drops a column that no index or constraint
    names in place, as PostgreSQL does.
    """
    sqlite = op.get_bind().dialect.name == "sqlite"
    for column in columns:
        if sqlite:
            op.execute(f'ALTER TABLE "{table}" DROP COLUMN "{column}"')
        else:
            op.drop_column(table, column)
