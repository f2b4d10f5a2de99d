"""DomainError → the HTTP JSON body docs/api.md gives, in one place, for REST and for /graphql's
HTTP-level answers (credentials, rate limits, internal errors)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import Enum
from typing import Any

from starlette.responses import Response

from app.core.jsonutil import dumps
from app.kit.errors import (
    AuthenticationFailed,
    DomainError,
    InsufficientScope,
    RateLimited,
    RequestValidationFailed,
)

JSON_MEDIA_TYPE = "application/json"


class ErrorStyle(Enum):
    """Agents answer `{error: <status>, message}`; every other resource `{detail}`."""

    DETAIL = "detail"
    AGENT = "agent"


def json_response(
    body: Any, status_code: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        dumps(body), status_code=status_code, headers=headers, media_type=JSON_MEDIA_TYPE
    )


def error_body(exc: DomainError, style: ErrorStyle) -> tuple[int, dict[str, Any]]:
    if isinstance(exc, AuthenticationFailed | InsufficientScope):
        return exc.status, {
            "error": {"code": exc.code, "message": exc.message, "type": "authentication_error"},
            "detail": exc.message,
        }
    if isinstance(exc, RateLimited):
        return exc.status, {
            "error": "rate_limit_exceeded",
            "message": exc.message,
            "retry_after": 60,
        }
    if isinstance(exc, RequestValidationFailed):
        if style is ErrorStyle.AGENT:
            first = exc.errors[0] if exc.errors else {"loc": [], "msg": exc.message}
            field = ".".join(str(part) for part in first["loc"][1:])
            message = f"Validation error: {field}: {first['msg']}" if field else first["msg"]
            return 400, {"error": 400, "message": message}
        return exc.status, {"detail": exc.errors}
    if style is ErrorStyle.AGENT:
        return exc.status, {"error": exc.status, "message": exc.message}
    return exc.status, {"detail": exc.message}


def error_response(exc: DomainError, style: ErrorStyle) -> Response:
    status, body = error_body(exc, style)
    headers = None
    if isinstance(exc, RateLimited):
        headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
    elif isinstance(exc, AuthenticationFailed):
        headers = {"WWW-Authenticate": "Bearer"}
    return json_response(body, status, headers)


def internal_error_response(style: ErrorStyle) -> Response:
    if style is ErrorStyle.AGENT:
        return json_response({"error": 500, "message": "Internal server error"}, 500)
    return json_response({"detail": "Internal server error"}, 500)
