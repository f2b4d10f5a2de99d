"""Sends at a channel's full rate: Graph API's messages endpoint over aiohttp, behind the
platform interface.

One process reached ≈ 1.5k POST/s with httpx and ≈ 12-16k/s with aiohttp (the webhook
sender's client), so a worker keeps one `BulkMessageSender` and a campaign run sends through
`BulkGraphApiClient`: the Graph API client (the same `WhatsAppPlatform`, wire format and typed
errors) whose message sends take that sender; template management stays on httpx. A reply to
a conversation leaves the same way, through its process's sender (`reply_sender`), retried as
`GraphApiClient` retries; a campaign run retries nothing here (it decides itself). Throttling
is never retried here: a throttled send goes back to the channel's send governor
(app/integrations/whatsapp/governed.py) rather than sleeping in place.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson

from app.config import Settings
from app.integrations.whatsapp.client import GraphApiClient, RetryPolicy, Sleep, sent_message_of
from app.integrations.whatsapp.errors import PlatformUnavailable, WhatsAppError, from_error_body
from app.integrations.whatsapp.types import GRAPH_API_VERSION, SentMessage, graph_root

DEFAULT_TIMEOUT_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 5.0


class NeverSent(PlatformUnavailable):
    """The connection could not be made: the request never left, so it may be sent again."""


class MaybeSent(PlatformUnavailable):
    """The connection failed once the request had left: it may have been sent, so it is never
    sent again by itself."""


class BulkMessageSender:
    """Sends to one Graph API base URL, each with its channel's access token; one per worker
    process (its connections are kept alive across campaigns and runs), used on one loop."""

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int = 512,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        version: str = GRAPH_API_VERSION,
    ) -> None:
        self.base_url = base_url
        self.version = version
        self.root = graph_root(base_url, version)
        self._timeout = aiohttp.ClientTimeout(
            total=timeout_seconds, sock_connect=CONNECT_TIMEOUT_SECONDS
        )
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections, keepalive_timeout=30),
                timeout=self._timeout,
                trust_env=False,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def send(
        self, headers: dict[str, str], phone_number_id: str, payload: dict[str, Any]
    ) -> SentMessage:
        """One message; `payload` as GraphApiClient builds it, `headers`:
        `headers_for(access_token)`, built once per client."""
        to = str(payload.get("to") or payload.get("recipient"))
        body = orjson.dumps(
            {"messaging_product": "whatsapp", "recipient_type": "individual", **payload}
        )
        url = f"{self.root}/{phone_number_id}/messages"
        try:
            async with self._client().post(
                url, data=body, headers=headers, allow_redirects=False
            ) as response:
                status = response.status
                retry_after = response.headers.get("Retry-After")
                raw = await response.read()
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            raise NeverSent(f"Messaging platform unreachable: {type(exc).__name__}") from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise MaybeSent(f"Messaging platform unreachable: {type(exc).__name__}") from exc
        parsed = _json_or_none(raw)
        if 200 <= status < 300:
            if parsed is None:
                raise PlatformUnavailable("Messaging platform answered with invalid JSON")
            return sent_message_of(parsed, to)
        raise from_error_body(parsed, status, _seconds(retry_after))

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class BulkGraphApiClient(GraphApiClient):
    """A channel's Graph API client whose messages leave through a shared `BulkMessageSender`
    (a worker's, or a process's for its replies). Throttling is raised at once
    (`retry_throttling=False`): the caller's send governor holds the channel or the recipient.
    Without `retry` (a campaign run, which decides itself) nothing else is retried either; with
    it, what `GraphApiClient` retries is: a send that never left, and the platform's retryable
    refusals (never one whose connection broke after it left)."""

    def __init__(
        self,
        sender: BulkMessageSender,
        access_token: str,
        *,
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        super().__init__(
            sender.base_url,
            access_token,
            retry=retry or RetryPolicy(attempts=1),
            sleep=sleep,
            retry_throttling=False,
            version=sender.version,
        )
        self._sender = sender
        self._headers = headers_for(access_token)

    async def _send(self, phone_number_id: str, payload: dict[str, Any]) -> SentMessage:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._sender.send(self._headers, phone_number_id, payload)
            except (MaybeSent, NeverSent) as unreached:
                unsent = self._unreached_retry_delay(attempt, isinstance(unreached, NeverSent))
                if unsent is None:
                    raise
                delay = unsent
            except WhatsAppError as error:
                refused = self._retry_delay(error, attempt, error.http_status or 0)
                if refused is None:
                    raise
                delay = refused
            await self._sleep(delay)


def reply_sender(settings: Settings) -> BulkMessageSender:
    """The sender a process's conversation replies share (`Resources.per_loop(reply_sender)`):
    its connections to the Graph API stay open from one reply to the next."""
    return BulkMessageSender(settings.graph_api_url, version=settings.graph_api_version)


def headers_for(access_token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {access_token}", "Content-Type": "application/json"}


def _json_or_none(raw: bytes) -> Any:
    try:
        return orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return None


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None
