"""Alembic environment: async engine, batch mode on SQLite, our metadata."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from app.db.engine import create_engine
from app.db.migrate import unmanaged_tables
from app.tables import Base

config = context.config
target_metadata = Base.metadata


def _configure(connection: Connection | None = None, url: str | None = None) -> None:
    context.configure(
        connection=connection,
        url=url,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
        literal_binds=connection is None,
        # Autogenerate would offer to drop SQLite's full-text tables, which no model maps.
        include_name=unmanaged_tables(connection) if connection is not None else None,
    )


def _run_sync(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        # Batch mode rebuilds a SQLite table by dropping the old one, and with foreign keys on
        # that drop first deletes its rows, cascading into every table that references it.
        # Off for the run, on the driver's connection before any transaction begins (inside
        # one SQLite ignores it); the references are checked before the run commits instead.
        cursor = connection.connection.cursor()
        cursor.execute("PRAGMA foreign_keys=OFF")
        cursor.close()
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()
        if sqlite:
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise RuntimeError(f"migrations left rows with dangling references: {broken[:5]}")


async def _run_async(url: str) -> None:
    engine = create_engine(url, null_pool=True)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_sync)
            await connection.commit()
    finally:
        await engine.dispose()


url = config.attributes.get("database_url") or config.get_main_option("sqlalchemy.url")
if context.is_offline_mode():
    _configure(url=url)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_async(url))
