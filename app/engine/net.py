"""HTTP clients for the engine's outbound calls (model endpoints, MCP servers), behind the
outbound URL guard at call time.

The providers' SDKs (and the MCP SDK) take an HTTP client; ours is built on `GuardedTransport`,
which runs every request's URL through the guard of app/webhooks/ssrf.py and then sends it to
the address the guard checked (Host header and TLS server name kept), so a DNS answer that
changed since the agent was saved cannot send it to a private address. Response bodies are
cut off past a size limit. The transport is written once for both `httpx` (the groq SDK) and
`httpx2` (openai, anthropic, mcp), which share this interface.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import openai

from app.core.tls import client_tls_context
from app.kit.errors import InvalidInput
from app.webhooks.ssrf import Resolver, resolve_public_addresses, system_resolver


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
    requests leave through the openai SDK's aiohttp-backed client (`DefaultAioHttpClient`),
    ~30 % less CPU a model call than httpx2's own connection pool (docs/benchmarks.md)."""

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

    class GuardedTransport(http.AsyncBaseTransport):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            # Every open connection stays open: past the default 20 kept alive, a worker
            # answering many conversations at once reconnected for most of its model calls.
            limits = http.Limits(max_connections=100, max_keepalive_connections=100)
            self._via: Any = None
            if over_aiohttp:
                self._via = openai.DefaultAioHttpClient(
                    verify=client_tls_context(), limits=limits, follow_redirects=False
                )
            else:
                self._inner = http.AsyncHTTPTransport(verify=client_tls_context(), limits=limits)

        async def handle_async_request(self, request: Any) -> Any:
            try:
                targets = await resolve_public_addresses(
                    str(request.url), allow_private=allow_private, resolver=resolver
                )
            except InvalidInput as exc:
                raise http.ConnectError(f"refused: {exc.message}", request=request) from None
            for name in drop_headers:
                request.headers.pop(name, None)
            if targets:  # connect to the checked address; Host was set from the URL already
                target = targets[0]
                if request.url.scheme == "https":
                    request.extensions = {**request.extensions, "sni_hostname": target.host}
                request.url = request.url.copy_with(host=str(target.address))
            if self._via is not None:  # the checked request, sent as it is (a stream)
                response = await self._via.send(request, stream=True)
            else:
                response = await self._inner.handle_async_request(request)
            response.stream = LimitedStream(response.stream)
            return response

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
