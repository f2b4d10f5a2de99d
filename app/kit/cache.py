"""Caches of values derived from the database, in Redis when `REDIS_URL` is set, else in-process.

A value is cached per owner (e.g. an organization) under a *generation*: a random token stored
next to it. Invalidating replaces the token, which orphans every value cached under the old one
(they expire on their own). Why not simply delete the value on write:

    reader: misses, reads the database ........................ stores what it read
    writer:                              commits, deletes key ^
                                         (the reader's stale copy lands after the delete)

With generations the reader notes the token *before* reading the database and stores under that
token; if a write commits and replaces the token in between, the stale copy lands under a token
nobody asks for any more. A write therefore invalidates after its transaction commits
(`invalidate_after_commit`): before the commit, a reader could still cache the old rows under the
new token. A missing token is created by the first reader (only-if-absent), never assumed, so an
evicted or expired token cannot bring an old value back.

Without Redis each process has its own cache: run one server process, or set `REDIS_URL`, for a
write to be seen at once by every process (others would see it within the TTL).

Cache failures never fail a request: a read that cannot reach Redis loads from the database, and
an invalidation that cannot reach Redis is logged (the TTL bounds how long a value can be stale).
Redis commands are bounded by the client's timeouts (app/kit/redis_clients.py); after a failed
read, reads load from the database without asking Redis for `RETRY_SECONDS`, so a silent Redis
costs one read its timeout, not every read. Invalidations are always tried.
"""

from __future__ import annotations

import secrets
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog
from redis.asyncio import Redis
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session
from sqlalchemy.util import await_only

from app.kit.redis_clients import REDIS_FAILURES, OutageReport

logger = structlog.get_logger("switchboard.cache")

KEY_PREFIX = "sb:cache:"
# Tokens outlive the values cached under them; either may go at any time without harm.
GENERATION_TTL_SECONDS = 24 * 3600
_PENDING = "switchboard.cache.invalidate_after_commit"
# After a failed read, reads skip Redis this long.
RETRY_SECONDS = 1.0


class CacheBackend(Protocol):
    async def get(self, key: str) -> bytes | None: ...

    async def set(
        self, key: str, value: bytes, ttl_seconds: int, *, only_if_absent: bool = False
    ) -> bool:
        """Store the value; with `only_if_absent`, only when the key is missing. True if stored."""
        ...


