"""`/healthz` and `/readyz`, served by the API and by the voice server alike."""

from __future__ import annotations

from sqlalchemy import text
from starlette.requests import Request
from starlette.responses import Response

from app.kit.http_errors import json_response
from app.resources import Resources


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
