"""The models and the migrations agree: autogenerate finds nothing to do, on both backends."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.migrate import unmanaged_tables
from app.db.models import Base


async def test_autogenerate_finds_no_difference(engine: AsyncEngine) -> None:
    def diff(sync_connection: Any) -> list[Any]:
        # The filter env.py applies: SQLite full-text tables (and their shadow tables) are DDL
        # of the migrations only.
        context = MigrationContext.configure(
            sync_connection,
            opts={
                "compare_type": True,
                "render_as_batch": True,
                "include_name": unmanaged_tables(sync_connection),
            },
        )
        return list(compare_metadata(context, Base.metadata))

    async with engine.connect() as connection:
        differences = await connection.run_sync(diff)
    assert differences == []


async def test_only_full_text_tables_are_left_out(engine: AsyncEngine) -> None:
    def left_out(sync_connection: Any) -> list[str]:
        include = unmanaged_tables(sync_connection)
        rows = sync_connection.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table'"
            if sync_connection.dialect.name == "sqlite"
            else "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        )
        return sorted(name for (name,) in rows if not include(name, "table", None))

    async with engine.connect() as connection:
        names = await connection.run_sync(left_out)
    if engine.dialect.name == "postgresql":
        assert names == []
    else:
        assert {"contacts_fts", "contacts_fts_data", "knowledge_chunks_fts"} <= set(names)
        assert all(name.startswith(("contacts_fts", "knowledge_chunks_fts")) for name in names)
