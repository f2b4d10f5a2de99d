"""Sends at a channel's full rate: Graph API's messages endpoint over aiohttp, behind the
platform interface.

One process reached ≈ 1.5k POST/s with httpx and ≈ 12-16k/s with aiohttp (the webhook
sender's client), so a worker keeps one `BulkMessageSender` and a campaign run sends through
`BulkGraphApiClient`: the Graph API client (the same `WhatsAppPlatform`, wire format and typed
errors) whose message sends take that sender; template management stays on httpx. Nothing is
retried here: the caller decides, because a throttled send goes back to the channel's send
governor (app/integrations/whatsapp/governed.py) rather than sleeping in place.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from app.integrations.whatsapp.client import GraphApiClient, sent_message_of
from app.integrations.whatsapp.errors import PlatformUnavailable, from_error_body
from app.integrations.whatsapp.types import GRAPH_API_VERSION, SentMessage, graph_root

DEFAULT_TIMEOUT_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 5.0


class NeverSent(PlatformUnavailable):
    """The connection could not be made: the request never left, so it may be sent again."""


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
            raise PlatformUnavailable(
                f"Messaging platform unreachable: {type(exc).__name__}"
            ) from exc
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
    """A channel's Graph API client whose messages leave through the worker's shared
    `BulkMessageSender`. Throttling is raised at once (`retry_throttling=False`), like every
    other refusal of a send: the sender's caller holds the channel or the recipient."""

    def __init__(self, sender: BulkMessageSender, access_token: str) -> None:
        super().__init__(
            sender.base_url, access_token, retry_throttling=False, version=sender.version
        )
        self._sender = sender
        self._headers = headers_for(access_token)

    async def _send(self, phone_number_id: str, payload: dict[str, Any]) -> SentMessage:
        return await self._sender.send(self._headers, phone_number_id, payload)


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
