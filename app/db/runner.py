"""Prepared statements outside the ORM session: asyncpg pools, and runners for the job engine.

A webhook delivery is a handful of one-row statements. Through an AsyncSession each
transaction costs ~1.2 ms of CPU (session, pool checkout, greenlet switches, commit) against
~0.1 ms for the same statement on the driver, which made the session the bottleneck of
delivery throughput. The statements are SQLAlchemy Core built once (`PreparedStatement`), so
both runners execute the same SQL: on PostgreSQL `DriverRunner` sends it on an asyncpg
connection of the worker's `DriverPool`; elsewhere (SQLite, or with
SWITCHBOARD_PREPARED_ON_DRIVER=false) `SessionRunner` executes it through the session.

A read-only API request on PostgreSQL sends its prepared reads to the API process's
`DriverPool` the same way (app/resources.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import asyncpg
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.jsonutil import loads_text
from app.db.prepared import ON_DRIVER, READ_POOL, PreparedStatement

# How long a shutdown waits for the pool's connections to come back.
CLOSE_SECONDS = 10.0


class StatementRunner(Protocol):
    # True where several writes can be one statement (data-modifying CTEs: PostgreSQL).
    combines_writes: bool
    # The database's dialect ("postgresql", "sqlite"): statements of its own syntax.
    dialect_name: str

    async def fetch(self, statement: PreparedStatement, params: dict[str, Any]) -> list[Any]: ...

    async def execute(self, statement: PreparedStatement, params: dict[str, Any]) -> int:
        """Run a write; the number of rows it changed."""
        ...

    async def execute_many(
        self, statement: PreparedStatement, params: Sequence[dict[str, Any]]
    ) -> None: ...


class SessionRunner:
    """Statements through an ORM session: in its transaction, committed by its owner (on its
    asyncpg connection where the session runs prepared statements there)."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        dialect = session.get_bind().dialect
        self.dialect_name: str = dialect.name
        # Only where the session's prepared statements run on its asyncpg connection (a
        # write session the service marked, on PostgreSQL): through SQLAlchemy a parameter
        # named like a column of an UPDATE inside a data-modifying CTE becomes an extra SET
        # of it, so a combined statement runs only on the driver.
        self.combines_writes: bool = (
            session.info.get(ON_DRIVER) is True and dialect.driver == "asyncpg"
        )

    async def fetch(self, statement: PreparedStatement, params: dict[str, Any]) -> list[Any]:
        return await statement.all(self.session, params)

    async def execute(self, statement: PreparedStatement, params: dict[str, Any]) -> int:
        return await statement.execute(self.session, params)

    async def execute_many(
        self, statement: PreparedStatement, params: Sequence[dict[str, Any]]
    ) -> None:
        await statement.execute_many(self.session, params)


class DriverRunner:
    """Statements on one asyncpg connection (in its transaction, if one is open)."""

    combines_writes = True  # PostgreSQL

    def __init__(self, connection: Any, dialect: Dialect) -> None:
        self._connection = connection
        self._dialect = dialect
        self.dialect_name: str = dialect.name

    async def fetch(self, statement: PreparedStatement, params: dict[str, Any]) -> list[Any]:
        compiled = statement.compiled(self._dialect)
        records = await self._connection.fetch(compiled.sql, *compiled.arguments(params))
        return [compiled.row(record) for record in records]

    async def execute(self, statement: PreparedStatement, params: dict[str, Any]) -> int:
        compiled = statement.compiled(self._dialect)
        status: str = await self._connection.execute(compiled.sql, *compiled.arguments(params))
        # The command tag: "UPDATE 1", "DELETE 0", "INSERT 0 1".
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    async def execute_many(
        self, statement: PreparedStatement, params: Sequence[dict[str, Any]]
    ) -> None:
        if params:
            compiled = statement.compiled(self._dialect)
            await self._connection.executemany(
                compiled.sql, [compiled.arguments(each) for each in params]
            )


def driver_dsn(url: str) -> str:
    """The asyncpg DSN of a SQLAlchemy PostgreSQL URL."""
    return make_url(url).set(drivername="postgresql").render_as_string(False)


class NoResetConnection(asyncpg.Connection):  # type: ignore[misc]
    """Borrowers that change no session state (read-only requests, job statements that always
    end their transactions) skip asyncpg's reset round trip (advisory unlock, CLOSE ALL,
    UNLISTEN, RESET ALL) on every release."""

    def get_reset_query(self) -> str:
        return ""


async def set_json_codecs(connection: Any) -> None:
    # Values decode to what SQLAlchemy's asyncpg dialect returns (json_deserializer=orjson);
    # text format lets orjson parse straight from the driver with no Python wrapper per value.
    # Bind values arrive already serialized by SQLAlchemy's JSON bind processors.
    for type_name in ("json", "jsonb"):
        await connection.set_type_codec(
            type_name, encoder=str, decoder=loads_text, schema="pg_catalog", format="text"
        )


class DriverPool:
    """asyncpg connections for prepared statements on PostgreSQL, beside the ORM's pool.

    Codecs decode values the same way SQLAlchemy's asyncpg dialect does, so rows are the same
    either way. Two users:

    - A read-only API request (REST GET, GraphQL query) would otherwise pay for an ORM
      session's connection checkout, autobegin and commit (measured: ~45% of a 20-row list
      request). Its session carries the pool (`attach`); each prepared read holds a connection
      only for its own round trip (`fetch`), so a slow client never pins one (holding one per
      request made waiters starve under load: asyncio queues are not fair). Anything else the
      request does through the session still checks out a normal ORM connection.
    - A worker's hot job statements (`runner`).
    """

    def __init__(
        self, url: str, dialect: Dialect, size: int, *, synchronous_commit: bool = True
    ) -> None:
        self.dsn = driver_dsn(url)
        self.dialect = dialect
        self._size = size
        self._server_settings = {} if synchronous_commit else {"synchronous_commit": "off"}
        self._pool: Any = None

    async def open(self) -> None:
        self._pool = await asyncpg.create_pool(
            self.dsn,
            min_size=1,
            max_size=self._size,
            connection_class=NoResetConnection,
            init=set_json_codecs,
            server_settings=self._server_settings,
        )

    def attach(self, session: AsyncSession) -> None:
        """The session's prepared reads go to this pool (app/db/prepared.py)."""
        session.info[READ_POOL] = self

    async def fetch(self, sql: str, arguments: list[Any]) -> list[Any]:
        records: list[Any] = await self._pool.fetch(sql, *arguments)
        return records

    @asynccontextmanager
    async def runner(self, *, transaction: bool) -> AsyncIterator[DriverRunner]:
        """A connection for a few statements; with `transaction` they commit together
        (or roll back on error), otherwise each commits on its own."""
        async with self._pool.acquire() as connection:
            if transaction:
                async with connection.transaction():
                    yield DriverRunner(connection, self.dialect)
            else:
                yield DriverRunner(connection, self.dialect)

    async def close(self) -> None:
        """Close gracefully; a connection still out after CLOSE_SECONDS (its holder abandoned
        mid-statement) no longer holds the shutdown: asyncpg's close would wait for it
        forever, so every connection is then closed at once."""
        if self._pool is None:
            return
        try:
            await asyncio.wait_for(self._pool.close(), CLOSE_SECONDS)
        except TimeoutError:
            self._pool.terminate()
