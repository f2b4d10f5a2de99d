"""The models and the migrations agree: autogenerate finds nothing to do, on both backends;
and migrations that reshape data keep every row."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import create_engine
from app.db.migrate import unmanaged_tables, upgrade
from app.tables import Base
from tests.conftest import fresh_database


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


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_numbers_shared_before_keep_every_row_and_the_oldest_holds(
    backend: str, tmp_path: Path
) -> None:
    """0018 over a database where two organizations registered one number (the leak it
    closes): no row is lost (SQLite rebuilds the channels table; its campaigns survive), the
    oldest channel of each number and mode holds it, the others hold nothing."""
    with fresh_database(backend, tmp_path, "sb_mig", migrate=False) as url:
        upgrade(url, "0017")
        asyncio.run(_seed_before_0018(url))
        upgrade(url)
        holders, campaigns = asyncio.run(_after_0018(url))
    assert holders == {
        ("c-a-live", True),
        ("c-b-live", False),
        ("c-c-test", True),
        ("c-d-test", False),
    }
    assert campaigns == 1


async def _seed_before_0018(url: str) -> None:
    engine = create_engine(url, null_pool=True)
    async with engine.begin() as connection:
        for org in ("org-a", "org-b", "org-c", "org-d"):
            await connection.execute(
                text(
                    "INSERT INTO organizations (id, name, created_at, updated_at) "
                    "VALUES (:id, :id, :at, :at)"
                ),
                {"id": org, "at": datetime(2026, 1, 1, tzinfo=UTC)},
            )
        for channel_id, org, livemode, day in (
            ("c-a-live", "org-a", True, 1),
            ("c-b-live", "org-b", True, 2),
            ("c-c-test", "org-c", False, 1),
            ("c-d-test", "org-d", False, 3),
        ):
            await connection.execute(
                text(
                    "INSERT INTO channels (id, organization_id, display_phone_number,"
                    " phone_number_id, business_account_id, livemode, access_token_encrypted,"
                    " created_at, updated_at) VALUES (:id, :org, '+14155550142', '222000222',"
                    " 'waba', :livemode, 'sealed', :at, :at)"
                ),
                {
                    "id": channel_id,
                    "org": org,
                    "livemode": livemode,
                    "at": datetime(2026, 1, day, tzinfo=UTC),
                },
            )
        await connection.execute(
            text(
                "INSERT INTO campaigns (id, organization_id, name, chat_phone_number_id,"
                " audience_type, status, total_contacts_count, sent_count, delivered_count,"
                " read_count, failed_count, livemode, created_at, updated_at) VALUES ('k1',"
                " 'org-b', 'Spring', 'c-b-live', 'all', 'draft', 0, 0, 0, 0, 0, true, :at, :at)"
            ),
            {"at": datetime(2026, 1, 2, tzinfo=UTC)},
        )
    await engine.dispose()


async def _after_0018(url: str) -> tuple[set[tuple[str, bool]], int]:
    engine = create_engine(url, null_pool=True)
    async with engine.connect() as connection:
        rows = await connection.execute(text("SELECT id, holds_number FROM channels"))
        holders = {(row[0], bool(row[1])) for row in rows}
        campaigns = await connection.scalar(text("SELECT count(*) FROM campaigns"))
    await engine.dispose()
    return holders, int(campaigns or 0)
