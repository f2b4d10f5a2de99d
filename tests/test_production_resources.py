"""The resources a real PostgreSQL deployment opens, exercised through the app.

Most tests run inside one rolled-back transaction, which rules out what only a real
deployment has: prepared reads on a driver pool for read-only requests (app/db/prepared.py) and API
key lookups cached per process with revocation by LISTEN/NOTIFY (app/access/cache.py). Here the
app owns its resources on a fresh, committed database, with prepared statements on the driver
(SWITCHBOARD_PREPARED_ON_DRIVER, whatever the environment says), except where a test compares
that path with SQLAlchemy's.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app import main
from app.auth.service import revoke_api_key
from app.contacts.repository import ContactRepository
from app.core.clock import utcnow
from app.db.engine import create_engine, create_sessionmaker
from app.db.migrate import upgrade
from app.engine import providers
from app.kit.collector import YOUNG_GC_THRESHOLDS
from app.kit.pagination import CursorParams
from app.main import create_app
from app.resources import Resources
from tests.conftest import Tenant, TenantFactory, fresh_database, make_settings


@pytest.fixture(scope="module")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fresh_database("postgresql", tmp_path_factory.mktemp("prod"), "sb_prod") as url:
        yield url


@asynccontextmanager
async def committed_sessions(url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Sessions of a plain engine on `url`: what they write is committed for the app."""
    engine = create_engine(url, pool_size=2)
    try:
        yield create_sessionmaker(engine)
    finally:
        await engine.dispose()


