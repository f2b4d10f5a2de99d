"""The models and the migrations agree: autogenerate finds nothing to do, on both backends."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.models import Base


def _sqlite_virtual_tables(sync_connection: Any) -> list[str]:
    if sync_connection.dialect.name != "sqlite":
        return []
    rows = sync_connection.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%'"
    )
    return [row[0] for row in rows]


async def test_autogenerate_finds_no_difference(engine: AsyncEngine) -> None:
    def diff(sync_connection: Any) -> list[Any]:
        unmanaged = _sqlite_virtual_tables(sync_connection)

        def include_name(name: str | None, type_: str, _parent: Any) -> bool:
            # SQLite full-text tables (and their shadow tables) are DDL of the migrations
            # only: the ORM never maps them.
            return not (
                type_ == "table"
                and name is not None
                and any(name == v or name.startswith(f"{v}_") for v in unmanaged)
            )

        context = MigrationContext.configure(
            sync_connection,
            opts={"compare_type": True, "render_as_batch": True, "include_name": include_name},
        )
        return list(compare_metadata(context, Base.metadata))

    async with engine.connect() as connection:
        differences = await connection.run_sync(diff)
    assert differences == []
