"""A SQLite file's read pool (app/db/sqlite_reads.py): a read-only session's prepared reads run
on connections of their own, one thread hop each (tests/test_production_resources.py compares
what they return with the ORM's, on both backends).

Most tests run in one rolled-back transaction, where no read pool exists; here the app owns
its resources on a migrated SQLite file, as `make run` does.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.sqlite_reads import SqliteReadPool
from app.engine.knowledge import agent_subject, knowledge_lookup
from app.resources import Resources
from tests.conftest import TenantFactory, fresh_database, make_settings
from tests.knowledge.conftest import BASE, index_all, uploaded
from tests.test_production_resources import (
    StatementsThroughSQLAlchemy,
    _auth,
    committed_sessions,
    serving,
)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[str]:
    with fresh_database("sqlite", tmp_path, "sb_reads") as url:
        yield url


@pytest.fixture
async def committed(sqlite_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    async with committed_sessions(sqlite_url) as sessions:
        yield sessions


@pytest.fixture
def counted() -> Iterator[StatementsThroughSQLAlchemy]:
    counter = StatementsThroughSQLAlchemy("knowledge_chunks")
    event.listen(Engine, "before_cursor_execute", counter)
    yield counter
    event.remove(Engine, "before_cursor_execute", counter)


async def test_a_knowledge_search_on_a_sqlite_file_reads_on_the_read_pool_and_its_tenant_only(
    sqlite_url: str,
    tmp_path: Path,
    committed: async_sessionmaker[AsyncSession],
    counted: StatementsThroughSQLAlchemy,
) -> None:
    factory = TenantFactory(committed)
    acme, globex = await factory.organization("Acme"), await factory.organization("Globex")
    async with serving(sqlite_url, tmp_path) as (client, app):
        resources: Resources = app.state.resources
        hours = await uploaded(client, acme, "hours.txt", b"We open at nine and close at six.")
        await uploaded(client, globex, "theirs.txt", b"Globex opens at noon on Sundays.")
        assert await index_all(resources) == 2

        response = await client.post(
            f"{BASE}/search", json={"query": "when do you open"}, headers=_auth(acme)
        )
        assert response.status_code == 200, response.text
        assert [r["document_id"] for r in response.json()["results"]] == [hours["id"]]
        # What an agent reads while it talks: the same passages, its organization's only.
        before = counted.count
        passages = await knowledge_lookup(
            resources, agent_subject(acme.organization_id, "agent", False), "when do you open"
        )
        assert [p.document_id for p in passages] == [hours["id"]]
        assert (
            await knowledge_lookup(
                resources, agent_subject(globex.organization_id, "agent", False), "nine six"
            )
            == []
        )
        # Its reads (the ranking, the chunks' text) went to the read pool.
        assert counted.since(before) == 0


async def test_the_read_pool_only_reads_and_only_a_file_has_one(
    sqlite_url: str, tmp_path: Path
) -> None:
    url = sqlite_url
    resources = Resources.from_settings(make_settings(url, tmp_path, db_pool_size=3))
    pool = resources.read_pool
    assert isinstance(pool, SqliteReadPool)
    try:
        assert await pool.fetch("SELECT count(*) FROM contacts", []) == [(0,)]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await pool.fetch("DELETE FROM contacts", [])

        async def slow_read() -> None:
            # A recursive count long enough for reads to overlap on the connections' threads.
            await pool.fetch(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000)"
                " SELECT count(*) FROM n",
                [],
            )

        await asyncio.gather(*(slow_read() for _ in range(12)))
        assert 1 < pool.opened <= 3  # overlapping reads spread, within the pool's size
    finally:
        await resources.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await pool.fetch("SELECT 1", [])

    memory = Resources.from_settings(make_settings("sqlite+aiosqlite:///:memory:", tmp_path))
    switched_off = Resources.from_settings(make_settings(url, tmp_path, prepared_on_driver=False))
    try:
        assert memory.read_pool is None
        assert switched_off.read_pool is None
    finally:
        await memory.aclose()
        await switched_off.aclose()
