"""HTTP clients for the engine's outbound calls (model endpoints, MCP servers), behind the
outbound URL guard at call time.

The providers' SDKs (and the MCP SDK) take an HTTP client; ours is built on `GuardedTransport`,
which runs every request through the guard of app/webhooks/ssrf.py, so a DNS answer that
changed since the agent was saved cannot send it to a private address:
- over aiohttp (the openai and anthropic SDKs), as webhook deliveries are guarded: the URL's
  form (IP literals included) before each request, and `GuardedResolver` judging the
  addresses of each new connection in the lookup that opens it;
- otherwise (the groq SDK on httpx, the MCP SDK on httpx2's own pool): the URL resolved and
  judged before each request, which then goes to the address checked (Host header and TLS
  server name kept).
Response bodies are cut off past a size limit. The transport is written once for both `httpx`
and `httpx2`, which share this interface.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import aiohttp

# The SDK's own httpx2-over-aiohttp transport: the one `openai.DefaultAioHttpClient` wraps.
from openai._vendor.httpx_aiohttp import AiohttpTransport

from app.core.tls import client_tls_context
from app.kit.errors import InvalidInput
from app.webhooks.ssrf import (
    Resolver,
    check_url_form,
    guarded_connector,
    resolve_public_addresses,
    system_resolver,
)

# Connections kept open: past the default 20 kept alive, a worker answering many
# conversations at once reconnected for most of its model calls.
MAX_CONNECTIONS = 100
# How long an idle connection over aiohttp stays open (httpx's default, as before): shorter
# than common servers' idle timeouts, so a connection the server closed is seldom reused; an
# endpoint's new DNS answer is used (and judged) within this.
KEEPALIVE_SECONDS = 5.0


def guarded_transport(
    http: ModuleType,
    *,
    allow_private: bool,
    max_response_bytes: int,
    resolver: Resolver = system_resolver,
    drop_headers: tuple[str, ...] = (),
    over_aiohttp: bool = False,
) -> Any:
    """A transport of `http` (the httpx or httpx2 module) that guards every request.
    `drop_headers` are removed before sending (the SDKs always send a key header; a keyless
    request to an agent's own endpoint must carry none). `over_aiohttp` (httpx2 only): the
    requests leave through the openai SDK's aiohttp transport on a session whose resolver is
    the guard: ~30 % less CPU a model call than httpx2's own connection pool, and no lookup
    per request (docs/benchmarks.md)."""

    class LimitedStream(http.AsyncByteStream):  # type: ignore[misc, name-defined]
        def __init__(self, stream: Any) -> None:
            self._stream = stream

        async def __aiter__(self) -> AsyncIterator[bytes]:
            size = 0
            async for chunk in self._stream:
                size += len(chunk)
                if size > max_response_bytes:
                    raise http.ReadError(f"response larger than {max_response_bytes} bytes")
                yield chunk

        async def aclose(self) -> None:
            await self._stream.aclose()

    def guarded_session() -> aiohttp.ClientSession:
        """Made by the transport on its first request, inside the loop that uses it."""
        connector = guarded_connector(
            allow_private=allow_private,
            limit=MAX_CONNECTIONS,
            keepalive_seconds=KEEPALIVE_SECONDS,
            ssl=client_tls_context(),
            resolver=resolver,
        )
        # No environment proxy: a proxy would resolve the host itself, undoing the guard.
        return aiohttp.ClientSession(connector=connector, trust_env=False)

    class GuardedTransport(http.AsyncBaseTransport):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            self._via: Any = None
            if over_aiohttp:
                # `verify`: the transport would otherwise build (and load) a TLS context of its own.
                self._via = AiohttpTransport(verify=client_tls_context(), client=guarded_session)
            else:
                limits = http.Limits(
                    max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS
                )
                self._inner = http.AsyncHTTPTransport(verify=client_tls_context(), limits=limits)

        async def handle_async_request(self, request: Any) -> Any:
            for name in drop_headers:
                request.headers.pop(name, None)
            try:
                if self._via is not None:
                    response = await self._over_aiohttp(request)
                else:
                    response = await self._checked(request)
            except InvalidInput as exc:
                raise http.ConnectError(f"refused: {exc.message}", request=request) from None
            response.stream = LimitedStream(response.stream)
            return response

        async def _over_aiohttp(self, request: Any) -> Any:
            """The URL's form judged now; a new connection's addresses by its own lookup."""
            check_url_form(str(request.url), allow_private)
            return await self._via.handle_async_request(request)

        async def _checked(self, request: Any) -> Any:
            """Resolved and judged now, then sent to the address checked."""
            targets = await resolve_public_addresses(
                str(request.url), allow_private=allow_private, resolver=resolver
            )
            if targets:  # connect to the checked address; Host was set from the URL already
                target = targets[0]
                if request.url.scheme == "https":
                    request.extensions = {**request.extensions, "sni_hostname": target.host}
                request.url = request.url.copy_with(host=str(target.address))
            return await self._inner.handle_async_request(request)

        async def aclose(self) -> None:
            await (self._via if self._via is not None else self._inner).aclose()

    return GuardedTransport()


def guarded_client(
    http: ModuleType,
    *,
    allow_private: bool,
    timeout: float,
    max_response_bytes: int,
    resolver: Resolver = system_resolver,
    drop_headers: tuple[str, ...] = (),
    over_aiohttp: bool = False,
    **options: Any,
) -> Any:
    """An `http.AsyncClient` on a guarded transport: no redirects, the given timeout."""
    return http.AsyncClient(
        transport=guarded_transport(
            http,
            allow_private=allow_private,
            max_response_bytes=max_response_bytes,
            resolver=resolver,
            drop_headers=drop_headers,
            over_aiohttp=over_aiohttp,
        ),
        timeout=timeout,
        follow_redirects=False,
        **options,
    )
