"""One REST operation = metadata (for routing and OpenAPI) + a handler.

`run_operation` is the single request pipeline: credentials, rate limits, scope, the
organization_id header rule, idempotency, one transaction, and error mapping.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast

import structlog
from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import Request
from starlette.responses import Response

from app.auth.gate import authenticate, check_organization_header, record_key_use
from app.auth.scopes import Scope
from app.auth.subject import Subject
from app.idempotency import service as idempotency
from app.kit.errors import (
    DomainError,
    IdempotencyInProgress,
    InsufficientScope,
    RequestValidationFailed,
)
from app.kit.jsonutil import loads
from app.kit.validation import parse_model
from app.resources import Resources
from rest_compat.errors import (
    ErrorStyle,
    error_response,
    internal_error_response,
    json_response,
)

logger = structlog.get_logger("switchboard.rest")
ModelT = TypeVar("ModelT", bound=BaseModel)
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Query strings repeat (dashboards poll the same pages): each distinct one is validated once.
_PARSED_QUERIES: dict[tuple[type[BaseModel], bytes], BaseModel] = {}
_PARSED_QUERIES_MAX = 4096


@dataclass(slots=True)
class RequestContext:
    request: Request
    session: AsyncSession
    subject: Subject
    resources: Resources
    raw_body: bytes

    def path_param(self, name: str) -> str:
        return str(self.request.path_params[name])

    def body(self, model: type[ModelT]) -> ModelT:
        """The JSON body as `model`, or a 422 validation array."""
        try:
            data = loads(self.raw_body) if self.raw_body else None
        except ValueError as exc:
            raise RequestValidationFailed(
                [{"loc": ["body"], "msg": "Body is not valid JSON", "type": "json_invalid"}]
            ) from exc
        if data is None:
            raise RequestValidationFailed(
                [{"loc": ["body"], "msg": "Field required", "type": "missing"}]
            )
        return parse_model(model, data, "body")

    def query(self, model: type[ModelT]) -> ModelT:
        """Query parameters as `model` (a frozen model), or a 422 validation array."""
        cache_key = (model, self.request.scope["query_string"])
        parsed = _PARSED_QUERIES.get(cache_key)
        if parsed is None:
            parsed = parse_model(model, dict(self.request.query_params), "query")
            if len(_PARSED_QUERIES) >= _PARSED_QUERIES_MAX:
                _PARSED_QUERIES.clear()
            _PARSED_QUERIES[cache_key] = parsed
        return cast(ModelT, parsed)


Handler = Callable[[RequestContext], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Operation:
    method: str
    path: str
    handler: Handler
    scope: Scope
    summary: str
    tag: str
    style: ErrorStyle = ErrorStyle.DETAIL
    status_code: int = 200
    request_model: type[BaseModel] | None = None
    query_model: type[BaseModel] | None = None
    response_model: type[BaseModel] | None = None
    # "A", "B" or "C" when the response is that list envelope of `response_model` items.
    envelope: str | None = None
    # Statuses the handler itself can answer with (401/403/429/500 are added to all).
    errors: tuple[int, ...] = field(default=())
    # Other success statuses answered with the same body (POST /inbox/tickets: 200 when the
    # contact's open ticket is returned instead of a new one, 201).
    other_successes: tuple[int, ...] = field(default=())

    @property
    def writes(self) -> bool:
        return self.method in WRITE_METHODS


async def run_operation(operation: Operation, request: Request) -> Response:
    resources: Resources = request.app.state.resources
    request.scope["sb.route"] = f"{operation.method} {operation.path}"
    touch_key_id: str | None = None
    try:
        raw_body = await request.body() if operation.writes else b""
        async with resources.session(writes=operation.writes) as session:
            credential = await authenticate(
                session, resources, request.headers.get("authorization")
            )
            subject = credential.subject
            touch_key_id = credential.touch_key_id
            if not subject.has_scope(operation.scope):
                raise InsufficientScope(
                    f"This API key does not have the required scope: {operation.scope.value}"
                )
            check_organization_header(request.headers, subject)
            context = RequestContext(request, session, subject, resources, raw_body)
            idempotency_key = request.headers.get("idempotency-key")
            if idempotency_key is not None and operation.method == "POST":
                response = await _idempotent(operation, context, idempotency_key)
            else:
                response = await operation.handler(context)
                if operation.writes:
                    await session.commit()
    except DomainError as exc:
        return error_response(exc, operation.style)
    except Exception:
        logger.exception("unhandled error", route=request.scope["sb.route"])
        return internal_error_response(operation.style)
    await record_key_use(resources, touch_key_id)
    return response


async def _idempotent(operation: Operation, context: RequestContext, raw_key: str) -> Response:
    key = idempotency.check_key(raw_key)
    organization_id = context.subject.organization_id
    fingerprint = idempotency.request_fingerprint(
        operation.method, context.request.url.path, context.raw_body
    )
    session = context.session
    stored = await idempotency.find_replay(session, organization_id, key, fingerprint)
    if stored is not None:
        return _replayed(stored)
    response = await operation.handler(context)
    if 200 <= response.status_code < 300:
        stored = idempotency.StoredResponse(response.status_code, bytes(response.body))
        try:
            await idempotency.record(
                session,
                organization_id,
                key,
                fingerprint,
                stored,
                context.resources.settings.idempotency_ttl_seconds,
            )
            await session.commit()
        except IntegrityError:
            # A concurrent request with the same key committed first: answer with its result.
            await session.rollback()
            stored = await idempotency.find_replay(session, organization_id, key, fingerprint)
            if stored is None:
                raise IdempotencyInProgress() from None
            return _replayed(stored)
    else:
        await session.commit()
    return response


def _replayed(stored: idempotency.StoredResponse) -> Response:
    response = Response(stored.body, status_code=stored.status_code, media_type="application/json")
    response.headers["Idempotent-Replayed"] = "true"
    return response


__all__ = ["ErrorStyle", "Operation", "RequestContext", "json_response", "run_operation"]
