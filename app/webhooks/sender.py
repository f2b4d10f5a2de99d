"""The HTTP side of a webhook delivery: one POST, its outcome, nothing stored.

One `WebhookSender` per worker process keeps connections alive per receiver host (aiohttp's
pool is keyed on host, port and TLS settings, so a connection verified for one host never
carries another host's request). The SSRF guard sits in the client itself: `check_url_form`
before each request and `GuardedResolver` for each new connection (app/webhooks/ssrf.py).

Redirects are never followed (a public receiver must not bounce us to 169.254.169.254) and no
environment proxy is used (a proxy would resolve the host itself, undoing the guard).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime

import aiohttp

from app.core.clock import utcnow
from app.kit.errors import InvalidInput
from app.webhooks import ssrf

RESPONSE_BODY_LIMIT = 2048
# Idle connections kept per process, and for how long: enough for every receiver a busy
# worker talks to, short enough that a receiver's DNS change is seen within a minute.
MAX_CONNECTIONS = 256
KEEPALIVE_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    status_code: int | None
    duration_ms: int
    error: str | None
    response_body: str | None
    retry_after: float | None

    @property
    def success(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def retry_after_seconds(value: str | None) -> float | None:
    """A `Retry-After` header (seconds or an HTTP date) as seconds from now."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - utcnow()).total_seconds())


