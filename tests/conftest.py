"""Shared fixtures: every API test runs on SQLite and on PostgreSQL.

Migrations run once per backend; each test runs inside one transaction that is rolled back
(the app's sessions join it through savepoints), so tests never see each other's rows.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import redis
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from app.auth.service import create_api_key
from app.config import Settings
from app.db.engine import create_engine
from app.db.migrate import upgrade
from app.kit.ratelimit import MemoryRateLimiter
from app.main import create_app
from app.organizations.service import create_organization, create_user
from app.resources import Resources
from tests.integrations.whatsapp.fake_graph import FakeGraph, running_fake_graph

REQUIRE_SERVICES = os.environ.get("REQUIRE_SERVICES") == "1"


def _worker_redis_url(url: str, worker: str) -> str:
    """Under pytest-xdist each worker flushes a Redis database of its own: worker gwN takes
    TEST_REDIS_URL's database number minus N (15, 14, ... in CI)."""
    index = int(worker.removeprefix("gw"))
    parsed = urlsplit(url)
    base = int(parsed.path.strip("/") or 0)
    if base - index < 1:
        raise RuntimeError(f"TEST_REDIS_URL's database {base} leaves none for worker {worker}")
    return urlunsplit(parsed._replace(path=f"/{base - index}"))


# Set before any test reads it, so fixtures, subprocesses and workers all see the worker's own.
if os.environ.get("TEST_REDIS_URL") and os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["TEST_REDIS_URL"] = _worker_redis_url(
        os.environ["TEST_REDIS_URL"], os.environ["PYTEST_XDIST_WORKER"]
    )
