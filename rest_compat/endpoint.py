"""One REST operation = metadata (for routing and OpenAPI) + a handler.

`run_operation` is the single request pipeline: credentials, rate limits, scope, the
organization_id header rule, idempotency, one transaction, and error mapping.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import structlog
from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from app.access.gate import (
    authenticate,
    check_organization_header,
    client_address,
    record_key_use,
)
from app.access.scopes import Scope
from app.access.subject import Subject
from app.config import Settings
from app.core.jsonutil import loads
from app.idempotency import service as idempotency
from app.kit.body import (
    JSON_MEDIA_TYPE,
    BodyLimit,
    BodyTooLarge,
    UnsupportedMediaType,
    is_json_media_type,
    read_body,
    replaying,
)
from app.kit.errors import (
    DomainError,
    IdempotencyInProgress,
    InsufficientScope,
    RequestValidationFailed,
)
from app.kit.http_errors import (
    ErrorStyle,
    error_response,
    internal_error_response,
    json_response,
)
from app.kit.multipart import UploadTooLarge, upload_body_limit
from app.kit.validation import parse_model
from app.resources import Resources

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

    @property
    def allow_private_urls(self) -> bool:
        """Whether user-supplied URLs may reach private addresses (the SSRF guard's switch)."""
        return self.resources.settings.allow_private_webhook_urls

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
            parsed = parse_model(model, _query_values(self.request, model), "query")
            if len(_PARSED_QUERIES) >= _PARSED_QUERIES_MAX:
                _PARSED_QUERIES.clear()
            _PARSED_QUERIES[cache_key] = parsed
        return cast(ModelT, parsed)


def _query_values(request: Request, model: type[BaseModel]) -> dict[str, str]:
    """The query string as one value per name. A name the operation does not take, or one
    given twice, is refused (422) rather than ignored: the OpenAPI document lists exactly the
    parameters that are read, and `?tag=a&tag=b` must not silently mean `tag=b`."""
    errors: list[dict[str, Any]] = []
    values: dict[str, str] = {}
    for name, value in request.query_params.multi_items():
        if name not in model.model_fields:
            errors.append(
                {
                    "loc": ["query", name],
                    "msg": "Unknown query parameter",
                    "type": "extra_forbidden",
                }
            )
        elif name in values:
            errors.append(
                {
                    "loc": ["query", name],
                    "msg": "Query parameter given more than once",
                    "type": "repeated_parameter",
                }
            )
        values[name] = value
    if errors:
        raise RequestValidationFailed(errors)
    return values


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
    # Error statuses answered in another style than `style` (POST /calls: an unknown agent
    # is the agents routes' 404; listed twice, a status is answered in either style).
    error_styles: tuple[tuple[int, ErrorStyle], ...] = field(default=())
    # Other success statuses answered with the same body (POST /inbox/tickets: 200 when the
    # contact's open ticket is returned instead of a new one, 201).
    other_successes: tuple[int, ...] = field(default=())
    # What a body must be sent as (415 otherwise); uploads declare `multipart/form-data`.
    media_type: str = JSON_MEDIA_TYPE
    # Largest body read, in bytes; None: settings.max_body_bytes (1 MiB). Uploads declare
    # their own. Counted while the body streams in (app/kit/body.py); over it: 413.
    max_body_bytes: int | None = None

    # The handler reads the body itself, streamed (uploads): the pipeline neither reads it
    # nor opens a write transaction (a slow upload must not hold SQLite's write lock); the
    # handler opens its own after the body is in. No idempotency replay for such bodies.
    streams_body: bool = False
    # For a streamed upload: the largest file the handler takes (the body may add the
    # multipart framing, app/kit/multipart.py), so the app's body limit lets it through.
    upload_limit: Callable[[Settings], int] | None = None
    # Media types of a binary success body (downloads); empty: JSON.
    binary_response: tuple[str, ...] = field(default=())
    # The `organization_id` header must be sent (ticket creation, docs/api.md), not only match.
    requires_organization_header: bool = False

    @property
    def writes(self) -> bool:
        return self.method in WRITE_METHODS and not self.streams_body

    @property
    def takes_body(self) -> bool:
        return self.request_model is not None or self.media_type != JSON_MEDIA_TYPE

    def body_limit(self, settings: Settings) -> BodyLimit:
        """What the app's body limit (app/kit/body.py) allows this operation, and its 413."""
        style = self.style
        if self.upload_limit is not None:
            file_limit = self.upload_limit(settings)
            return BodyLimit(
                upload_body_limit(file_limit),
                lambda: error_response(UploadTooLarge(file_limit), style),
            )
        limit = self.max_body_bytes or settings.max_body_bytes
        return BodyLimit(limit, lambda: error_response(BodyTooLarge(limit), style))

    def accepts_media_type(self, content_type: str | None) -> bool:
        if self.media_type == JSON_MEDIA_TYPE:
            return is_json_media_type(content_type)
        declared = (content_type or "").partition(";")[0].strip().lower()
        return declared == self.media_type


async def _checked_body(operation: Operation, request: Request, resources: Resources) -> bytes:
    """The body of a write, within the size limit and of the operation's media type.

    An empty body is not judged by its Content-Type (there is no representation to judge):
    the handler reports the missing body as a validation error instead.
    """
    limit = operation.max_body_bytes or resources.settings.max_body_bytes
    body = await read_body(request.receive, request.headers, limit)
    content_type = request.headers.get("content-type")
    if body and operation.takes_body and not operation.accepts_media_type(content_type):
        raise UnsupportedMediaType(operation.media_type)
    return body


async def run_operation(operation: Operation, request: Request) -> Response:
    resources: Resources = request.app.state.resources
    request.scope["sb.route"] = f"{operation.method} {operation.path}"
    touch_key_id: str | None = None
    try:
        raw_body = b""
        if operation.writes and operation.takes_body:  # other routes never read one
            raw_body = await _checked_body(operation, request, resources)
            # Handlers that parse the body themselves (multipart) read it from here.
            request = Request(request.scope, replaying(raw_body, request.receive))
        async with resources.session(writes=operation.writes) as session:
            credential = await authenticate(
                session,
                resources,
                request.headers.get("authorization"),
                client_address(request.scope),
            )
            subject = credential.subject
            touch_key_id = credential.touch_key_id
            if not subject.has_scope(operation.scope):
                raise InsufficientScope(
                    f"This API key does not have the required scope: {operation.scope.value}"
                )
            check_organization_header(
                request.headers, subject, required=operation.requires_organization_header
            )
            context = RequestContext(request, session, subject, resources, raw_body)
            idempotency_key = request.headers.get("idempotency-key")
            if (
                idempotency_key is not None
                and operation.method == "POST"
                and not operation.streams_body
            ):
                response = await _idempotent(operation, context, idempotency_key)
            else:
                response = await operation.handler(context)
                if operation.writes:
                    await session.commit()
    except DomainError as exc:
        return error_response(exc, operation.style)
    except ClientDisconnect:
        # The caller left before its body arrived: nobody reads the answer.
        return Response(status_code=400)
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
