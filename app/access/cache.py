"""API key lookups cached per process, revoked everywhere at once through PostgreSQL.

Looking a key up costs a database round trip on every request (measured: ~20% of a 20-row
list request). Keys never change after creation except by revocation, so a process may keep
what it read, provided revocation still takes effect at once: revoking sends
`NOTIFY switchboard_api_keys` in the revoking transaction, and every process LISTENs and drops
the key when the transaction commits. While the listening connection is down the cache is
bypassed, so a lost notification can never keep a revoked key alive. "Down" includes a
connection that died silently (a half-open TCP connection after a network partition or a
failover, which never reports its end): the listener pings it every `PING_SECONDS` and drops
the cache when no answer comes within `PING_TIMEOUT_SECONDS`, so a revoked key stays usable at
most that long after its revocation, never until the TTL. Expiry is checked on
every use against the cached expiry time. SQLite deployments do not cache (another process,
such as the CLI, could not reach the server's cache).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import asyncpg
import structlog
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

logger = structlog.get_logger("switchboard.auth")

CHANNEL = "switchboard_api_keys"
# A safety net only: revocations arrive by notification long before this.
TTL_SECONDS = 300.0
MAX_ENTRIES = 10_000
_RECONNECT_DELAY_SECONDS = 1.0
# How often the listening connection must prove it is alive, and how long it may take to.
PING_SECONDS = 5.0
PING_TIMEOUT_SECONDS = 2.0


class CredentialCache:
    """key hash → credential row, valid while the revocation listener is connected."""

    def __init__(self, ttl_seconds: float = TTL_SECONDS, max_entries: int = MAX_ENTRIES) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self.enabled = False
        # Bumped on every revocation: a lookup that started before one may not store its row.
        self.generation = 0
        self._rows: dict[str, tuple[float, Any]] = {}

    def get(self, key_hash: str) -> Any | None:
        if not self.enabled:
            return None
        entry = self._rows.get(key_hash)
        if entry is None:
            return None
        stored_at, row = entry
        if time.monotonic() - stored_at > self.ttl_seconds:
            self._rows.pop(key_hash, None)
            return None
        return row

    def put(self, key_hash: str, row: Any, generation: int) -> None:
        if not self.enabled or generation != self.generation:
            return
        if len(self._rows) >= self.max_entries:
            # Oldest first (dicts keep insertion order).
            self._rows.pop(next(iter(self._rows)))
        self._rows[key_hash] = (time.monotonic(), row)

    def replace(self, key_hash: str, row: Any) -> None:
        """Refresh a cached row in place (e.g. after this process wrote last_used_at)."""
        entry = self._rows.get(key_hash)
        if entry is not None:
            self._rows[key_hash] = (entry[0], row)

    def revoke(self, key_hash: str) -> None:
        self.generation += 1
        self._rows.pop(key_hash, None)

    def set_enabled(self, enabled: bool) -> None:
        self.generation += 1
        self._rows.clear()
        self.enabled = enabled


async def announce_revocation(session: AsyncSession, key_hash: str) -> None:
    """Tell every process to drop the key; delivered when the revoking transaction commits."""
    if session.get_bind().dialect.name == "postgresql":
        await session.execute(select(func.pg_notify(CHANNEL, key_hash)))


class RevocationListener:
    """Keeps one connection LISTENing; the cache works only while it is connected and answers
    its pings."""

    def __init__(
        self,
        dsn: str,
        cache: CredentialCache,
        *,
        ping_seconds: float = PING_SECONDS,
        ping_timeout_seconds: float = PING_TIMEOUT_SECONDS,
        reconnect_delay_seconds: float = _RECONNECT_DELAY_SECONDS,
    ) -> None:
        self._dsn = dsn
        self._cache = cache
        self._ping_seconds = ping_seconds
        self._ping_timeout = ping_timeout_seconds
        self._reconnect_delay = reconnect_delay_seconds
        self._connection: Any = None
        self._task: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()

    async def start(self) -> None:
        await self._connect()
        self._task = asyncio.create_task(self._keep_connected())

    async def _connect(self) -> None:
        try:
            connection = await asyncpg.connect(self._dsn, timeout=self._ping_timeout * 2)
            await asyncio.wait_for(
                connection.add_listener(CHANNEL, self._on_notification), self._ping_timeout
            )
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            logger.warning("api key revocation listener unavailable", error=repr(exc))
            self._lost.set()
            return
        connection.add_termination_listener(self._on_termination)
        self._connection = connection
        self._lost.clear()
        self._cache.set_enabled(True)

    def _on_notification(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        self._cache.revoke(payload)

    def _on_termination(self, _connection: Any) -> None:
        self._cache.set_enabled(False)
        self._connection = None
        self._lost.set()

    async def _alive(self) -> bool:
        connection = self._connection
        if connection is None:
            return False
        try:
            await asyncio.wait_for(connection.fetchval("SELECT 1"), self._ping_timeout)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
            return False
        return True

    def _drop(self) -> None:
        """The connection stopped answering: serve nothing from the cache, and let it go."""
        logger.warning("api key revocation listener stopped answering; cache off until back")
        self._cache.set_enabled(False)
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.terminate()
        self._lost.set()

    async def _keep_connected(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._lost.wait(), self._ping_seconds)
            except TimeoutError:
                if await self._alive():
                    continue
                self._drop()
            self._cache.set_enabled(False)
            await asyncio.sleep(self._reconnect_delay)
            await self._connect()

    async def close(self) -> None:
        self._cache.set_enabled(False)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                await connection.close(timeout=self._ping_timeout)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                connection.terminate()
