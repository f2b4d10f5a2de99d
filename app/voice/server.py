"""`switchboard voice`: a process that only terminates media streams, and the server that
drains them on SIGTERM.

Voice work is CPU-bound (VAD, resampling, the offline voice), so production runs it in its
own processes, scaled on their own, behind the same public URL as the API (route
`/voice/` to them); the API then sets `SWITCHBOARD_VOICE_SERVE_STREAMS=false`. `make run`
keeps one process: `switchboard serve` terminates streams too.

`DrainingServer` is uvicorn's server with a drain step first on shutdown: it stops taking
connections, refuses new streams, lets calls under way finish for up to
`SWITCHBOARD_VOICE_DRAIN_SECONDS`, and only then closes what is left (uvicorn by itself
would close every websocket at once).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route

from app.config import Settings, get_settings
from app.health import healthz, readyz
from app.kit.body import WEBSOCKET_MAX_MESSAGE_BYTES
from app.kit.collector import tune_for_serving
from app.observability import ObservabilityMiddleware, configure_logging, metrics_endpoint
from app.resources import Resources
from app.voice.callbacks import ROUTES
from app.voice.runtime import drain_all, ready_for_calls, serving_streams


class DrainingServer(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        await drain_all(get_settings().voice_drain_seconds)
        await super().shutdown(sockets)


def create_voice_app(settings: Settings | None = None) -> Starlette:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        configure_logging(settings.log_level)
        resources = Resources.from_settings(settings, serves_api=False)
        app.state.resources = resources
        await resources.start()
        await ready_for_calls(resources)
        # The collector's full passes walk everything the process holds: one took 284 ms in
        # the middle of 20 calls' audio before the heap was frozen (docs/benchmarks.md).
        tune_for_serving()
        try:
            async with serving_streams(app, resources):
                yield
        finally:
            await resources.aclose()

    from starlette.middleware import Middleware

    return Starlette(
        routes=[
            *ROUTES,
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
        ],
        middleware=[Middleware(ObservabilityMiddleware, access_log=settings.access_log)],
        lifespan=lifespan,
    )


def serve(app: str, *, host: str, port: int, log_level: str) -> None:
    """Serve the app factory `app` ("module:function") with draining on SIGTERM."""
    config = uvicorn.Config(
        app,
        factory=True,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        proxy_headers=True,
        # Websocket messages are read whole before anything looks at them: not past 1 MiB.
        ws_max_size=WEBSOCKET_MAX_MESSAGE_BYTES,
        # Media streams send 50 small messages a second each way per call; compressing each
        # (base64 μ-law barely shrinks) cost about 2 % of a voice process's CPU, profiled.
        ws_per_message_deflate=False,
    )
    DrainingServer(config).run()
