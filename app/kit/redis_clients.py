"""The API process's Redis clients, and how their users degrade while Redis fails.

Two clients, because they wait differently:

- The command client (rate limits, caches, event publishing) bounds every connect and every
  reply (SWITCHBOARD_REDIS_CONNECT_TIMEOUT_SECONDS, SWITCHBOARD_REDIS_TIMEOUT_SECONDS): a Redis
  that stops answering (paused, partitioned, a black-hole address) costs a request at most that
  long, never a hang. A timed-out command is not retried (the caller falls back at once); a
  broken pooled connection (Redis restarted) is retried once on a fresh one.
- The listening client (pub/sub of GraphQL subscriptions) has no read timeout: a subscriber
  waits for minutes between events. TCP keepalive notices a peer that vanished.

What each user does when a command fails is its own rule (docs/operations.md, "When Redis
fails"): rate limits fall back to per-process buckets, caches load from the database, event
publishing drops the live copy. Each counts its fallbacks in `switchboard_redis_failures_total`
and logs a warning at most once per `OUTAGE_LOG_SECONDS`.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Protocol

import structlog
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

if TYPE_CHECKING:
    from prometheus_client import Counter

logger = structlog.get_logger("switchboard.redis")


class RedisSettings(Protocol):
    """What the clients read of the settings (app/config.py, a layer above the kit)."""

    @property
    def redis_url(self) -> str | None: ...

    @property
    def redis_connect_timeout_seconds(self) -> float: ...

    @property
    def redis_timeout_seconds(self) -> float: ...


# What a failing Redis raises: its own errors (timeouts included), and the socket's.
REDIS_FAILURES: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)
OUTAGE_LOG_SECONDS = 60.0
# Keepalive of the listening client: a dead peer is noticed after about 30 + 3 x 10 s.
_KEEPALIVE = {
    name: value
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))
    if hasattr(socket, name)
}


@cache
def failures_counter() -> Counter:
    """`switchboard_redis_failures_total`, made on first use: app.config reaches this module,
    and a worker process must choose its metrics directory before prometheus_client is
    imported (workers/process.py)."""
    from prometheus_client import Counter

    return Counter(
        "switchboard_redis_failures_total",
        "Redis commands of the API process that failed, by what fell back",
        ["use"],
    )


def command_client(settings: RedisSettings) -> Redis | None:
    """Every command bounded by the settings' timeouts; None without REDIS_URL."""
    if not settings.redis_url:
        return None
    return Redis.from_url(
        settings.redis_url,
        socket_connect_timeout=settings.redis_connect_timeout_seconds,
        socket_timeout=settings.redis_timeout_seconds,
        # Only a broken connection is worth one more try; a silent Redis would just cost the
        # timeout again.
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    )


def listening_client(settings: RedisSettings) -> Redis | None:
    """For pub/sub: connects within the connect timeout, then waits for messages forever."""
    if not settings.redis_url:
        return None
    return Redis.from_url(
        settings.redis_url,
        socket_connect_timeout=settings.redis_connect_timeout_seconds,
        socket_timeout=None,
        socket_keepalive=True,
        socket_keepalive_options={getattr(socket, name): v for name, v in _KEEPALIVE.items()},
        retry=Retry(NoBackoff(), 0),
    )


class OutageReport:
    """Counts one use's Redis failures and logs them, one warning per interval at most."""

    def __init__(
        self,
        use: str,
        interval_seconds: float = OUTAGE_LOG_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.use = use
        self.interval_seconds = interval_seconds
        self._clock = clock
        self._logged_at: float | None = None
        self._unlogged = 0
        self._counter = failures_counter().labels(use=use)

    def failed(self, error: BaseException, fallback: str) -> None:
        self._counter.inc()
        now = self._clock()
        if self._logged_at is not None and now - self._logged_at < self.interval_seconds:
            self._unlogged += 1
            return
        logger.warning(
            "redis unavailable",
            use=self.use,
            fallback=fallback,
            error=repr(error),
            failures_since_last_warning=self._unlogged,
        )
        self._logged_at = now
        self._unlogged = 0
