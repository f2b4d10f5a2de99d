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
import ssl
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import aiohttp

from app.kit.clock import utcnow
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
        self._resolver = ssrf.GuardedResolver(
            allow_private=allow_private, resolver=resolver, is_forbidden=is_forbidden
        )
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                resolver=self._resolver,
                use_dns_cache=False,  # every new connection is judged by its own lookup
                limit=MAX_CONNECTIONS,
                keepalive_timeout=KEEPALIVE_SECONDS,
                ssl=self._ssl,
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
