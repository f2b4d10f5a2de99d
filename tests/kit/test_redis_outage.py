"""The API process while Redis goes silent (a proxy that accepts and never answers: the worst
partition, no error until a timeout), through the clients `Resources.from_settings` builds.

- Writes and reads behind the rate limiter answer within their normal time plus the timeout,
  never 5xx; once Redis answers again its shared buckets limit again.
- A cache read falls back to the database, an event publish is dropped, both within the timeout.
- An idle pub/sub subscriber outlives the command timeout many times over.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.kit import redis_clients
from app.kit.cache import GenerationalCache, backend_for
from app.kit.event_stream import CHANNEL_PREFIX
from app.kit.ratelimit import FallbackRateLimiter, MemoryRateLimiter, RateLimit
from app.kit.redis_clients import OutageReport, failures_counter
from app.main import create_app
from app.resources import Resources
from tests.conftest import GRAPHQL, Tenant, make_settings, service_unavailable
from tests.workers.tcp_proxy import SilentableProxy, silentable_proxy

pytestmark = pytest.mark.redis

TIMEOUT = 0.5
# Generous: a request's normal time (tens of ms here) plus the timeout, on a loaded machine.
BOUND_SECONDS = 3.0
PER_KEY = 20


@pytest.fixture
async def redis_url() -> str:
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        service_unavailable("Redis", RuntimeError("TEST_REDIS_URL not set"))
    assert url is not None
    client = Redis.from_url(url)
    try:
        await client.ping()
    except Exception as exc:
        service_unavailable("Redis", exc)
    finally:
        await client.aclose()
    return url


@pytest.fixture
async def direct(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[SilentableProxy]:
    parts = urlsplit(redis_url)
    async with silentable_proxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
        yield proxy


def through(proxy: SilentableProxy, redis_url: str) -> str:
    return urlunsplit(urlsplit(redis_url)._replace(netloc=f"127.0.0.1:{proxy.port}"))


@asynccontextmanager
async def redis_resources(
    redis_url: str,
    tmp_path: Path,
    sessionmaker: async_sessionmaker[AsyncSession] | None = None,
    dialect: str = "sqlite",
    database_url: str = "sqlite+aiosqlite:///:memory:",
    **overrides: Any,
) -> AsyncIterator[Resources]:
    values = {"redis_timeout_seconds": TIMEOUT, "redis_connect_timeout_seconds": TIMEOUT}
    settings = make_settings(database_url, tmp_path, redis_url=redis_url, **{**values, **overrides})
    resources = Resources.from_settings(
        settings, sessionmaker=sessionmaker or async_sessionmaker(), dialect_name=dialect
    )
    try:
        yield resources
    finally:
        await resources.aclose()


async def timed(request: Any) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = await request
    return response, time.perf_counter() - started


def failures(use: str) -> float:
    return failures_counter().labels(use=use)._value.get()


async def test_rate_limited_requests_answer_while_redis_is_silent_and_limit_after(
    proxy: SilentableProxy,
    redis_url: str,
    direct: Redis,
    database_url: str,
    tmp_path: Path,
    sessionmaker: async_sessionmaker[AsyncSession],
    dialect: str,
    acme: Tenant,
) -> None:
    async with redis_resources(
        through(proxy, redis_url),
        tmp_path,
        sessionmaker,
        dialect,
        database_url,
        rate_limit_per_key=f"{PER_KEY}/m",
    ) as resources:
        limiter = resources.rate_limiter
        assert isinstance(limiter, FallbackRateLimiter)
        bucket = f"sb:rl:key:{acme.key_id}"
        transport = httpx.ASGITransport(app=create_app(resources=resources))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            created = await client.post(
                "/api/v1/contacts",
                json={"name": "Ada", "phone_number": "+14155550100"},
                headers=acme.headers,
            )
            assert created.status_code == 200, created.text
            assert await direct.exists(bucket) == 1  # the shared bucket counts
            warm = [
                (await timed(client.get("/api/v1/contacts", headers=acme.headers)))[1]
                for _ in range(2)
            ]

            failed_before = failures("rate_limiter")
            proxy.freeze()
            during: list[tuple[str, int, float]] = []
            for index in range(2):
                calls = {
                    "write": client.post(
                        "/api/v1/contacts",
                        json={"name": "Ada", "phone_number": f"+1415555020{index}"},
                        headers=acme.headers,
                    ),
                    "read": client.get("/api/v1/contacts", headers=acme.headers),
                    "read one": client.get(
                        f"/api/v1/contacts/{created.json()['id']}", headers=acme.headers
                    ),
                    "graphql": client.post(
                        GRAPHQL,
                        json={"query": "{ contacts(first: 5) { totalCount } }"},
                        headers=acme.headers,
                    ),
                }
                for name, call in calls.items():
                    response, seconds = await timed(call)
                    during.append((name, response.status_code, seconds))
                    assert response.status_code < 300, (name, response.text)
                    assert "errors" not in response.json(), response.text
                await asyncio.sleep(limiter.retry_seconds)  # the next hit probes Redis again
            failed_during = failures("rate_limiter") - failed_before
            proxy.thaw()

            slowest = max(seconds for _, _, seconds in during)
            print(
                "while Redis was silent: "
                + ", ".join(
                    f"{name} {code} {seconds * 1000:.0f} ms" for name, code, seconds in during
                )
                + f"; {failed_during:g} Redis failures (timeout {TIMEOUT} s);"
                f" before: {', '.join(f'{seconds * 1000:.0f} ms' for seconds in warm)}"
            )
            assert slowest < BOUND_SECONDS
            # Only the first hit and the probes wait for Redis, not every request.
            assert 1 <= failed_during < len(during)

            # Redis answers again: after the local window a probe finds it, and its buckets
            # (not the process's) count and refuse.
            await asyncio.sleep(limiter.retry_seconds)
            statuses = []
            for _ in range(PER_KEY + 1):
                response = await client.get("/api/v1/contacts", headers=acme.headers)
                statuses.append(response.status_code)
                if response.status_code == 429:
                    break
            assert not limiter.failing
            assert statuses[-1] == 429, statuses
            assert set(statuses[:-1]) == {200}
            assert response.json()["error"] == "rate_limit_exceeded"
            assert int(response.headers["retry-after"]) >= 1
            assert await direct.pttl(bucket) > 0


async def test_cache_reads_load_from_the_database_while_redis_is_silent(
    proxy: SilentableProxy, redis_url: str, tmp_path: Path
) -> None:
    owner = f"org-{time.time_ns()}"
    async with redis_resources(through(proxy, redis_url), tmp_path) as resources:
        cache = GenerationalCache(backend_for(resources.redis), "outage-test", 60)
        loads = 0

        async def load() -> bytes:
            nonlocal loads
            loads += 1
            return b"from the database"

        assert await cache.get_or_load(owner, load) == b"from the database"
        assert await cache.get_or_load(owner, load) == b"from the database"
        assert loads == 1  # the second read came from Redis

        proxy.freeze()
        started = time.perf_counter()
        assert await cache.get_or_load(owner, load) == b"from the database"
        first = time.perf_counter() - started
        started = time.perf_counter()
        assert await cache.get_or_load(owner, load) == b"from the database"
        second = time.perf_counter() - started
        proxy.thaw()
    assert loads == 3
    assert TIMEOUT * 0.8 <= first < BOUND_SECONDS
    assert second < TIMEOUT / 2  # the failed read keeps the next ones off Redis for a moment


async def test_an_event_published_while_redis_is_silent_is_dropped_in_time(
    proxy: SilentableProxy, redis_url: str, tmp_path: Path
) -> None:
    async with redis_resources(through(proxy, redis_url), tmp_path) as resources:
        await resources.event_stream.publish("org", b"{}")
        failed_before = failures("event_publish")
        proxy.freeze()
        started = time.perf_counter()
        await resources.event_stream.publish("org", b"{}")  # does not raise
        seconds = time.perf_counter() - started
        proxy.thaw()
    assert seconds < BOUND_SECONDS
    assert failures("event_publish") == failed_before + 1


async def test_an_idle_subscriber_outlives_the_command_timeout(
    redis_url: str, direct: Redis, tmp_path: Path
) -> None:
    organization = f"idle-{time.time_ns()}"
    async with redis_resources(redis_url, tmp_path, redis_timeout_seconds=0.1) as resources:
        stream = resources.event_stream.subscribe(organization)
        first = asyncio.ensure_future(anext(stream))
        channel = CHANNEL_PREFIX + organization
        deadline = time.monotonic() + 5
        while (await direct.pubsub_numsub(channel))[0][1] == 0:
            assert time.monotonic() < deadline, "never subscribed"
            await asyncio.sleep(0.02)
        await asyncio.sleep(1.0)  # ten times the command timeout, with nothing to read
        assert not first.done(), first
        await resources.event_stream.publish(organization, b'{"type": "lead.created"}')
        assert await asyncio.wait_for(first, 5) == {"type": "lead.created"}
        await stream.aclose()  # type: ignore[attr-defined]


async def test_the_limiter_probes_redis_once_per_window() -> None:
    now = [0.0]

    class Silent:
        hits = 0

        async def hit(self, key: str, limit: RateLimit, cost: int = 1) -> Any:
            self.hits += 1
            raise TimeoutError("no answer")

        async def close(self) -> None:
            pass

    primary = Silent()
    limiter = FallbackRateLimiter(
        primary,
        MemoryRateLimiter(clock=lambda: now[0]),
        retry_seconds=1.0,
        report=OutageReport("test", clock=lambda: now[0]),
        clock=lambda: now[0],
    )
    limit = RateLimit(limit=2, period=60.0)
    decisions = [await limiter.hit("k", limit) for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False]  # local buckets still limit
    assert primary.hits == 1
    now[0] += 1.0
    await limiter.hit("k", limit)
    assert primary.hits == 2  # one probe per window


async def test_an_outage_is_logged_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    warnings: list[dict[str, Any]] = []

    class Recorder:
        def warning(self, event: str, **fields: Any) -> None:
            warnings.append({"event": event, **fields})

    monkeypatch.setattr(redis_clients, "logger", Recorder())
    now = [0.0]
    report = OutageReport("test", interval_seconds=60.0, clock=lambda: now[0])
    failed_before = failures("test")
    for _ in range(5):
        report.failed(TimeoutError("no answer"), "fallback")
        now[0] += 10.0  # 0, 10, ... 40: one warning, four failures counted only
    now[0] = 60.0
    report.failed(TimeoutError("no answer"), "fallback")
    assert [w["failures_since_last_warning"] for w in warnings] == [0, 4]
    assert {w["event"] for w in warnings} == {"redis unavailable"}
    assert failures("test") == failed_before + 6
