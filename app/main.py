"""create_app(): Starlette with the REST surface, GraphQL, health and metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

import structlog
from sqlalchemy import text
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from app.config import Settings, get_settings
from app.graphql.ide import STATIC_DIR, STATIC_URL_PREFIX
from app.graphql.view import GraphQLEndpoint
from app.idempotency.service import purge_expired
from app.kit.collector import tune_for_serving
from app.kit.domains import collect
from app.kit.http_errors import json_response
from app.observability import ObservabilityMiddleware, configure_logging, metrics_endpoint
from app.resources import Resources
from app.voice.runtime import serving_streams
from rest_compat.app import build_routes

logger = structlog.get_logger("switchboard")


async def healthz(_request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    """200 only when the database (and Redis, where configured) answer."""
    resources: Resources = request.app.state.resources
    checks: dict[str, str] = {}
    try:
        async with resources.session(writes=False) as session:
            await session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    if resources.redis is not None:
        try:
            await resources.redis.ping()
            checks["redis"] = "ok"
        except Exception as exc:
            checks["redis"] = f"error: {type(exc).__name__}"
    ready = all(value == "ok" for value in checks.values())
    return json_response(
        {"status": "ok" if ready else "unavailable", "checks": checks}, 200 if ready else 503
    )


async def http_error(_request: Request, exc: Exception) -> Response:
    """Unknown paths and wrong methods answer JSON like every other error."""
    assert isinstance(exc, HTTPException)
    return json_response({"detail": exc.detail}, exc.status_code, exc.headers)


def create_app(
    settings: Settings | None = None,
    resources: Resources | None = None,
    *,
    background: Callable[[], AbstractAsyncContextManager[None]] | None = None,
) -> Starlette:
    """The ASGI app. Tests pass `resources` bound to their own transaction; `background`
    runs alongside the server once it is ready (the embedded job worker)."""
    settings = settings or (resources.settings if resources else get_settings())
    owns_resources = resources is None

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if owns_resources:
            configure_logging(settings.log_level)
            app.state.resources = Resources.from_settings(settings)
        try:
            if owns_resources:
                await app.state.resources.start()
            async with app.state.resources.session(writes=True) as session:
                purged = await purge_expired(session)
                await session.commit()
            if purged:
                logger.info("purged expired idempotency records", count=purged)
            if owns_resources:
                tune_for_serving()
            async with AsyncExitStack() as stack:
                if settings.voice_serve_streams:  # live calls' media streams end here too
                    await stack.enter_async_context(serving_streams(app, app.state.resources))
                if background is not None:
                    await stack.enter_async_context(background())
                yield
        finally:
            if owns_resources:
                await app.state.resources.aclose()

    graphql = GraphQLEndpoint()
    app = Starlette(
        routes=[
            # First: the REST routes answer most requests, and are matched by one lookup.
            *build_routes("/api/v1"),
            # Then the dashboards' endpoint, before the rarely called ones.
            Route("/graphql", graphql, methods=["GET", "POST"]),
            # Upstream platforms' callbacks (WhatsApp, the carrier): each domain's callbacks.py.
            *(route for routes in collect("callbacks", "ROUTES") for route in routes),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            # graphql-transport-ws subscriptions (app/graphql/view.py).
            WebSocketRoute("/graphql", graphql),
            Mount(STATIC_URL_PREFIX, StaticFiles(directory=STATIC_DIR), name="graphiql"),
        ],
        middleware=[Middleware(ObservabilityMiddleware, access_log=settings.access_log)],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    if resources is not None:
        app.state.resources = resources
    return app


def create_app_from_env() -> Starlette:
    """Factory for `uvicorn --factory` (and `switchboard serve`)."""
    return create_app()
