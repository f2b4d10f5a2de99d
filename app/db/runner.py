"""Where the job engine's hot statements run: a raw asyncpg connection, or an ORM session.

A webhook delivery is a handful of one-row statements. Through an AsyncSession each
transaction costs ~1.2 ms of CPU (session, pool checkout, greenlet switches, commit) against
~0.1 ms for the same statement on the driver, which made the session the bottleneck of
delivery throughput. The statements are SQLAlchemy Core built once (`PreparedRead`), so
both runners execute the same SQL: on PostgreSQL `DriverRunner` sends it on an asyncpg
connection of the worker's `StatementPool`; elsewhere (SQLite) `SessionRunner` executes it
through the session.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import asyncpg
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.prepared import NoResetConnection, PreparedRead, set_json_codecs


class StatementRunner(Protocol):
    # True where several writes can be one statement (data-modifying CTEs: PostgreSQL).
    combines_writes: bool

    async def fetch(self, statement: PreparedRead, params: dict[str, Any]) -> list[Any]: ...

    async def execute(self, statement: PreparedRead, params: dict[str, Any]) -> int:
        """Run a write; the number of rows it changed."""
        ...

    async def execute_many(
        self, statement: PreparedRead, params: Sequence[dict[str, Any]]
    ) -> None: ...


class SessionRunner:
    """Statements through an ORM session: in its transaction, committed by its owner."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        self._dialect = session.get_bind().dialect
        self.combines_writes = self._dialect.name == "postgresql"

    def _own(self, statement: PreparedRead, params: dict[str, Any]) -> dict[str, Any]:
        # Only the statement's own bound names: SQLAlchemy turns any other key that names a
        # column into an extra SET/VALUES entry of an UPDATE/INSERT.
        names = statement.compiled(self._dialect).positions
        return {name: value for name, value in params.items() if name in names}

    async def fetch(self, statement: PreparedRead, params: dict[str, Any]) -> list[Any]:
        result = await self.session.execute(statement.statement, self._own(statement, params))
        return list(result.all())

    async def execute(self, statement: PreparedRead, params: dict[str, Any]) -> int:
        result = await self.session.execute(statement.statement, self._own(statement, params))
        return int(getattr(result, "rowcount", 0))

    async def execute_many(self, statement: PreparedRead, params: Sequence[dict[str, Any]]) -> None:
        if params:
            rows = [self._own(statement, each) for each in params]
            await self.session.execute(statement.statement, rows)


class DriverRunner:
    """Statements on one asyncpg connection (in its transaction, if one is open)."""

    combines_writes = True  # PostgreSQL

    def __init__(self, connection: Any, dialect: Dialect) -> None:
        self._connection = connection
        self._dialect = dialect

    async def fetch(self, statement: PreparedRead, params: dict[str, Any]) -> list[Any]:
        compiled = statement.compiled(self._dialect)
        records = await self._connection.fetch(compiled.sql, *compiled.arguments(params))
        return [compiled.row(record) for record in records]

    async def execute(self, statement: PreparedRead, params: dict[str, Any]) -> int:
        compiled = statement.compiled(self._dialect)
        status: str = await self._connection.execute(compiled.sql, *compiled.arguments(params))
        # The command tag: "UPDATE 1", "DELETE 0", "INSERT 0 1".
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    async def execute_many(self, statement: PreparedRead, params: Sequence[dict[str, Any]]) -> None:
        if params:
            compiled = statement.compiled(self._dialect)
            await self._connection.executemany(
                compiled.sql, [compiled.arguments(each) for each in params]
            )


class StatementPool:
    """asyncpg connections for a worker's hot statements on PostgreSQL."""

    def __init__(self, url: str, dialect: Dialect, size: int) -> None:
        self._dsn = make_url(url).set(drivername="postgresql").render_as_string(False)
        self._dialect = dialect
        self._size = size
        self._pool: Any = None

    async def open(self) -> None:
        self._pool = await asyncpg.create_pool(
            self._dsn,
            min_size=1,
            max_size=self._size,
            connection_class=NoResetConnection,
            init=set_json_codecs,
            # Commits return before the WAL reaches the disk (PostgreSQL stays consistent; a
            # crash may forget the last fraction of a second). Safe here because every job
            # statement is redone when lost: the job's row goes back to pending and runs again
            # (at worst a webhook is delivered twice, with the same webhook-id). Each commit
            # otherwise waited for an fsync, which capped a worker at ~200 deliveries/s.
            server_settings={"synchronous_commit": "off"},
        )

    @asynccontextmanager
    async def runner(self, *, transaction: bool) -> AsyncIterator[DriverRunner]:
        """A connection for a few statements; with `transaction` they commit together
        (or roll back on error), otherwise each commits on its own."""
        async with self._pool.acquire() as connection:
            if transaction:
                async with connection.transaction():
                    yield DriverRunner(connection, self._dialect)
            else:
                yield DriverRunner(connection, self._dialect)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
