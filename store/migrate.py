"""Apply Alembic migrations programmatically (no alembic.ini, independent of the cwd)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from store.database import make_engine, normalize_url

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str, engine: Engine | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # '%' is Alembic's interpolation character; URLs may carry escaped options.
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    if engine is not None:
        config.attributes["engine"] = engine
    return config


def upgrade(url: str, revision: str = "head", *, engine: Engine | None = None) -> None:
    command.upgrade(alembic_config(url, engine), revision)


def downgrade(url: str, revision: str = "base", *, engine: Engine | None = None) -> None:
    command.downgrade(alembic_config(url, engine), revision)


def current(url: str, *, engine: Engine | None = None) -> str | None:
    """The revision the database is at, or None for an empty database."""
    owned = engine is None
    eng = engine or make_engine(url)
    try:
        with eng.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        if owned:
            eng.dispose()


def head() -> str:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    revision = script.get_current_head()
    if revision is None:
        raise RuntimeError("no migrations found")
    return revision
