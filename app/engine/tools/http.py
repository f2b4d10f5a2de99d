"""An agent's custom tool called over HTTP, behind the outbound URL guard.

The guard (app/webhooks/ssrf.py, the one webhooks and agent writes use) runs again at call
time, since DNS may have changed since the agent was saved; the request then goes to the
address the guard checked (Host header and TLS name kept), so a second lookup cannot send
it elsewhere. Answers are read up to a size limit, within the tool timeout.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from app.core.tls import client_tls_context
from app.kit.errors import InvalidInput
from app.webhooks.ssrf import Resolver, resolve_public_addresses, system_resolver

MAX_TOOL_RESPONSE_BYTES = 64 * 1024
# Characters of a tool's answer an event reports and the offline responder says.
MAX_ANSWER_LENGTH = 500
# Keys of a JSON answer taken as the tool's answer, in this order.
ANSWER_KEYS = ("answer", "result", "message", "text", "status")
QUERY_METHODS = ("GET", "DELETE")


@dataclass(frozen=True, slots=True)
class ToolResult:
    success: bool
    answer: str
    status_code: int | None = None
    error: str | None = None
    # The whole answer (within MAX_TOOL_RESPONSE_BYTES), for a model to read.
    body: bytes = field(default=b"", compare=False, repr=False)


class ToolCaller:
    """Calls custom tools; one per process (it keeps connections)."""

    def __init__(
        self,
        *,
        allow_private: bool,
        timeout: float,
        resolver: Resolver = system_resolver,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._allow_private = allow_private
        self._timeout = timeout
        self._resolver = resolver
        self._client = httpx.AsyncClient(
            timeout=timeout,
            follow_redirects=False,
            transport=transport,
            verify=client_tls_context(),
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __call__(self, tool: dict[str, Any], arguments: dict[str, Any]) -> ToolResult:
        method = tool.get("method") or "POST"
        query = method in QUERY_METHODS
        exchange = await self.exchange(
            method,
            tool["url"],
            params={k: str(v) for k, v in arguments.items()} if query else None,
            json=None if query else arguments,
        )
        if exchange.error is not None:
            return ToolResult(success=False, answer="", error=exchange.error)
        if not exchange.ok:
            return ToolResult(
                success=False,
                answer="",
                status_code=exchange.status_code,
                error=f"HTTP {exchange.status_code}",
            )
        return ToolResult(
            success=True,
            answer=answer_text(exchange.body),
            status_code=exchange.status_code,
            body=exchange.body,
        )

    async def exchange(
        self,
        method: str,
        url_text: str,
        *,
        params: dict[str, str] | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
        data: dict[str, str] | None = None,
    ) -> Exchange:
        """One guarded request to a user-given URL; never raises for what the far end does."""
        try:
            targets = await resolve_public_addresses(
                url_text, allow_private=self._allow_private, resolver=self._resolver
            )
        except InvalidInput as exc:
            return Exchange(error=f"refused: {exc.message}")
        url = httpx.URL(url_text)
        sent_headers: dict[str, str] = {"Accept": "application/json", **(headers or {})}
        extensions: dict[str, Any] = {}
        if targets:  # connect to the checked address, not to a second lookup's answer
            target = targets[0]
            sent_headers["Host"] = url.netloc.decode("ascii")
            if url.scheme == "https":
                extensions["sni_hostname"] = target.host
            url = url.copy_with(host=str(target.address))
        request = self._client.build_request(
            method,
            url,
            headers=sent_headers,
            extensions=extensions,
            params=params,
            json=json,
            data=data,
        )
        try:
            async with asyncio.timeout(self._timeout):  # the whole exchange, slow bodies too
                response = await self._client.send(request, stream=True)
                try:
                    body = await _read_limited(response)
                finally:
                    await response.aclose()
        except (httpx.TimeoutException, TimeoutError):
            return Exchange(error="timeout")
        except httpx.HTTPError as exc:
            return Exchange(error=type(exc).__name__)
        return Exchange(status_code=response.status_code, body=body)


@dataclass(frozen=True, slots=True)
class Exchange:
    status_code: int | None = None
    body: bytes = b""
    error: str | None = None  # the request did not complete (refused, timeout, network)

    @property
    def ok(self) -> bool:
        return self.error is None and self.status_code is not None and self.status_code < 300


async def _read_limited(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_TOOL_RESPONSE_BYTES:
            raise httpx.DecodingError("the tool answered more than the limit")
        chunks.append(chunk)
    return b"".join(chunks)


def answer_text(body: bytes) -> str:
    """What the agent says from a tool's answer: a JSON object's answer field (or the whole
    JSON), else the text."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace").strip()[:MAX_ANSWER_LENGTH]
    if isinstance(value, dict):
        for key in ANSWER_KEYS:
            found = value.get(key)
            if isinstance(found, str | int | float) and not isinstance(found, bool):
                return str(found)[:MAX_ANSWER_LENGTH]
    if isinstance(value, str):
        return value[:MAX_ANSWER_LENGTH]
    return orjson.dumps(value).decode()[:MAX_ANSWER_LENGTH]
