"""The revocation listener on a connection that dies silently (PostgreSQL only).

A partition leaves the LISTEN connection half-open: no notification arrives and no error either.
The listener's ping notices within its interval plus its timeout and switches the cache off,
so a key revoked meanwhile is looked up again (and refused) instead of served from the cache
until the TTL; when the network heals it listens again and the cache comes back.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import asyncpg
from sqlalchemy.engine import make_url

from app.access.cache import CHANNEL, CredentialCache, RevocationListener
from tests.conftest import service_unavailable
from tests.workers.tcp_proxy import silentable_proxy

PING_SECONDS = 0.2
PING_TIMEOUT_SECONDS = 0.3


def postgres_dsn() -> str:
    url = os.environ.get("TEST_DATABASE_URL", "")
    if not url.startswith("postgresql"):
        service_unavailable("PostgreSQL", RuntimeError("TEST_DATABASE_URL is not PostgreSQL"))
    return make_url(url).set(drivername="postgresql").render_as_string(False)


async def until(check: Callable[[], bool], seconds: float) -> float:
    """Seconds until `check()` holds; fails after `seconds`."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while not check():
        assert loop.time() - started < seconds, "condition not reached in time"
        await asyncio.sleep(0.02)
    return loop.time() - started


async def test_a_silently_dead_listener_turns_the_cache_off_and_back_on() -> None:
    dsn = make_url(postgres_dsn())
    try:
        notifier = await asyncpg.connect(dsn.render_as_string(False))
    except (OSError, asyncpg.PostgresError) as exc:
        service_unavailable("PostgreSQL", exc)
        raise
    cache = CredentialCache()
    async with silentable_proxy(dsn.host or "127.0.0.1", dsn.port or 5432) as proxy:
        proxied = dsn.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
        listener = RevocationListener(
            proxied,
            cache,
            ping_seconds=PING_SECONDS,
            ping_timeout_seconds=PING_TIMEOUT_SECONDS,
            reconnect_delay_seconds=0.1,
        )
        await listener.start()
        try:
            assert cache.enabled
            cache.put("live-key", "row", cache.generation)
            await notifier.execute("SELECT pg_notify($1, $2)", CHANNEL, "revoked-while-up")
            await until(lambda: cache.generation > 1, 2.0)  # notifications arrive while up
            cache.put("other-key", "row", cache.generation)
            assert cache.get("other-key") == "row"

            proxy.freeze()  # half-open from here: nothing reaches either side, nothing fails
            await notifier.execute("SELECT pg_notify($1, $2)", CHANNEL, "other-key")
            noticed = await until(lambda: not cache.enabled, 5.0)
            assert cache.get("other-key") is None  # looked up again, not served stale
            assert noticed <= PING_SECONDS + PING_TIMEOUT_SECONDS + 0.5

            proxy.thaw()
            await until(lambda: cache.enabled, 5.0)  # listening again: the cache is back
            assert cache.get("other-key") is None  # and starts empty
        finally:
            await listener.close()
            await notifier.close()


async def test_the_cache_stays_on_while_the_listener_answers() -> None:
    dsn = postgres_dsn()
    cache = CredentialCache()
    listener = RevocationListener(
        dsn, cache, ping_seconds=0.05, ping_timeout_seconds=PING_TIMEOUT_SECONDS
    )
    await listener.start()
    try:
        cache.put("key", "row", cache.generation)
        await asyncio.sleep(0.5)  # ten pings, all answered
        assert cache.enabled
        assert cache.get("key") == "row"
    finally:
        await listener.close()
