"""Process-wide resources: engine, sessions, Redis, rate limiter. Built once per process."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar, cast

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.access.cache import CredentialCache, RevocationListener
from app.access.failures import FailedAuthentications
from app.config import Settings
from app.db.engine import create_engine, create_sessionmaker, sqlite_file
from app.db.prepared import ON_DRIVER, READ_POOL, READS_ONLY, ReadPool
from app.db.runner import DriverPool, driver_dsn
from app.db.sqlite_reads import SqliteReadPool
from app.kit.event_stream import (
    LOCAL_EVENT_STREAM,
    EventStream,
    RedisEventStream,
    SubscriptionQuota,
)
from app.kit.ratelimit import RateLimiter, build_rate_limiter
from app.kit.redis_clients import command_client, listening_client
from app.kit.send_governor import LocalSendGovernor, SendGovernor, build_send_governor

T = TypeVar("T")
# As long as SQLite's own busy timeout (app/db/engine.py).
SQLITE_GATE_WAIT_SECONDS = 5.0


@dataclass
class Resources:
    settings: Settings
    sessionmaker: async_sessionmaker[AsyncSession]
    rate_limiter: RateLimiter
    secret_key: str
    dialect_name: str
    engine: AsyncEngine | None = None
    redis: Redis | None = None
    # Sessions of read-only work. On PostgreSQL their ORM queries run in autocommit (no
    # BEGIN/COMMIT round trips); tests, inside one rolled-back transaction, read as they write.
    read_sessionmaker: async_sessionmaker[AsyncSession] | None = None
    # Driver connections for prepared reads of read-only requests on PostgreSQL (`start`).
    read_pool: ReadPool | None = None
    # API key lookups kept per process while revocations can reach it (app/access/cache.py).
    credential_cache: CredentialCache | None = None
    revocation_listener: RevocationListener | None = None
    # Live events for GraphQL subscriptions (app/kit/event_stream.py), and how many of them each
    # organization holds open in this process.
    event_stream: EventStream = LOCAL_EVENT_STREAM
    subscriptions: SubscriptionQuota = field(init=False)
    # Paces every send of a channel, one budget across processes (app/kit/send_governor.py).
    send_governor: SendGovernor = field(default_factory=LocalSendGovernor)
    # The subscriptions' pub/sub client: no read timeout (app/kit/redis_clients.py).
    listening_redis: Redis | None = None
    # Client addresses refused for failing credential checks (app/access/failures.py).
    failed_authentications: FailedAuthentications = field(default_factory=FailedAuthentications)
    # Read sessions left untouched by their request (everything went through the read pool),
    # handed to the next read instead of building a new one (_ReadSession).
    idle_read_sessions: list[AsyncSession] = field(default_factory=list)
    # SQLite: this process's writers queue here, first come first served, for the database's
    # one write lock (`_write_session`); one per event loop that writes.
    write_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    # Objects bound to one event loop (HTTP clients and their kept-alive connections), made
    # on first use by `per_loop` and closed with the resources.
    loop_objects: weakref.WeakKeyDictionary[
        asyncio.AbstractEventLoop, dict[Callable[[Settings], Any], Any]
    ] = field(default_factory=weakref.WeakKeyDictionary)

    @property
    def prepared_on_driver(self) -> bool:
        """Whether the sessions opened here send prepared statements on the asyncpg driver."""
        return self.settings.prepared_on_driver and self.dialect_name == "postgresql"

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        sessionmaker: async_sessionmaker[AsyncSession] | None = None,
        dialect_name: str | None = None,
        serves_api: bool = True,
    ) -> Resources:
        """Open what the settings name; tests pass their own transaction-bound sessionmaker.

        Workers (`serves_api=False`) need no PostgreSQL read pool and no API key cache.
        """
        engine = read_sessionmaker = None
        if sessionmaker is None:
            engine = create_engine(settings.database_url, pool_size=settings.db_pool_size)
            sessionmaker = create_sessionmaker(engine)
            dialect_name = engine.dialect.name
            if dialect_name == "postgresql":
                read_sessionmaker = create_sessionmaker(
                    engine.execution_options(isolation_level="AUTOCOMMIT")
                )
        redis, listening_redis = command_client(settings), listening_client(settings)
        event_stream: EventStream = LOCAL_EVENT_STREAM
        if redis is not None:
            event_stream = RedisEventStream(redis, listening_redis)
        read_pool: ReadPool | None = None
        credential_cache = revocation_listener = None
        if (
            engine is not None
            and dialect_name == "sqlite"
            and settings.prepared_on_driver
            and sqlite_file(settings.database_url) is not None
        ):
            # Every process: a voice process's knowledge lookups read through it too.
            read_pool = SqliteReadPool(settings.database_url, engine.dialect, settings.db_pool_size)
        if serves_api and engine is not None and engine.dialect.driver == "asyncpg":
            if settings.prepared_on_driver:
                read_pool = DriverPool(settings.database_url, engine.dialect, settings.db_pool_size)
            credential_cache = CredentialCache()
            revocation_listener = RevocationListener(
                driver_dsn(settings.database_url), credential_cache
            )
        return cls(
            settings=settings,
            sessionmaker=sessionmaker,
            rate_limiter=build_rate_limiter(redis),
            secret_key=settings.resolved_secret_key(),
            dialect_name=dialect_name or "sqlite",
            engine=engine,
            redis=redis,
            read_sessionmaker=read_sessionmaker,
            read_pool=read_pool,
            credential_cache=credential_cache,
            revocation_listener=revocation_listener,
            event_stream=event_stream,
            listening_redis=listening_redis,
            send_governor=build_send_governor(redis),
        )

    async def start(self) -> None:
        """Open what needs a running event loop."""
        if self.read_pool is not None:
            await self.read_pool.open()
        if self.revocation_listener is not None:
            await self.revocation_listener.start()

    def session(self, *, writes: bool) -> AbstractAsyncContextManager[AsyncSession]:
        """The session of one request (or job step), opened the way its work needs.

        SQLite writers take the write lock up front (BEGIN IMMEDIATE) so a read-then-write
        transaction never fails to upgrade. Read-only work on PostgreSQL or a SQLite file runs its
        prepared reads on the read pool and never checks out an ORM connection unless it issues
        an ORM query; other PostgreSQL sessions run them on their own connection's driver
        (app/db/prepared.py).
        """
        if writes:
            return self._write_session()
        return _ReadSession(self)

    @asynccontextmanager
    async def _write_session(self) -> AsyncIterator[AsyncSession]:
        if self.dialect_name == "sqlite" and self.engine is not None:
            async with self._sqlite_writer_turn(), self.sessionmaker() as session:
                await session.connection(execution_options={"sqlite_begin": "IMMEDIATE"})
                yield session
            return
        async with self.sessionmaker() as session:
            if self.dialect_name == "sqlite":
                await session.connection(execution_options={"sqlite_begin": "IMMEDIATE"})
            elif self.prepared_on_driver:
                session.info[ON_DRIVER] = True
            yield session

    @asynccontextmanager
    async def _sqlite_writer_turn(self) -> AsyncIterator[None]:
        """Wait for this process's other writers, in arrival order, before asking SQLite for
        its write lock. SQLite makes a connection that finds the lock taken sleep and retry
        (1 ms, 2 ms, 5 ms … up to 100 ms a try), so writers of one process contending there
        each slept far longer than the transactions they waited for, and under load ran into
        the busy timeout. Other processes still meet at SQLite's lock. A writer that waits
        here longer than the busy timeout goes on to SQLite's lock anyway, so a session
        opened inside another one fails as it always did, never hangs."""
        loop = asyncio.get_running_loop()
        gate = self.write_gates.get(loop)
        if gate is None:
            gate = self.write_gates[loop] = asyncio.Lock()
        try:
            await asyncio.wait_for(gate.acquire(), SQLITE_GATE_WAIT_SECONDS)
        except TimeoutError:
            yield
            return
        try:
            yield
        finally:
            gate.release()

    async def open_connections(self, count: int) -> None:
        """Open `count` of the pool's connections now and leave them in the pool, each having
        read the schema: the first work of a process that must answer at once (live calls)
        then pays for none of it. Opened under load instead, twenty SQLite connections (a
        thread each) held up the first turns of twenty calls by up to 0.6 s
        (docs/benchmarks.md)."""
        engine = self.engine
        if engine is None:
            return

        async def one() -> None:
            async with engine.connect() as connection:
                await connection.exec_driver_sql("SELECT 1 FROM alembic_version")

        await asyncio.gather(*(one() for _ in range(count)))

    def per_loop(self, factory: Callable[[Settings], T]) -> T:
        """The object `factory` makes of the settings, one per process and running loop: an
        HTTP client made once keeps its connections alive across calls (one made per call
        reconnected each time). Closed with its `aclose()` by `aclose` (those of the loop
        that closes)."""
        made = self.loop_objects.setdefault(asyncio.get_running_loop(), {})
        found = made.get(factory)
        if found is None:
            found = made[factory] = factory(self.settings)
        return cast(T, found)

    def __post_init__(self) -> None:
        self.subscriptions = SubscriptionQuota(self.settings.subscriptions_per_organization)

    async def aclose(self) -> None:
        self.idle_read_sessions.clear()
        for made in self.loop_objects.pop(asyncio.get_running_loop(), {}).values():
            await made.aclose()
        await self.event_stream.aclose()
        await self.rate_limiter.close()
        if self.redis is not None:
            await self.redis.aclose()
        if self.listening_redis is not None:
            await self.listening_redis.aclose()
        if self.revocation_listener is not None:
            await self.revocation_listener.close()
        if self.read_pool is not None:
            await self.read_pool.close()
        if self.engine is not None:
            await self.engine.dispose()


# Enough for the requests one process serves at once; past it, idle sessions are dropped.
MAX_IDLE_READ_SESSIONS = 64


class _ReadSession:
    """The session of one read-only request (a class, not a generator: it is on every read).

    A read served wholly by the read pool leaves its session as it found it (no transaction,
    no object loaded, nothing in `info` but the pool): the next read takes it over, which saves
    building one per request. Any other session is closed and dropped.
    """

    __slots__ = ("resources", "session")

    def __init__(self, resources: Resources) -> None:
        self.resources = resources

    async def __aenter__(self) -> AsyncSession:
        resources = self.resources
        idle = resources.idle_read_sessions
        if idle:
            session = idle.pop()
        else:
            session = (resources.read_sessionmaker or resources.sessionmaker)()
            if resources.read_pool is not None:
                resources.read_pool.attach(session)
            elif resources.prepared_on_driver:
                session.info[ON_DRIVER] = READS_ONLY
        self.session = session
        return session

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        session, resources = self.session, self.resources
        sync_session = session.sync_session
        # add() and every query begin a transaction; a loaded object stays in the identity map.
        untouched = not (sync_session.in_transaction() or len(sync_session.identity_map))
        if (
            untouched
            and resources.read_pool is not None
            and session.info.keys() == {READ_POOL}
            and len(resources.idle_read_sessions) < MAX_IDLE_READ_SESSIONS
        ):
            resources.idle_read_sessions.append(session)
        elif not untouched:
            await session.close()