PG_ADMIN_URL = os.environ.get(
    "TEST_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
TEST_SECRET = "test-secret-key-for-hmac-and-jwt-0123456789"
PLATFORM_TOKEN = "EAAGplatform-token-of-the-tests"
GRAPHQL = "/graphql"


def service_unavailable(what: str, error: BaseException) -> None:
    """Skip on a developer machine without the service; fail in CI (REQUIRE_SERVICES=1)."""
    message = f"{what} unavailable: {error!r}"
    if REQUIRE_SERVICES:
        pytest.fail(message + " (REQUIRE_SERVICES=1)")
    pytest.skip(message)


def flushable_redis_url() -> str:
    """TEST_REDIS_URL: the one Redis database these tests may flush."""
    url = os.environ.get("TEST_REDIS_URL")
    if not url or not os.environ.get("TEST_DATABASE_URL"):
        service_unavailable(
            "Redis and PostgreSQL", RuntimeError("TEST_REDIS_URL and TEST_DATABASE_URL not set")
        )
    assert url is not None
    try:
        redis.Redis.from_url(url).ping()
    except Exception as exc:
        service_unavailable("Redis", exc)
    return url


async def _admin_execute(statement: str) -> None:
    import asyncpg

    url = make_url(PG_ADMIN_URL)
    connection = await asyncpg.connect(
        host=url.host,
        port=url.port or 5432,
        user=url.username,
        password=url.password,
        database=url.database,
        timeout=5,
    )
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@contextmanager
def fresh_database(
    backend: str, directory: Path, prefix: str = "sb_test", *, migrate: bool = True
) -> Iterator[str]:
    """A new database of `backend` (migrated unless told not to), dropped afterwards."""
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{directory / f'{prefix}.db'}"
        if migrate:
            upgrade(url)
        yield url
        return
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        asyncio.run(_admin_execute(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        service_unavailable("PostgreSQL", exc)
    url = make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        if migrate:
            upgrade(url)
        yield url
    finally:
        asyncio.run(_admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


# The job-engine tests' variants: (database, broker) — the Redis one on TEST_REDIS_URL.
ENGINE_BACKENDS = [("sqlite", "stub"), ("postgresql", "stub"), ("postgresql", "redis")]


def engine_backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, prefix: str
) -> Iterator[tuple[str, str | None]]:
    """A fresh database of the variant's backend and its Redis URL (None: StubBroker); the
    Redis database is flushed before and after. Use with `yield from` in a module fixture
    parametrised over ENGINE_BACKENDS."""
    database, broker = request.param
    redis_url = None
    if broker == "redis":
        redis_url = os.environ.get("TEST_REDIS_URL")
        if not redis_url:
            service_unavailable("Redis", RuntimeError("TEST_REDIS_URL not set"))
        assert redis_url is not None
        try:
            redis.Redis.from_url(redis_url).flushdb()
        except Exception as exc:
            service_unavailable("Redis", exc)
    with fresh_database(database, tmp_path_factory.mktemp(prefix), f"sb_{prefix}") as url:
        yield url, redis_url
    if redis_url:
        redis.Redis.from_url(redis_url).flushdb()


class _MigratedDatabases(dict[str, str]):
    """Backend → URL of its migrated database, made on first use; dropped with the stack."""

    def __init__(self, stack: ExitStack, tmp_path_factory: pytest.TempPathFactory) -> None:
        super().__init__()
        self._stack = stack
        self._tmp_path_factory = tmp_path_factory

    def __missing__(self, backend: str) -> str:
        directory = self._tmp_path_factory.mktemp("db")
        url = self[backend] = self._stack.enter_context(fresh_database(backend, directory))
        return url


@pytest.fixture(scope="session")
def migrated_databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One migrated database per backend for the whole session.

    Kept apart from the parametrised `database_url`: pytest tears a session fixture down
    whenever its parameter changes, and under pytest-xdist a worker alternates backends
    module by module; this way each backend is migrated once per worker."""
    with ExitStack() as stack:
        yield _MigratedDatabases(stack, tmp_path_factory)


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, migrated_databases: dict[str, str]) -> str:
    """A freshly migrated database of each backend, for the whole session."""
    return migrated_databases[request.param]


@pytest.fixture(scope="session")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, pool_size=5)
    yield engine
    await engine.dispose()


@pytest.fixture
def dialect(engine: AsyncEngine) -> str:
    return engine.dialect.name


@pytest.fixture
async def connection(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    async with engine.connect() as connection:
        transaction = await connection.begin()
        yield connection
        await transaction.rollback()


@pytest.fixture
def sessionmaker(connection: AsyncConnection) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(
        bind=connection,
        join_transaction_mode="create_savepoint",
        expire_on_commit=False,
        autoflush=False,
    )


def make_settings(database_url: str, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "secret_key": TEST_SECRET,
        "rate_limit_per_key": "100000/s",
        "rate_limit_per_org": "100000/s",
        # Tests send bad credentials on purpose; tests/auth/test_failed_credentials.py sets its own.
        "auth_failure_rate_limit_per_address": "100000/s",
        "var_dir": tmp_path / "var",
        "access_log": False,
        "redis_url": None,
        "storage_url": f"file://{tmp_path / 'objects'}",
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="session")
def platform_server() -> Iterator[FakeGraph]:
    """The local Graph API every test's live channels are verified against."""
    with running_fake_graph(PLATFORM_TOKEN) as graph:
        yield graph


@pytest.fixture
def platform(platform_server: FakeGraph) -> FakeGraph:
    """The local Graph API, as new: register the numbers a test's live channels read
    (`platform.add_phone_number(phone_number_id, token=…)`)."""
    platform_server.reset()
    return platform_server


@pytest.fixture
def settings(database_url: str, tmp_path: Path, platform: FakeGraph) -> Settings:
    return make_settings(database_url, tmp_path, graph_api_url=platform.base_url)


def make_resources(
    settings: Settings, sessionmaker: async_sessionmaker[AsyncSession], dialect: str
) -> Resources:
    """The app's resources on the test's transaction, with `settings` of the test's own."""
    return Resources(
        settings=settings,
        sessionmaker=sessionmaker,
        rate_limiter=MemoryRateLimiter(),
        secret_key=TEST_SECRET,
        dialect_name=dialect,
    )


@pytest.fixture
def resources(
    settings: Settings, sessionmaker: async_sessionmaker[AsyncSession], dialect: str
) -> Resources:
    return make_resources(settings, sessionmaker, dialect)


@pytest.fixture
async def client(resources: Resources) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(resources=resources)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client


def client_with(resources: Resources, **settings: Any) -> httpx.AsyncClient:
    """A client of the app on the same data with some settings changed (a fast path on or off,
    whatever the environment says); use it in `async with`."""
    changed = replace(resources, settings=resources.settings.model_copy(update=settings))
    transport = httpx.ASGITransport(app=create_app(resources=changed))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


@dataclass
class Tenant:
    organization_id: str
    api_key: str
    key_id: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


SQLITE_LOCKED_TRIES = 5


async def committed_despite_sqlite_lock(
    sessionmaker: async_sessionmaker[AsyncSession], write: Any
) -> Any:
    """`write(session)` in its own transaction, then commit; tried again when SQLite answers
    "database is locked" at once. A deferred transaction that read before writing cannot wait
    for the lock a running worker holds: SQLite refuses its upgrade instead of waiting."""
    for attempt in range(SQLITE_LOCKED_TRIES):
        try:
            async with sessionmaker() as session:
                result = await write(session)
                await session.commit()
            return result
        except OperationalError as exc:
            if "database is locked" not in str(exc) or attempt == SQLITE_LOCKED_TRIES - 1:
                raise
            await asyncio.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


class TenantFactory:
    """Creates organizations, keys and users through the same services the CLI uses."""

    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self.sessionmaker = sessionmaker

    async def organization(self, name: str = "Acme") -> Tenant:
        async def write(session: AsyncSession) -> Tenant:
            organization = await create_organization(session, name)
            created = await create_api_key(
                session,
                organization.id,
                name="default",
                scopes=["full_access"],
                secret_key=TEST_SECRET,
            )
            return Tenant(organization.id, created.secret, created.key.id)

        return await committed_despite_sqlite_lock(self.sessionmaker, write)

    async def key(
        self,
        tenant: Tenant,
        scopes: list[str],
        *,
        livemode: bool = False,
        expires_at: datetime | None = None,
    ) -> Tenant:
        async def write(session: AsyncSession) -> Tenant:
            created = await create_api_key(
                session,
                tenant.organization_id,
                name="extra",
                scopes=scopes,
                secret_key=TEST_SECRET,
                livemode=livemode,
                expires_at=expires_at,
            )
            return Tenant(tenant.organization_id, created.secret, created.key.id)

        return await committed_despite_sqlite_lock(self.sessionmaker, write)

    async def user(self, tenant: Tenant, email: str, password: str) -> str:
        async with self.sessionmaker() as session:
            user = await create_user(session, tenant.organization_id, email, password)
            await session.commit()
        return user.id


@pytest.fixture
def tenants(sessionmaker: async_sessionmaker[AsyncSession]) -> TenantFactory:
    return TenantFactory(sessionmaker)


@pytest.fixture
async def acme(tenants: TenantFactory) -> Tenant:
    return await tenants.organization("Acme")


@pytest.fixture
async def globex(tenants: TenantFactory) -> Tenant:
    return await tenants.organization("Globex")


async def graphql(
    client: httpx.AsyncClient,
    query: str,
    variables: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    response = await client.post(
        GRAPHQL, json={"query": query, "variables": variables or {}}, headers=headers or {}
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


class StatementCounter:
    """Counts SQL statements sent on the test connection (N+1 detection)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, *_args: Any, **_kwargs: Any) -> None:
        self.count += 1


@pytest.fixture
def sql_counter(connection: AsyncConnection) -> Iterator[StatementCounter]:
    from sqlalchemy import event

    counter = StatementCounter()
    event.listen(connection.sync_connection, "before_cursor_execute", counter)
    yield counter
    event.remove(connection.sync_connection, "before_cursor_execute", counter)


# The modules that run longest (servers and worker processes in subprocesses, the fuzzer),
# first: under pytest-xdist (`make test`) they then start at once on their own workers
# instead of ending the run alone.
_LONGEST_FIRST = ("tests/test_openapi_fuzz.py", "tests/test_cli.py", "tests/voice/")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return next(
            (
                index
                for index, prefix in enumerate(_LONGEST_FIRST)
                if item.nodeid.startswith(prefix)
            ),
            len(_LONGEST_FIRST),
        )

    items.sort(key=rank)
