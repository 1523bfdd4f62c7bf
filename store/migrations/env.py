"""Alembic environment, configured by store.migrate (not by an alembic.ini)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Engine

from store.database import make_engine
from store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations() -> None:
    engine = config.attributes.get("engine")
    owned = not isinstance(engine, Engine)
    if owned:
        url = config.get_main_option("sqlalchemy.url")
        if not url:
            raise RuntimeError("store.migrate must set sqlalchemy.url")
        engine = make_engine(url)
    assert isinstance(engine, Engine)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                # SQLite alters tables by copying them; batch mode does that for us.
                render_as_batch=connection.dialect.name == "sqlite",
                compare_type=True,
            )
            with context.begin_transaction():
                context.run_migrations()
            connection.commit()
    finally:
        if owned:
            engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported")
run_migrations()