class MemoryCacheBackend:
    """One process's cache: entries expire, and the whole cache is dropped when it fills up
    (dropping everything is always safe; dropping some tokens but not their values is too)."""

    def __init__(
        self, max_entries: int = 20_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_entries = max_entries
        self._clock = clock
        self._entries: dict[str, tuple[float, bytes]] = {}

    async def get(self, key: str) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires_at, value = entry
        if self._clock() >= expires_at:
            self._entries.pop(key, None)
            return None
        return value

    async def set(
        self, key: str, value: bytes, ttl_seconds: int, *, only_if_absent: bool = False
    ) -> bool:
        if only_if_absent and await self.get(key) is not None:
            return False
        if len(self._entries) >= self.max_entries and key not in self._entries:
            self._purge()
        self._entries[key] = (self._clock() + ttl_seconds, value)
        return True

    def _purge(self) -> None:
        now = self._clock()
        self._entries = {k: entry for k, entry in self._entries.items() if entry[0] > now}
        if len(self._entries) >= self.max_entries:
            self._entries.clear()

    def clear(self) -> None:
        self._entries.clear()


class CacheUnavailable(Exception):
    """Reads skip Redis for a moment after one failed (RedisCacheBackend)."""


class RedisCacheBackend:
    def __init__(self, redis: Redis, clock: Callable[[], float] = time.monotonic) -> None:
        self.redis = redis
        self._clock = clock
        self._reads_skip_until = 0.0

    async def get(self, key: str) -> bytes | None:
        if self._clock() < self._reads_skip_until:
            raise CacheUnavailable()
        try:
            value = await self.redis.get(key)
        except REDIS_FAILURES:
            self._reads_skip_until = self._clock() + RETRY_SECONDS
            raise
        if value is None:
            return None
        return value if isinstance(value, bytes) else str(value).encode()

    async def set(
        self, key: str, value: bytes, ttl_seconds: int, *, only_if_absent: bool = False
    ) -> bool:
        return bool(await self.redis.set(key, value, ex=ttl_seconds, nx=only_if_absent))


# The in-process cache, shared by everything in this process that runs without Redis.
LOCAL_BACKEND = MemoryCacheBackend()


# One backend per client, so every cache of the process shares its failure state.
_REDIS_BACKENDS: weakref.WeakKeyDictionary[Redis, RedisCacheBackend] = weakref.WeakKeyDictionary()
_READ_FAILURES = OutageReport("cache")


def backend_for(redis: Redis | None) -> CacheBackend:
    if redis is None:
        return LOCAL_BACKEND
    backend = _REDIS_BACKENDS.get(redis)
    if backend is None:
        backend = _REDIS_BACKENDS[redis] = RedisCacheBackend(redis)
    return backend


class GenerationalCache:
    """Values of one namespace, one per owner, invalidated by replacing the owner's token."""

    def __init__(self, backend: CacheBackend, namespace: str, ttl_seconds: int) -> None:
        self.backend = backend
        self.namespace = namespace
        self.ttl_seconds = ttl_seconds

    def _generation_key(self, owner: str) -> str:
        return f"{KEY_PREFIX}{self.namespace}:{owner}:generation"

    def _value_key(self, owner: str, token: str) -> str:
        return f"{KEY_PREFIX}{self.namespace}:{owner}:{token}"

    async def _current_token(self, owner: str) -> str | None:
        key = self._generation_key(owner)
        token = await self.backend.get(key)
        if token is None:
            fresh = secrets.token_hex(8).encode()
            if await self.backend.set(key, fresh, GENERATION_TTL_SECONDS, only_if_absent=True):
                return fresh.decode()
            token = await self.backend.get(key)  # another reader created it first
        return token.decode() if token is not None else None

    async def get_or_load(self, owner: str, load: Callable[[], Awaitable[bytes]]) -> bytes:
        """The cached value, or `load()`'s (then cached). `load` must read the database after
        this call started: the token is taken first, see the module docstring."""
        try:
            token = await self._current_token(owner)
            if token is not None:
                cached = await self.backend.get(self._value_key(owner, token))
                if cached is not None:
                    return cached
        except CacheUnavailable:
            return await load()
        except REDIS_FAILURES as exc:
            _READ_FAILURES.failed(exc, "database")
            return await load()
        except Exception:
            logger.warning("cache read failed; loading", namespace=self.namespace, exc_info=True)
            return await load()
        value = await load()
        if token is not None:
            try:
                await self.backend.set(self._value_key(owner, token), value, self.ttl_seconds)
            except Exception:
                logger.warning("cache write failed", namespace=self.namespace, exc_info=True)
        return value

    async def invalidate(self, owner: str) -> None:
        """Orphan the owner's cached value. Call after the change is committed."""
        token = secrets.token_hex(8).encode()
        await self.backend.set(self._generation_key(owner), token, GENERATION_TTL_SECONDS)


def invalidate_after_commit(session: AsyncSession, cache: GenerationalCache, owner: str) -> None:
    """Invalidate `owner`'s value once this session's transaction commits.

    A rolled-back transaction changed nothing, but its entry is kept anyway: an extra
    invalidation costs one cache miss, while dropping an entry on a savepoint's rollback
    could lose the invalidation of an outer write that later commits.
    """
    pending: dict[tuple[str, str], GenerationalCache] = session.info.setdefault(_PENDING, {})
    pending[(cache.namespace, owner)] = cache


@event.listens_for(Session, "after_commit")
def _invalidate_committed(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint's release: the change is not committed yet
    pending: dict[tuple[str, str], GenerationalCache] | None = session.info.pop(_PENDING, None)
    if not pending:
        return
    for (namespace, owner), cache in pending.items():
        invalidation = cache.invalidate(owner)
        try:
            # AsyncSession.commit runs this hook inside its greenlet: await_only reaches the
            # event loop, so the invalidation is done before the caller gets its answer.
            await_only(invalidation)
        except Exception:
            invalidation.close()  # never started when there was no greenlet to run it in
            logger.error(
                "cache invalidation failed; the value may be stale until its TTL",
                namespace=namespace,
                owner=owner,
                exc_info=True,
            )