@pytest.fixture
async def committed(pg_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    async with committed_sessions(pg_url) as sessions:
        yield sessions


@asynccontextmanager
async def serving(
    pg_url: str, tmp_path: Path, *, prepared_on_driver: bool = True
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    app = create_app(make_settings(pg_url, tmp_path, prepared_on_driver=prepared_on_driver))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sb") as client:
            yield client, app


@pytest.fixture
async def app_client(pg_url: str, tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    async with serving(pg_url, tmp_path) as served:
        yield served


def _auth(tenant: Tenant) -> dict[str, str]:
    return {"Authorization": f"Bearer {tenant.api_key}"}


async def _eventually(check: Any, seconds: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_the_deployment_has_a_read_pool_and_caches_keys(
    app_client: tuple[httpx.AsyncClient, Any],
) -> None:
    _client, app = app_client
    resources: Resources = app.state.resources
    assert resources.read_pool is not None
    assert resources.credential_cache is not None
    assert resources.credential_cache.enabled
    # A serving process collects its young generation less often (app/main.py).
    assert gc.get_threshold() == YOUNG_GC_THRESHOLDS
    async with resources.session(writes=False) as session:
        # ORM queries of read-only work run in autocommit: each statement its own transaction.
        first = (await session.execute(text("SELECT txid_current()"))).scalar_one()
        second = (await session.execute(text("SELECT txid_current()"))).scalar_one()
    assert first != second


@pytest.mark.parametrize("runs_conversations", [True, False])
async def test_a_server_that_runs_conversations_imports_the_llm_sdks_before_freezing_its_heap(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs_conversations: bool
) -> None:
    # Imported after gc.freeze(), the SDKs' objects competed with the first requests for the
    # GIL and filled the young collections the freeze is there to keep empty.
    steps: list[str] = []
    import_all, freeze = providers._import_all, main.tune_for_serving

    def recorded_import() -> None:
        import_all()
        steps.append("SDKs imported")

    def recorded_freeze() -> None:
        steps.append("heap frozen")
        freeze()

    monkeypatch.setattr(providers, "_preload_started", False)
    monkeypatch.setattr(providers, "_import_all", recorded_import)
    monkeypatch.setattr(main, "tune_for_serving", recorded_freeze)
    settings = make_settings(
        pg_url,
        tmp_path,
        voice_serve_streams=runs_conversations,
        db_pool_size=6,
        voice_max_concurrent_calls=4,
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        expected = ["SDKs imported", "heap frozen"] if runs_conversations else ["heap frozen"]
        assert steps == expected
        # A process that holds calls opened a connection per call an organization may hold.
        pool = app.state.resources.engine.pool
        opened = pool.checkedin() + pool.checkedout()
        assert opened == 4 if runs_conversations else opened < 4


async def test_a_sqlite_file_keeps_its_pool_of_connections(tmp_path: Path) -> None:
    # aiosqlite runs each connection on a thread of its own: a pool that closed what it
    # lent past five opened a thread and the file again for every session under load.
    settings = make_settings(f"sqlite+aiosqlite:///{tmp_path / 'pool.db'}", tmp_path)
    await asyncio.to_thread(upgrade, settings.database_url)
    resources = Resources.from_settings(settings, serves_api=False)
    opened: list[object] = []
    event.listen(resources.engine.sync_engine, "connect", lambda *_: opened.append(1))
    try:
        await resources.open_connections(12)
        assert len(opened) == 12
        assert resources.engine.pool.checkedin() == 12

        async def read() -> None:
            async with resources.session(writes=False) as session:
                await session.execute(text("SELECT 1 FROM alembic_version"))
                await asyncio.sleep(0.01)  # all twelve at once

        for _ in range(3):
            await asyncio.gather(*(read() for _ in range(12)))
        assert len(opened) == 12
        assert resources.engine.pool.checkedin() == 12
    finally:
        await resources.aclose()


class StatementsThroughSQLAlchemy:
    """Counts the statements on `table` that went through SQLAlchemy's execution (any engine):
    none of those a prepared statement sends on the driver."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.count = 0

    def __call__(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if f"FROM {self.table}" in statement:
            self.count += 1

    def since(self, before: int) -> int:
        return self.count - before


@pytest.fixture(params=["postgresql", "sqlite"])
async def committed_database(
    request: pytest.FixtureRequest, pg_url: str, tmp_path: Path
) -> AsyncIterator[tuple[str, async_sessionmaker[AsyncSession]]]:
    """A committed database of each backend: PostgreSQL's, or a new SQLite file (where a
    read-only session's reads go to the SQLite read pool, app/db/sqlite_reads.py)."""
    if request.param == "postgresql":
        url = pg_url
    else:
        url = f"sqlite+aiosqlite:///{tmp_path / 'committed.db'}"
        await asyncio.to_thread(upgrade, url)
    async with committed_sessions(url) as sessions:
        yield url, sessions


@pytest.mark.parametrize("on_driver", [True, False], ids=["driver", "sqlalchemy"])
async def test_prepared_statements_return_what_the_plain_orm_returns(
    committed_database: tuple[str, async_sessionmaker[AsyncSession]],
    tmp_path: Path,
    on_driver: bool,
) -> None:
    """Every path of a prepared read (the read pool, a write session's own connection; on the
    driver or, switched off, through SQLAlchemy) against the same statement run by a plain
    ORM session, which never takes the driver path. On SQLite a write session's reads always
    go through SQLAlchemy."""
    url, committed = committed_database
    tenant = await TenantFactory(committed).organization(f"Lent {on_driver}")
    counted = StatementsThroughSQLAlchemy("contacts")
    event.listen(Engine, "before_cursor_execute", counted)
    try:
        async with serving(url, tmp_path, prepared_on_driver=on_driver) as (client, app):
            await create_paged_contacts(client, tenant)
            resources: Resources = app.state.resources
            assert (resources.read_pool is not None) is on_driver
            postgresql = resources.dialect_name == "postgresql"
            await _compare_pages(
                resources,
                committed,
                tenant,
                counted,
                on_driver,
                writes_on_driver=on_driver and postgresql,
            )
            listed = await client.get("/api/v1/contacts?tag=vip&limit=100", headers=_auth(tenant))
            assert listed.json()["total_count"] == 3
            assert {item["tags"][0] for item in listed.json()["data"]} == {"vip"}
            found = await client.get(
                f"/api/v1/contacts/{listed.json()['data'][0]['id']}", headers=_auth(tenant)
            )
            assert found.json()["custom_fields"]["nested"] == {"ok": True}
            # A page after the first through the app (its anchor read; SQLite's OFFSET 0).
            first = await client.get("/api/v1/contacts?limit=3", headers=_auth(tenant))
            after = first.json()["data"][-1]["id"]
            second = await client.get(
                f"/api/v1/contacts?limit=3&starting_after={after}", headers=_auth(tenant)
            )
            assert second.status_code == 200, second.text
            assert (len(second.json()["data"]), second.json()["total_count"]) == (3, 7)
    finally:
        event.remove(Engine, "before_cursor_execute", counted)


async def create_paged_contacts(client: httpx.AsyncClient, tenant: Tenant) -> None:
    """Seven contacts whose pages `_compare_pages` reads: tags, a name with LIKE's wildcards,
    nested custom fields."""
    for index in range(7):
        response = await client.post(
            "/api/v1/contacts",
            headers=_auth(tenant),
            json={
                "phone_number": f"+1415555{index:04d}",
                "name": f"Person {index} 100%_off",
                "tags": ["vip"] if index % 2 else ["new", "x"],
                "custom_fields": {"n": index, "nested": {"ok": True}},
            },
        )
        assert response.status_code == 200, response.text


async def _compare_pages(
    resources: Resources,
    committed: async_sessionmaker[AsyncSession],
    tenant: Tenant,
    counted: StatementsThroughSQLAlchemy,
    on_driver: bool,
    *,
    writes_on_driver: bool | None = None,
) -> None:
    """Each page of a read session and of a write session equals the plain ORM's; which of
    them SQLAlchemy saw says which path they took (a write session on SQLite always goes
    through it: `writes_on_driver=False`)."""
    writes_path = on_driver if writes_on_driver is None else writes_on_driver
    driver_path = {False: on_driver, True: writes_path}
    filters_cases: list[dict[str, Any]] = [
        {"tag": None, "search": None},
        {"tag": "vip", "search": None},
        {"tag": None, "search": "100%_"},
        {"tag": "x", "search": "Person"},
    ]
    for filter_args in filters_cases:
        params = CursorParams(limit=3)
        while True:
            pages = []
            for writes in (False, True):
                before = counted.count
                async with resources.session(writes=writes) as service_session:
                    repository = ContactRepository(service_session, tenant.organization_id)
                    pages.append(
                        await repository.cursor_page(params, *repository.filters(**filter_args))
                    )
                    await service_session.rollback()
                # On the driver, SQLAlchemy never sees the statement; switched off, it does.
                assert (counted.since(before) == 0) is driver_path[writes]
            before = counted.count
            async with committed() as plain_session:
                repository = ContactRepository(plain_session, tenant.organization_id)
                orm = await repository.cursor_page(params, *repository.filters(**filter_args))
            assert counted.since(before) > 0  # the plain ORM session: through SQLAlchemy
            for page in pages:
                assert [tuple(row) for row in page.items] == [tuple(row) for row in orm.items]
                assert (page.has_more, page.total_count) == (orm.has_more, orm.total_count)
                assert all(row.created_at.utcoffset() == timedelta(0) for row in page.items)
            if not orm.has_more:
                break
            params = CursorParams(limit=3, starting_after=orm.items[-1].id)


async def test_a_read_session_is_reused_only_when_its_request_left_it_untouched(
    app_client: tuple[httpx.AsyncClient, Any], committed: async_sessionmaker[AsyncSession]
) -> None:
    client, app = app_client
    tenant = await TenantFactory(committed).organization("Reuse")
    resources: Resources = app.state.resources
    resources.idle_read_sessions.clear()

    async with resources.session(writes=False) as pooled_only:
        await ContactRepository(pooled_only, tenant.organization_id).cursor_page(
            CursorParams(limit=5)
        )
    assert resources.idle_read_sessions == [pooled_only]
    async with resources.session(writes=False) as again:
        assert again is pooled_only  # the next read takes it over, read pool attached
        await ContactRepository(again, tenant.organization_id).cursor_page(CursorParams(limit=5))
    assert resources.idle_read_sessions == [pooled_only]

    # An ORM query, an object loaded, or anything left in `info`: closed and dropped.
    async with resources.session(writes=False) as session:
        await session.execute(text("SELECT 1"))
    assert session is pooled_only
    assert resources.idle_read_sessions == []
    async with resources.session(writes=False) as session:
        session.info["left behind"] = True
    assert resources.idle_read_sessions == []
    async with resources.session(writes=False) as session:
        pass
    assert resources.idle_read_sessions == [session]

    async def failing_request() -> AsyncSession:
        async with resources.session(writes=False) as failing:
            await failing.execute(text("SELECT 1"))
            raise RuntimeError("the request failed")

    with pytest.raises(RuntimeError):
        await failing_request()
    assert resources.idle_read_sessions == []

    # Through the app: reads keep one idle session per concurrent request at most.
    for _ in range(3):
        listed = await client.get("/api/v1/contacts", headers=_auth(tenant))
        assert listed.status_code == 200
    assert len(resources.idle_read_sessions) == 1


async def test_revoking_a_cached_key_takes_effect_at_once(
    app_client: tuple[httpx.AsyncClient, Any], committed: async_sessionmaker[AsyncSession]
) -> None:
    client, _app = app_client
    tenant = await TenantFactory(committed).organization("Revoked")
    for _ in range(3):  # the second and third requests are answered from the cache
        assert (await client.get("/api/v1/contacts", headers=_auth(tenant))).status_code == 200
    async with committed() as session:
        await revoke_api_key(session, None, tenant.key_id)
        await session.commit()

    async def refused() -> bool:
        response = await client.get("/api/v1/contacts", headers=_auth(tenant))
        return response.status_code == 401

    await _eventually(refused, seconds=1.0)
    body = (await client.get("/api/v1/contacts", headers=_auth(tenant))).json()
    assert body["detail"] == "This API key has been revoked"
    graphql = await client.post(
        "/graphql", headers=_auth(tenant), json={"query": "{ contacts { totalCount } }"}
    )
    assert graphql.status_code == 401


async def test_without_the_listener_the_cache_is_bypassed(
    app_client: tuple[httpx.AsyncClient, Any], committed: async_sessionmaker[AsyncSession]
) -> None:
    client, app = app_client
    resources: Resources = app.state.resources
    cache = resources.credential_cache
    assert cache is not None
    tenant = await TenantFactory(committed).organization("Listener")
    assert (await client.get("/api/v1/contacts", headers=_auth(tenant))).status_code == 200
    async with committed() as session:
        # Cut the listening connection: notifications sent now would be lost.
        await session.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE query ILIKE 'LISTEN%' AND datname = current_database()"
            )
        )

    async def disabled() -> bool:
        return not cache.enabled

    await _eventually(disabled)
    async with committed() as session:
        await revoke_api_key(session, None, tenant.key_id)
        await session.commit()
    # No notification can arrive, yet the revoked key is refused: lookups go to the database.
    response = await client.get("/api/v1/contacts", headers=_auth(tenant))
    assert response.status_code == 401

    async def reconnected() -> bool:
        return cache.enabled

    await _eventually(reconnected)


async def test_a_cached_key_still_expires(
    app_client: tuple[httpx.AsyncClient, Any], committed: async_sessionmaker[AsyncSession]
) -> None:
    client, _app = app_client
    factory = TenantFactory(committed)
    tenant = await factory.organization("Expiring")
    short = await factory.key(tenant, ["full_access"], expires_at=utcnow() + timedelta(seconds=1.5))
    assert (await client.get("/api/v1/contacts", headers=_auth(short))).status_code == 200
    await asyncio.sleep(1.6)
    response = await client.get("/api/v1/contacts", headers=_auth(short))
    assert response.status_code == 401
    assert response.json()["detail"] == "This API key has expired"
