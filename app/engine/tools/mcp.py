"""Tools of an agent's Model Context Protocol servers, through the official `mcp` SDK client
(`ClientSession` over the `streamable_http` or `sse` transport).

Each operation opens a short session (connect, initialize, list or call, close) on an HTTP
client behind the outbound URL guard (app/engine/net.py), within the tool timeout and a
response size limit. What a server lists is cached per agent version and server; a failed
call forgets the entry so the next turn lists again. A server that is down leaves its tools
out of that turn only.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import orjson
import structlog

from app.engine.net import guarded_client
from app.engine.types import AgentProfile, ToolOutcome, ToolSpec
from app.kit.errors import InvalidInput
from app.webhooks.ssrf import Resolver, resolve_public_addresses, system_resolver

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

logger = structlog.get_logger("switchboard.engine")

MAX_RESPONSE_BYTES = 256 * 1024
MAX_TOOLS_PER_SERVER = 100
EXCERPT_LENGTH = 500
_CacheKey = tuple[str, str, str, str, str]


class McpUnavailable(Exception):
    """The server could not be reached, refused, or did not answer in time."""


class McpGateway:
    """One per process: the listing cache is shared by every conversation it serves."""

    def __init__(
        self,
        *,
        allow_private: bool,
        timeout: float,
        result_chars: int,
        cache_seconds: float,
        resolver: Resolver = system_resolver,
    ) -> None:
        self._allow_private = allow_private
        self._timeout = timeout
        self._result_chars = result_chars
        self._cache_seconds = cache_seconds
        self._resolver = resolver
        self._listings: dict[_CacheKey, tuple[float, list[ToolSpec]]] = {}

    @staticmethod
    def _key(agent: AgentProfile, server: dict[str, Any]) -> _CacheKey:
        return (
            agent.agent_id,
            agent.version,
            server["name"],
            server["url"],
            server.get("transport", ""),
        )

    async def tools(self, agent: AgentProfile, server: dict[str, Any]) -> list[ToolSpec] | None:
        """The server's tools the agent may use (`allowed_tools`), or None when the server
        cannot be listed now."""
        key = self._key(agent, server)
        cached = self._listings.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        try:
            async with self._session(server) as session:
                listing = await session.list_tools()
        except McpUnavailable as exc:
            logger.info("mcp server unavailable", server=server["name"], error=str(exc))
            return None
        allowed = server.get("allowed_tools")
        specs = [
            ToolSpec(
                name=tool.name,
                description=(tool.description or tool.title or tool.name)[:2000],
                parameters=tool.input_schema or {"type": "object", "properties": {}},
                kind="mcp",
            )
            for tool in listing.tools[:MAX_TOOLS_PER_SERVER]
            if allowed is None or tool.name in allowed
        ]
        if len(self._listings) > 10_000:  # agents come and go: never grow without end
            self._listings.clear()
        self._listings[key] = (time.monotonic() + self._cache_seconds, specs)
        return specs

    def forget(self, agent: AgentProfile, server: dict[str, Any]) -> None:
        self._listings.pop(self._key(agent, server), None)

    async def call(
        self, agent: AgentProfile, server: dict[str, Any], name: str, arguments: dict[str, Any]
    ) -> ToolOutcome:
        try:
            async with self._session(server) as session:
                result = await session.call_tool(name, arguments)
        except McpUnavailable as exc:
            self.forget(agent, server)
            return ToolOutcome(success=False, content=f"The tool failed: {exc}", error=str(exc))
        text = _result_text(result)
        content = text[: self._result_chars]
        if result.is_error:
            self.forget(agent, server)  # an unknown tool, say: the listing may be stale
            return ToolOutcome(
                success=False,
                content=content or "The tool failed.",
                excerpt=text[:EXCERPT_LENGTH],
                error="tool error",
            )
        return ToolOutcome(
            success=True,
            content=content,
            excerpt=text[:EXCERPT_LENGTH],
            data={"success": True, "answer": text[:EXCERPT_LENGTH]},
        )

    @asynccontextmanager
    async def _session(self, server: dict[str, Any]) -> AsyncIterator[ClientSession]:
        # The SDK on first use: its import costs seconds of start-up in every process.
        from mcp.client.session import ClientSession
        from mcp.client.sse import sse_client
        from mcp.client.streamable_http import streamable_http_client

        url = server["url"]
        try:
            await resolve_public_addresses(
                url, allow_private=self._allow_private, resolver=self._resolver
            )
        except InvalidInput as exc:
            raise McpUnavailable(f"refused: {exc.message}") from None

        def client(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            http: httpx2.AsyncClient = guarded_client(
                httpx2,
                allow_private=self._allow_private,
                timeout=self._timeout,
                max_response_bytes=MAX_RESPONSE_BYTES,
                resolver=self._resolver,
                headers=headers,
            )
            return http

        try:
            with anyio.fail_after(self._timeout):
                if server.get("transport") == "sse":
                    transport = sse_client(
                        url,
                        timeout=self._timeout,
                        sse_read_timeout=self._timeout,
                        httpx_client_factory=client,
                    )
                    async with transport as (read, write), ClientSession(read, write) as session:
                        await session.initialize()
                        yield session
                else:
                    async with (
                        client() as http,
                        streamable_http_client(
                            url, http_client=http, max_sse_event_size=MAX_RESPONSE_BYTES
                        ) as (read, write),
                        ClientSession(read, write) as session,
                    ):
                        await session.initialize()
                        yield session
        except TimeoutError:
            raise McpUnavailable("timeout") from None
        except McpUnavailable:
            raise
        except Exception as exc:  # the SDK surfaces transport failures as many types
            raise McpUnavailable(_describe(exc)) from None


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


def _result_text(result: Any) -> str:
    """The call's answer as text: its text contents, else its structured content as JSON."""
    parts = [item.text for item in result.content if getattr(item, "type", None) == "text"]
    if parts:
        return "\n".join(parts)
    if result.structured_content is not None:
        return orjson.dumps(result.structured_content).decode()
    return ""
