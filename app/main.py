"""create_app(): Starlette with the REST surface, GraphQL, health and metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

import structlog
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from app.config import Settings, get_settings
from app.cors import ApiCORS
from app.engine import providers
from app.graphql import view as graphql_view
from app.graphql.ide import STATIC_DIR, STATIC_URL_PREFIX
from app.graphql.view import GraphQLEndpoint
from app.health import healthz, readyz
from app.idempotency.repository import purge_expired
from app.kit.body import PLATFORM_CALLBACK_MAX_BYTES, BodyLimit, BodyLimitMiddleware, BodyTooLarge
from app.kit.collector import tune_for_serving
from app.kit.domains import collect
from app.kit.http_errors import ErrorStyle, error_response, json_response
from app.observability import ObservabilityMiddleware, configure_logging, metrics_endpoint
from app.resources import Resources
from app.voice.callbacks import ROUTES as VOICE_ROUTES
from app.voice.runtime import ready_for_calls, serving_streams
from rest_compat.app import build_routes
from rest_compat.reference import STATIC_DIR as REFERENCE_DIR
from rest_compat.reference import STATIC_URL_PREFIX as REFERENCE_URL_PREFIX
from rest_compat.router import RestRoutes

logger = structlog.get_logger("switchboard")


HOME_PAGE = """<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <title>Switchboard</title>
    <style>
      body { font-family: system-ui, sans-serif; max-width: 40rem; margin: 3rem auto;
        padding: 0 1rem; line-height: 1.5; color: #222; }
      code { background: #f3f3f3; padding: 0 .25em; }
    </style>
  </head>
  <body>
    <h1>Switchboard</h1>
    <p>Voice AI agents and WhatsApp customer messaging, over REST and GraphQL. Every request
      needs <code>Authorization: Bearer &lt;API key&gt;</code>
      (<code>switchboard orgs create --name NAME</code> prints one).</p>
    <ul>
      <li><a href="/api/v1/docs">REST API reference</a> (try requests in the browser)</li>
      <li><a href="/graphql">GraphQL IDE</a> (GraphiQL; paste the key in Headers)</li>
      <li><a href="/api/v1/openapi.json">OpenAPI document</a></li>
      <li><a href="/healthz">Health</a> and <a href="/readyz">readiness</a></li>
    </ul>
  </body>
</html>
"""


async def home(_request: Request) -> Response:
    """Where a browser pointed at the service lands: links to the API's own pages."""
    return HTMLResponse(HOME_PAGE)


async def http_error(_request: Request, exc: Exception) -> Response:
    """Unknown paths and wrong methods answer JSON like every other error."""
    assert isinstance(exc, HTTPException)
    return json_response({"detail": exc.detail}, exc.status_code, exc.headers)


def _detail_limit(limit: int) -> BodyLimit:
    return BodyLimit(limit, lambda: error_response(BodyTooLarge(limit), ErrorStyle.DETAIL))


_CALLBACK_LIMIT = _detail_limit(PLATFORM_CALLBACK_MAX_BYTES)


def body_limits(
    routes: list[BaseRoute], callbacks: list[BaseRoute]
) -> Callable[[Scope], BodyLimit]:
    """Each request's body limit (app/kit/body.py): a REST operation's own, the GraphQL
    endpoint's, 1 MiB on platform callbacks, `max_body_bytes` on anything else."""
    rest = [route for route in routes if isinstance(route, RestRoutes)]
    callback_paths = frozenset(route.path for route in callbacks if isinstance(route, Route))

    def limit_for(scope: Scope) -> BodyLimit:
        path: str = scope["path"]
        if path in callback_paths:
            return _CALLBACK_LIMIT
        settings: Settings = scope["app"].state.resources.settings
        if path == "/graphql":
            return graphql_view.body_limit(settings)
        for routes_of_prefix in rest:
            operation = routes_of_prefix.operation(scope)
            if operation is not None:
                return operation.body_limit(settings)
        return _detail_limit(settings.max_body_bytes)

    return limit_for


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
                # A process that runs conversations imports their SDKs before it freezes
                # its heap; one that holds calls opens its database pool too.
                if settings.voice_serve_streams:
                    await ready_for_calls(app.state.resources)
                elif background is not None:
                    await providers.load_all()
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
    rest = build_routes("/api/v1")
    # Each domain's callbacks.py, then where calls' audio connects: app/voice/ builds on the
    # calls domain (it is not a resource domain of its own), so its routes are added here.
    callbacks = [
        *(route for routes in collect("callbacks", "ROUTES") for route in routes),
        *VOICE_ROUTES,
    ]
    app = Starlette(
        routes=[
            # First: the REST routes answer most requests, and are matched by one lookup.
            *rest,
            # Then the dashboards' endpoint, before the rarely called ones.
            Route("/graphql", graphql, methods=["GET", "POST"]),
            # Upstream platforms' callbacks (WhatsApp, the carrier): each domain's callbacks.py.
            *callbacks,
            Route("/", home, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            # graphql-transport-ws subscriptions (app/graphql/view.py).
            WebSocketRoute("/graphql", graphql),
            Mount(STATIC_URL_PREFIX, StaticFiles(directory=STATIC_DIR), name="graphiql"),
            Mount(REFERENCE_URL_PREFIX, StaticFiles(directory=REFERENCE_DIR), name="reference"),
        ],
        middleware=[
            Middleware(ObservabilityMiddleware, access_log=settings.access_log),
            *(
                [Middleware(ApiCORS, origins=settings.cors_origin_list)]
                if settings.cors_origin_list
                else []
            ),
            # Inside the access log (a refused body is logged with its 413), before any route.
            Middleware(BodyLimitMiddleware, limit_for=body_limits(rest, callbacks)),
        ],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    if resources is not None:
        app.state.resources = resources
    return app
