"""Prepared reads on SQLite in one thread hop each.

aiosqlite runs every call on its connection's thread and wakes the event loop with the
result, so a read through an ORM session costs about nine hops (BEGIN, cursor, execute,
fetchall, close, rollback, the pool's reset), each waiting for a turn of the loop. On a
process busy with live calls' audio that wait, not the query, was a voice turn's knowledge
lookup (3.7 ms p50, 22 ms p99 at 20 calls; docs/benchmarks.md). `SqliteReadPool` is
SQLite's counterpart of the PostgreSQL read pool (`DriverPool`): a read-only session's
prepared statements run on a few autocommit connections of their own, statement and rows
in one hop (`execute_fetchall`). In WAL mode each statement reads the last committed state.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiosqlite
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.prepared import READ_POOL

# Readers wait this long for a writer's lock (WAL readers rarely wait at all).
BUSY_TIMEOUT_MS = 5000


class SqliteReadPool:
    """Up to `size` read-only connections to one SQLite file, opened as concurrent reads need
    them; a read takes an idle connection, or waits for the first one given back (never
    queued behind another read's slow query)."""

    def __init__(self, url: str, dialect: Dialect, size: int) -> None:
        self.dialect = dialect
        self._connect_args = dialect.create_connect_args(make_url(url))
        self._size = size
        self._connections: list[aiosqlite.Connection] = []
        self._idle: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
        self._opening = asyncio.Lock()
        self._closed = False

    def attach(self, session: AsyncSession) -> None:
        """The session's prepared reads go to this pool (app/db/prepared.py)."""
        session.info[READ_POOL] = self

    @property
    def opened(self) -> int:
        """How many connections are open."""
        return len(self._connections)

    async def open(self) -> None:
        """Open the first connection now rather than on the first read."""
        self._idle.put_nowait(await self._checkout())

    async def fetch(self, sql: str, arguments: list[Any]) -> list[Any]:
        connection = await self._checkout()
        try:
            return list(await connection.execute_fetchall(sql, arguments))
        finally:
            if not self._closed:
                self._idle.put_nowait(connection)

    async def _checkout(self) -> aiosqlite.Connection:
        if self._closed:
            raise RuntimeError("the SQLite read pool is closed")
        if not self._idle.empty():
            return self._idle.get_nowait()
        async with self._opening:
            # Another read may have opened one, or given one back, while this one waited.
            if self._idle.empty() and len(self._connections) < self._size and not self._closed:
                return await self._add()
        return await self._idle.get()

    async def _add(self) -> aiosqlite.Connection:
        args, kwargs = self._connect_args
        connection = await aiosqlite.connect(*args, **{**kwargs, "isolation_level": None})
        # Reads only: a statement that writes fails here instead of taking the lock.
        await connection.execute("PRAGMA query_only=ON")
        await connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self._connections.append(connection)
        return connection

    async def close(self) -> None:
        async with self._opening:
            self._closed = True
            connections, self._connections = self._connections, []
        for connection in connections:
            await connection.close()
