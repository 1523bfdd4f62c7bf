"""Migrations build the schema the models describe, and take it down again."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from store import Database
from store.migrate import current, downgrade, head, upgrade
from store.models import Base


def test_upgrade_from_empty_matches_models_and_downgrade_removes_everything(
    database_url: str,
) -> None:
    """Upgrading an empty database reaches head with no drift from the models; downgrading
    to base drops every table; upgrading again works."""
    db = Database(database_url)
    try:
        assert current(db.url, engine=db.engine) is None
        upgrade(db.url, engine=db.engine)
        assert current(db.url, engine=db.engine) == head()
        with db.engine.connect() as connection:
            diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        assert diff == []
        tables = set(inspect(db.engine).get_table_names())
        assert set(Base.metadata.tables) <= tables

        downgrade(db.url, engine=db.engine)
        assert current(db.url, engine=db.engine) is None
        left = set(inspect(db.engine).get_table_names()) - {"alembic_version"}
        assert left == set()

        upgrade(db.url, engine=db.engine)
        assert current(db.url, engine=db.engine) == head()
    finally:
        db.dispose()


def test_upgrade_is_idempotent(db: Database) -> None:
    """Running the upgrade on a database at head changes nothing (master start does this)."""
    upgrade(db.url, engine=db.engine)
    assert current(db.url, engine=db.engine) == head()
