"""The models and the migrations agree: autogenerate finds nothing to do, on both backends."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.models import Base


async def test_autogenerate_finds_no_difference(engine: AsyncEngine) -> None:
    def diff(sync_connection: Any) -> list[Any]:
        context = MigrationContext.configure(
            sync_connection, opts={"compare_type": True, "render_as_batch": True}
        )
        return list(compare_metadata(context, Base.metadata))

    async with engine.connect() as connection:
        differences = await connection.run_sync(diff)
    assert differences == []