class WebhookSender:
    """POSTs signed bodies; open it inside the event loop that will use it."""

    def __init__(
        self,
        *,
        allow_private: bool,
        timeout_seconds: float,
        resolver: ssrf.Resolver = ssrf.system_resolver,
        ssl_context: ssl.SSLContext | None = None,
        is_forbidden: ssrf.AddressJudge = ssrf.is_forbidden_address,
    ) -> None:
        self.allow_private = allow_private
        self.timeout_seconds = timeout_seconds
        self._resolver = resolver
        self._is_forbidden = is_forbidden
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = ssrf.guarded_connector(
                allow_private=self.allow_private,
                limit=MAX_CONNECTIONS,
                keepalive_seconds=KEEPALIVE_SECONDS,
                ssl=self._ssl,
                resolver=self._resolver,
                is_forbidden=self._is_forbidden,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None),  # asyncio.timeout below is the limit
                trust_env=False,
                auto_decompress=False,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> AttemptOutcome:
        started = time.perf_counter()

        def elapsed_ms() -> int:
            return int((time.perf_counter() - started) * 1000)

        try:
            ssrf.check_url_form(url, self.allow_private)
            async with asyncio.timeout(self.timeout_seconds):
                async with self._client().post(
                    url, data=body, headers=headers, allow_redirects=False
                ) as response:
                    status = response.status
                    retry_after = response.headers.get("Retry-After")
                    received = await _read_prefix(response.content, RESPONSE_BODY_LIMIT)
        except InvalidInput as exc:
            return AttemptOutcome(None, elapsed_ms(), f"refused: {exc.message}", None, None)
        except TimeoutError:
            error = f"timed out after {self.timeout_seconds:g} s"
            return AttemptOutcome(None, elapsed_ms(), error, None, None)
        except (aiohttp.ClientError, OSError) as exc:
            return AttemptOutcome(None, elapsed_ms(), _describe(exc), None, None)
        return AttemptOutcome(
            status,
            elapsed_ms(),
            None if 200 <= status < 300 else f"HTTP {status}",
            received.decode("utf-8", errors="replace"),
            retry_after_seconds(retry_after),
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def _read_prefix(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """At most `limit` bytes of the body: the rest is never read (the connection then closes)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await stream.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


MAX_OPEN_SECONDS = 600.0
# A healthy endpoint that is merely busy is tried again this soon when its slots stay taken.
BUSY_RETRY_SECONDS = 1.0


@dataclass(slots=True)
class _Endpoint:
    in_flight: int = 0
    failures: int = 0  # consecutive
    opened: int = 0  # times opened since the last success
    open_until: float = 0.0
    # Deliveries waiting for a slot: each is handed one (None) or told to defer (seconds).
    waiters: deque[asyncio.Future[float | None]] = field(default_factory=deque)


class EndpointGate:
    """Fair sending across endpoints: a per-endpoint cap on attempts in flight, and a circuit
    breaker for endpoints that keep failing. One per worker process (its loop's state).

    `admit` either takes a slot (None) or says how long to defer the delivery: it then goes
    back to the outbox without an attempt, freeing everything it held. A delivery may wait up
    to `slot_wait_seconds` for a slot (at most `concurrency` wait per endpoint), so a busy
    healthy endpoint's bursts go through at once while a slow or dead endpoint holds at most
    `concurrency` attempts and as many short waits of a process, never the queue. After
    `failures_to_open` failures in a row the circuit opens for `open_seconds` (doubling each
    time it reopens, up to ten minutes); then one trial attempt at a time is let through, and
    a success closes it.
    """

    def __init__(
        self,
        *,
        concurrency: int,
        failures_to_open: int,
        open_seconds: float,
        busy_defer_seconds: float,
        slot_wait_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.concurrency = concurrency
        self.failures_to_open = failures_to_open
        self.open_seconds = open_seconds
        self.busy_defer_seconds = busy_defer_seconds
        self.slot_wait_seconds = slot_wait_seconds
        self._clock = clock
        self._endpoints: dict[str, _Endpoint] = {}

    def _limit(self, state: _Endpoint) -> float | int:
        """Attempts allowed in flight now, or the seconds until the open circuit half-opens."""
        if state.failures < self.failures_to_open:
            return self.concurrency
        now = self._clock()
        if now < state.open_until:
            return -(state.open_until - now)
        return 1  # half-open: one trial at a time

    def _defer_busy(self, state: _Endpoint) -> float:
        # A failing endpoint frees its slots only as its attempts time out.
        base = self.busy_defer_seconds if state.failures else BUSY_RETRY_SECONDS
        return base * random.uniform(0.5, 1.0)

    async def admit(self, endpoint: str) -> float | None:
        state = self._endpoints.setdefault(endpoint, _Endpoint())
        limit = self._limit(state)
        if limit < 0:
            return -limit + random.uniform(0, 1)
        if state.in_flight < limit:
            state.in_flight += 1
            return None
        if len(state.waiters) >= self.concurrency:
            return self._defer_busy(state)
        waiter: asyncio.Future[float | None] = asyncio.get_running_loop().create_future()
        state.waiters.append(waiter)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), self.slot_wait_seconds)
        except TimeoutError:
            if waiter.done():
                return waiter.result()  # handed a slot (or told to defer) just now
            waiter.cancel()
            return self._defer_busy(state)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result() is None:
                self._pass_slot(endpoint, state)  # handed a slot it will never use
            raise
        finally:
            if not waiter.done():
                waiter.cancel()  # our own cancellation: a release skips it
            with contextlib.suppress(ValueError):
                state.waiters.remove(waiter)

    def release(self, endpoint: str, success: bool) -> None:
        state = self._endpoints.get(endpoint)
        if state is None:
            return
        if success:
            state.failures = state.opened = 0
        else:
            state.failures += 1
            # Opens now, or again after a failed trial; attempts that were in flight when it
            # opened fail meanwhile without extending it.
            if state.failures >= self.failures_to_open and self._clock() >= state.open_until:
                seconds = min(MAX_OPEN_SECONDS, self.open_seconds * 2.0**state.opened)
                state.opened += 1
                state.open_until = self._clock() + seconds
        self._pass_slot(endpoint, state)

    def _pass_slot(self, endpoint: str, state: _Endpoint) -> None:
        """A slot is free: hand it to the first waiter that may have it, or give it back."""
        limit = self._limit(state)
        while state.waiters:
            waiter = state.waiters.popleft()
            if waiter.done():
                continue
            if limit < 0:
                waiter.set_result(-limit + random.uniform(0, 1))
                continue
            if state.in_flight <= limit:
                waiter.set_result(None)  # the slot passes to it: in_flight unchanged
                return
            state.waiters.appendleft(waiter)
            break
        state.in_flight -= 1
        if state.in_flight == 0 and state.failures == 0 and not state.waiters:
            del self._endpoints[endpoint]  # only endpoints with a story are remembered

    def is_open(self, endpoint: str) -> bool:
        state = self._endpoints.get(endpoint)
        return state is not None and self._limit(state) < 0
