"""The snippet cache: every write is visible to the next read, in-process and in Redis, and a
reader racing a write never leaves the old list cached."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.kit.cache import (
    GenerationalCache,
    MemoryCacheBackend,
    RedisCacheBackend,
    invalidate_after_commit,
)
from app.quick_replies.cache import NAMESPACE, snippet_cache
from app.quick_replies.repository import QuickReplyRepository
from tests.conftest import Tenant
from tests.quick_replies.conftest import BASE, create, expand

# --- through the API ------------------------------------------------------------------


async def writes_are_visible(client: httpx.AsyncClient, tenant: Tenant) -> None:
    """Each step caches the list (an expansion), writes, and reads again."""
    assert await expand(client, tenant, "/hi") is None  # caches the empty list
    reply = await create(client, tenant, "/hi", "Hello")
    assert await expand(client, tenant, "/hi") == "Hello"

    url = f"{BASE}/{reply['id']}"
    await client.put(url, json={"content": "Hello again"}, headers=tenant.headers)
    assert await expand(client, tenant, "/hi") == "Hello again"

    await client.put(url, json={"shortcut": "/hey"}, headers=tenant.headers)
    assert await expand(client, tenant, "/hi") is None
    assert await expand(client, tenant, "/hey") == "Hello again"

    # GraphQL mutations invalidate the same way.
    update = """mutation($id: ID!) {
      updateQuickReply(id: $id, input: {content: "From GraphQL"}) { errors { code } }
    }"""
    response = await client.post(
        "/graphql", json={"query": update, "variables": {"id": reply["id"]}}, headers=tenant.headers
    )
    assert response.json()["data"]["updateQuickReply"]["errors"] == []
    assert await expand(client, tenant, "/hey") == "From GraphQL"

    assert (await client.delete(url, headers=tenant.headers)).status_code == 204
    assert await expand(client, tenant, "/hey") is None

    # A failed write (409) changes nothing and the cached list stays right.
    await create(client, tenant, "/a", "A")
    assert await expand(client, tenant, "/a") == "A"
    conflict = await client.post(
        BASE, json={"shortcut": "/a", "content": "B"}, headers=tenant.headers
    )
    assert conflict.status_code == 409
    assert await expand(client, tenant, "/a") == "A"


async def test_writes_are_visible_in_process(client: httpx.AsyncClient, acme: Tenant) -> None:
    await writes_are_visible(client, acme)


async def test_writes_are_visible_with_redis(
    redis_client: httpx.AsyncClient, acme: Tenant, redis: Redis
) -> None:
    await writes_are_visible(redis_client, acme)
    # The list really lives in Redis, under the organization's current generation.
    generation = await redis.get(f"sb:cache:{NAMESPACE}:{acme.organization_id}:generation")
    assert generation is not None
    assert await expand(redis_client, acme, "/a") == "A"
    token = generation.decode() if isinstance(generation, bytes) else generation
    cached = await redis.get(f"sb:cache:{NAMESPACE}:{acme.organization_id}:{token}")
    assert cached == b'{"/a":"A"}'


async def test_expansion_is_served_from_the_cache(
    client: httpx.AsyncClient, acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: list[str] = []
    original = QuickReplyRepository.snippets

    async def counted(self: QuickReplyRepository) -> dict[str, str]:
        loads.append(self.organization_id)
        return await original(self)

    monkeypatch.setattr(QuickReplyRepository, "snippets", counted)
    await create(client, acme, "/hi", "Hello")
    for shortcut, content in (("/hi", "Hello"), ("/nope", None), ("/hi", "Hello")):
        assert await expand(client, acme, shortcut) == content
    assert loads == [acme.organization_id]  # read once, then served from the cache
    await create(client, acme, "/bye", "Bye")
    assert await expand(client, acme, "/bye") == "Bye"
    assert len(loads) == 2


# --- the generational cache itself, on each backend ------------------------------------


@pytest.fixture(params=["memory", "redis"])
def generational(request: pytest.FixtureRequest) -> GenerationalCache:
    if request.param == "memory":
        return GenerationalCache(MemoryCacheBackend(), "test", ttl_seconds=60)
    redis: Redis = request.getfixturevalue("redis")
    return GenerationalCache(RedisCacheBackend(redis), "test", ttl_seconds=60)


def loader(value: bytes, calls: list[bytes]) -> Callable[[], Awaitable[bytes]]:
    async def load() -> bytes:
        calls.append(value)
        return value

    return load


async def test_hit_miss_and_invalidate(generational: GenerationalCache) -> None:
    owner = str(uuid.uuid4())
    calls: list[bytes] = []
    assert await generational.get_or_load(owner, loader(b"v1", calls)) == b"v1"
    assert await generational.get_or_load(owner, loader(b"v2", calls)) == b"v1"  # cached
    await generational.invalidate(owner)
    assert await generational.get_or_load(owner, loader(b"v2", calls)) == b"v2"
    assert calls == [b"v1", b"v2"]
    other = str(uuid.uuid4())  # per owner
    assert await generational.get_or_load(other, loader(b"o", calls)) == b"o"


async def test_reader_racing_a_write_leaves_nothing_stale(
    generational: GenerationalCache,
) -> None:
    """The reader read the old rows; the write committed and invalidated before the reader
    stored them. The old rows land under the old generation, which nobody reads again."""
    owner = str(uuid.uuid4())

    async def read_old_rows_while_a_write_commits() -> bytes:
        rows = b"old"  # read before the write committed
        await generational.invalidate(owner)  # the write commits, then invalidates
        return rows

    assert await generational.get_or_load(owner, read_old_rows_while_a_write_commits) == b"old"
    calls: list[bytes] = []
    assert await generational.get_or_load(owner, loader(b"new", calls)) == b"new"
    assert calls == [b"new"]


async def test_lost_generation_never_revives_an_old_value(
    generational: GenerationalCache,
) -> None:
    """A generation token evicted or expired is replaced by a fresh one, never a default
    that an old value could still be cached under."""
    owner = str(uuid.uuid4())
    calls: list[bytes] = []
    await generational.get_or_load(owner, loader(b"old", calls))
    key = generational._generation_key(owner)
    backend = generational.backend
    if isinstance(backend, MemoryCacheBackend):
        backend._entries.pop(key)
    else:
        assert isinstance(backend, RedisCacheBackend)
        await backend.redis.delete(key)
    assert await generational.get_or_load(owner, loader(b"new", calls)) == b"new"


async def test_memory_backend_expiry_and_capacity() -> None:
    now = [1000.0]
    backend = MemoryCacheBackend(max_entries=3, clock=lambda: now[0])
    assert await backend.set("a", b"1", 10)
    assert not await backend.set("a", b"2", 10, only_if_absent=True)
    assert await backend.get("a") == b"1"
    now[0] += 11
    assert await backend.get("a") is None
    assert await backend.set("a", b"3", 10, only_if_absent=True)
    await backend.set("b", b"", 10)
    await backend.set("c", b"", 10)
    await backend.set("d", b"", 10)  # full of live entries: everything goes
    assert [await backend.get(key) for key in "abcd"] == [None, None, None, b""]


class BrokenBackend:
    async def get(self, key: str) -> bytes | None:
        raise ConnectionError("cache down")

    async def set(
        self, key: str, value: bytes, ttl_seconds: int, *, only_if_absent: bool = False
    ) -> bool:
        raise ConnectionError("cache down")


async def test_cache_failures_fall_back_to_the_database(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    broken = GenerationalCache(BrokenBackend(), "test", ttl_seconds=60)
    calls: list[bytes] = []
    assert await broken.get_or_load("org", loader(b"rows", calls)) == b"rows"
    # A failed invalidation after commit is logged; the commit itself stands.
    async with sessionmaker() as session:
        invalidate_after_commit(session, broken, "org")
        await session.commit()


# --- after commit, not before ----------------------------------------------------------


async def test_invalidation_waits_for_the_commit(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    cache = snippet_cache(None)
    owner = str(uuid.uuid4())
    calls: list[bytes] = []
    await cache.get_or_load(owner, loader(b"before", calls))
    async with sessionmaker() as session:
        invalidate_after_commit(session, cache, owner)
        invalidate_after_commit(session, cache, owner)  # once per owner and commit
        # Not yet: a reader now would cache the old rows under a new token.
        assert await cache.get_or_load(owner, loader(b"x", calls)) == b"before"
        await session.commit()
    assert await cache.get_or_load(owner, loader(b"after", calls)) == b"after"
    assert calls == [b"before", b"after"]
