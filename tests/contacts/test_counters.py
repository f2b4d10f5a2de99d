"""Exact totals from the trigger-kept counters (app/db/counters.py): whole lists and per tag,
through the API and after bulk statements, and on PostgreSQL with concurrent writers of one
organization that never wait for each other."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.counters import FOLD_AFTER
from app.db.engine import create_engine
from app.organizations.service import create_organization
from tests.conftest import GRAPHQL, Tenant, fresh_database

CONTACTS = "/api/v1/contacts"


async def _totals(client: httpx.AsyncClient, tenant: Tenant, **query: str) -> int:
    response = await client.get(CONTACTS, params={"limit": 1, **query}, headers=tenant.headers)
    assert response.status_code == 200, response.text
    total: int = response.json()["total_count"]
    return total


async def _exact(connection: AsyncConnection, organization_id: str, tag: str | None) -> int:
    """The truth, counted from the rows."""
    rows = await connection.execute(
        text("SELECT tags FROM contacts WHERE organization_id = :org"), {"org": organization_id}
    )
    tags = [row[0] if isinstance(row[0], list) else json.loads(row[0]) for row in rows]
    return sum(1 for labels in tags if tag is None or tag in labels)


def _series_insert(dialect: str, count: int) -> str:
    """One INSERT … SELECT of `count` contacts: every 10th `lead`, every 100th also `vip`."""
    tags = (
        'CASE WHEN i % 100 = 0 THEN \'["vip", "lead"]\' WHEN i % 10 = 0 THEN \'["lead"]\' '
        "ELSE '[]' END"
    )
    if dialect == "postgresql":
        return (
            "INSERT INTO contacts (id, organization_id, phone_number, name, tags, created_at, "
            f"updated_at) SELECT gen_random_uuid()::text, :org, '+1415' || lpad(i::text, 7, '0'), "
            f"'Bulk ' || i, ({tags})::jsonb, now(), now() FROM generate_series(1, {count}) AS i"
        )
    return (
        f"WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {count}) "
        "INSERT INTO contacts (id, organization_id, phone_number, name, tags, created_at, "
        "updated_at) SELECT lower(hex(randomblob(16))), :org, '+1415' || printf('%07d', i), "
        f"'Bulk ' || i, {tags}, datetime('now'), datetime('now') FROM s"
    )


async def test_totals_stay_exact_through_api_writes_per_tag(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, connection: AsyncConnection
) -> None:
    made = []
    for index, tags in enumerate([["vip"], ["vip", "lead"], ["lead"], [], ["vip"]]):
        response = await client.post(
            CONTACTS,
            json={"phone_number": f"+1415555010{index}", "name": f"Ada {index}", "tags": tags},
            headers=acme.headers,
        )
        assert response.status_code == 200, response.text
        made.append(response.json()["id"])
    # Another tenant's tagged contact counts only there.
    response = await client.post(
        CONTACTS,
        json={"phone_number": "+14155550199", "name": "Grace", "tags": ["vip"]},
        headers=globex.headers,
    )
    assert response.status_code == 200
    assert await _totals(client, acme) == 5
    assert await _totals(client, acme, tag="vip") == 3
    assert await _totals(client, acme, tag="lead") == 2
    assert await _totals(client, acme, tag="nobody") == 0
    assert await _totals(client, globex, tag="vip") == 1

    # Retagging moves the per-tag counts; the whole count stays.
    response = await client.put(
        f"{CONTACTS}/{made[0]}", json={"tags": ["lead", "b2b"]}, headers=acme.headers
    )
    assert response.status_code == 200, response.text
    response = await client.put(f"{CONTACTS}/{made[1]}", json={"notes": "x"}, headers=acme.headers)
    assert response.status_code == 200
    assert await _totals(client, acme) == 5
    assert await _totals(client, acme, tag="vip") == 2
    assert await _totals(client, acme, tag="lead") == 3
    assert await _totals(client, acme, tag="b2b") == 1

    response = await client.delete(f"{CONTACTS}/{made[1]}", headers=acme.headers)
    assert response.status_code == 204
    for tag in (None, "vip", "lead", "b2b"):
        expected = await _exact(connection, acme.organization_id, tag)
        assert await _totals(client, acme, **({"tag": tag} if tag else {})) == expected

    # GraphQL reads the same count.
    body = (
        await client.post(
            GRAPHQL,
            json={"query": '{ contacts(first: 1, tag: "lead") { totalCount } }'},
            headers=acme.headers,
        )
    ).json()
    assert body["data"]["contacts"]["totalCount"] == await _exact(
        connection, acme.organization_id, "lead"
    )


async def test_bulk_statements_keep_totals_exact(
    client: httpx.AsyncClient, acme: Tenant, connection: AsyncConnection, dialect: str
) -> None:
    await connection.execute(text(_series_insert(dialect, 3000)), {"org": acme.organization_id})
    assert await _totals(client, acme) == 3000
    assert await _totals(client, acme, tag="lead") == 300
    assert await _totals(client, acme, tag="vip") == 30
    # One statement deleting a third of them, tagged and untagged alike.
    await connection.execute(
        text("DELETE FROM contacts WHERE organization_id = :org AND name LIKE 'Bulk %0'"),
        {"org": acme.organization_id},
    )
    await connection.execute(
        text("DELETE FROM contacts WHERE organization_id = :org AND name LIKE 'Bulk %7'"),
        {"org": acme.organization_id},
    )
    for tag in (None, "vip", "lead"):
        expected = await _exact(connection, acme.organization_id, tag)
        assert await _totals(client, acme, **({"tag": tag} if tag else {})) == expected
    assert await _totals(client, acme, tag="lead") == 0
    assert await _totals(client, acme) == 3000 - 300 - 300


# --- PostgreSQL: committed transactions on their own connections ----------------------------


@pytest.fixture(scope="module")
def committed_pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fresh_database("postgresql", tmp_path_factory.mktemp("counters"), "sb_counters") as url:
        yield url


@pytest.fixture
async def pg_engine(committed_pg: str) -> Any:
    engine = create_engine(committed_pg, pool_size=12)
    yield engine
    await engine.dispose()


async def _organization(engine: AsyncEngine) -> str:
    from sqlalchemy.ext.asyncio import async_sessionmaker

    async with async_sessionmaker(engine)() as session:
        organization_id = (await create_organization(session, "Counted")).id
        await session.commit()
        return organization_id


async def _counter_state(engine: AsyncEngine, org: str, label: str) -> tuple[int, int, int]:
    """(sum of the counter rows, how many rows, the truth from count(*))."""
    async with engine.connect() as connection:
        summed, rows = (
            await connection.execute(
                text(
                    "SELECT coalesce(sum(count), 0), count(*) FROM resource_counters "
                    "WHERE organization_id = :org AND resource = 'contacts' AND label = :label"
                ),
                {"org": org, "label": label},
            )
        ).one()
        truth = await connection.scalar(
            text(
                "SELECT count(*) FROM contacts WHERE organization_id = :org "
                "AND (:label = '' OR tags @> jsonb_build_array(CAST(:label AS text)))"
            ),
            {"org": org, "label": label},
        )
    return int(summed), int(rows), int(truth or 0)


def _one_contact(index: int, tags: str = '["lead"]') -> str:
    return (
        "INSERT INTO contacts (id, organization_id, phone_number, name, tags, created_at, "
        f"updated_at) VALUES (gen_random_uuid()::text, :org, '+14155551{index:03d}', "
        f"'Writer {index}', '{tags}'::jsonb, now(), now())"
    )


async def test_concurrent_writers_of_one_organization_do_not_wait(pg_engine: AsyncEngine) -> None:
    org = await _organization(pg_engine)
    first = await pg_engine.connect()
    second = await pg_engine.connect()
    try:
        # Both transactions write the organization's counts and stay open; with one counter
        # row per organization the second would wait for the first to commit.
        await first.begin()
        await first.execute(text(_series_insert("postgresql", 500)), {"org": org})
        await second.begin()
        await asyncio.wait_for(second.execute(text(_one_contact(1)), {"org": org}), timeout=10)
        await asyncio.wait_for(
            second.execute(text("DELETE FROM contacts WHERE name = 'Writer 1'")), timeout=10
        )
        await asyncio.wait_for(second.execute(text(_one_contact(2)), {"org": org}), timeout=10)
        await second.commit()
        await first.commit()
    finally:
        await first.close()
        await second.close()
    assert (await _counter_state(pg_engine, org, ""))[::2] == (501, 501)
    assert (await _counter_state(pg_engine, org, "lead"))[::2] == (51, 51)


async def test_many_concurrent_transactions_sum_exactly_and_fold(pg_engine: AsyncEngine) -> None:
    org = await _organization(pg_engine)

    async def writer(offset: int) -> None:
        for index in range(offset, offset + 25):
            async with pg_engine.begin() as connection:
                await connection.execute(text(_one_contact(index)), {"org": org})
                if index % 5 == 0:
                    await connection.execute(
                        text("DELETE FROM contacts WHERE name = :name"),
                        {"name": f"Writer {index}"},
                    )

    await asyncio.gather(*(writer(offset) for offset in range(0, 200, 25)))
    summed, rows, truth = await _counter_state(pg_engine, org, "")
    assert summed == truth == 200 - 40
    # Folded as it went: the total sums a handful of rows, not one per statement (240).
    assert rows <= 2 * FOLD_AFTER + 16
    summed, rows, truth = await _counter_state(pg_engine, org, "lead")
    assert summed == truth == 160
    assert rows <= 2 * FOLD_AFTER + 16


async def test_a_long_transaction_holding_the_fold_lock_blocks_no_writer(
    pg_engine: AsyncEngine,
) -> None:
    org = await _organization(pg_engine)
    for index in range(FOLD_AFTER + 2):  # enough rows that the next write folds
        async with pg_engine.begin() as connection:
            await connection.execute(text(_one_contact(index)), {"org": org})
    holder = await pg_engine.connect()
    try:
        await holder.begin()
        await holder.execute(text(_one_contact(100)), {"org": org})  # folds, keeps the lock
        for index in range(200, 200 + 2 * FOLD_AFTER):
            async with pg_engine.begin() as connection:
                await asyncio.wait_for(
                    connection.execute(text(_one_contact(index)), {"org": org}), timeout=10
                )
        await holder.commit()
    finally:
        await holder.close()
    summed, _rows, truth = await _counter_state(pg_engine, org, "")
    assert summed == truth == FOLD_AFTER + 2 + 1 + 2 * FOLD_AFTER


async def test_a_statement_in_repeatable_read_counts_without_folding(
    pg_engine: AsyncEngine,
) -> None:
    org = await _organization(pg_engine)
    for _round in range(2):
        async with pg_engine.connect() as connection:
            await connection.execute(text("BEGIN ISOLATION LEVEL REPEATABLE READ"))
            for index in range(FOLD_AFTER + 3):
                await connection.execute(text(_one_contact(index)), {"org": org})
            await connection.execute(text("COMMIT"))
    summed, rows, truth = await _counter_state(pg_engine, org, "")
    assert summed == truth == 2 * (FOLD_AFTER + 3)
    assert rows == 2 * (FOLD_AFTER + 3)  # left for a READ COMMITTED writer to fold
    async with pg_engine.begin() as connection:
        await connection.execute(text(_one_contact(999)), {"org": org})
    summed, rows, truth = await _counter_state(pg_engine, org, "")
    assert (summed, rows, truth) == (2 * (FOLD_AFTER + 3) + 1, 1, 2 * (FOLD_AFTER + 3) + 1)


def test_counted_tables_are_migrated_with_their_counts(tmp_path: Path) -> None:
    """0009 rebuilds the counts of rows written under the row-level triggers of 0002-0008
    (per tag too on PostgreSQL)."""
    from app.db.migrate import upgrade

    for backend in ("sqlite", "postgresql"):
        with fresh_database(backend, tmp_path, "sb_counters_up", migrate=False) as url:
            upgrade(url, "0008")
            asyncio.run(_seed_before_0009(url))
            upgrade(url)
            expected = {("", 3), ("vip", 2), ("lead", 1)} if backend == "postgresql" else {("", 3)}
            assert asyncio.run(_read_counts(url)) == expected


async def _seed_before_0009(url: str) -> None:
    engine = create_engine(url, null_pool=True)
    try:
        async with engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO organizations (id, name, created_at, updated_at) "
                    "VALUES ('o1', 'Old', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                )
            )
            for index, tags in enumerate(('["vip"]', '["vip", "lead"]', "[]")):
                await connection.execute(
                    text(
                        "INSERT INTO contacts (id, organization_id, phone_number, name, tags, "
                        "created_at, updated_at) VALUES (:id, 'o1', '+14155550100', 'Old', "
                        ":tags, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                    ),
                    {"id": f"c{index}", "tags": tags},
                )
    finally:
        await engine.dispose()


async def _read_counts(url: str) -> set[tuple[str, int]]:
    engine = create_engine(url, null_pool=True)
    try:
        async with engine.connect() as connection:
            rows = await connection.execute(
                text(
                    "SELECT label, sum(count) FROM resource_counters WHERE organization_id = 'o1' "
                    "AND resource = 'contacts' GROUP BY label"
                )
            )
            return {(row[0], int(row[1])) for row in rows}
    finally:
        await engine.dispose()
