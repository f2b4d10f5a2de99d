"""Cross-origin access for browser dashboards: Starlette's CORSMiddleware on `/graphql` and
`/api/v1` only, for the origins SWITCHBOARD_CORS_ORIGINS names (none by default).

Credentials travel in the `Authorization` header, never in cookies, so credentialed CORS
(`Access-Control-Allow-Credentials`) stays off. Browsers may read the headers a client needs:
`Retry-After` (rate limits), `Idempotent-Replayed`, `X-Request-Id` and `Content-Disposition`.
Platform callbacks, health and metrics endpoints get no CORS headers at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

API_PREFIXES = ("/graphql", "/api/v1/")
ALLOWED_METHODS = ("GET", "POST", "PUT", "DELETE")
ALLOWED_HEADERS = (
    "Authorization",
    "Content-Type",
    "Idempotency-Key",
    "organization_id",
    "organization-id",
    "X-Request-Id",
)
EXPOSED_HEADERS = ("Retry-After", "Idempotent-Replayed", "X-Request-Id", "Content-Disposition")
PREFLIGHT_CACHE_SECONDS = 600
# The metrics label of preflights, which the CORS middleware answers before any route.
PREFLIGHT_ROUTE = "OPTIONS cors-preflight"


def _is_api(path: str) -> bool:
    return path == "/graphql" or path.startswith(API_PREFIXES)


class ApiCORS:
    """CORS for the API paths; every other path goes straight to `app`."""

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self.app = app
        self.cors = CORSMiddleware(
            app,
            allow_origins=list(origins),
            allow_methods=list(ALLOWED_METHODS),
            allow_headers=list(ALLOWED_HEADERS),
            expose_headers=list(EXPOSED_HEADERS),
            allow_credentials=False,
            max_age=PREFLIGHT_CACHE_SECONDS,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _is_api(scope["path"]):
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS":
            scope["sb.route"] = PREFLIGHT_ROUTE
        await self.cors(scope, receive, send)
