"""/graphql: over HTTP, credentials and rate limits first, then Strawberry, one session each;
over a websocket (graphql-transport-ws), the credential of `connection_init`, then subscriptions.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import orjson
import structlog
from cross_web import AsyncHTTPRequestAdapter, HTTPException
from graphql import GraphQLError, OperationType, get_operation_ast
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, Response
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect
from strawberry.asgi import ASGIWebSocketAdapter, GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http import GraphQLRequestData
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import SubscribeMessage
from strawberry.types import ExecutionResult
from strawberry.types.unset import UnsetType

from app.access.gate import (
    authenticate,
    check_organization_header,
    client_address,
    enforce_address_limit,
    enforce_login_address_limit,
    record_key_use,
)
from app.access.subject import Subject
from app.config import Settings
from app.core.jsonutil import dumps
from app.graphql.context import Context
from app.graphql.ide import graphiql_html
from app.graphql.planned import run_plan
from app.graphql.schema import OPERATION_CACHE, build_schema
from app.graphql.socket import SUBSCRIPTIONS_OVER_WEBSOCKET, SocketContext
from app.kit.body import (
    WEBSOCKET_MAX_MESSAGE_BYTES,
    BodyLimit,
    BodyTooLarge,
    read_body,
    replaying,
)
from app.kit.errors import DomainError
from app.kit.http_errors import ErrorStyle, error_response, internal_error_response
from app.resources import Resources

_STATE_KEY = "sb.graphql"
logger = structlog.get_logger("switchboard.graphql")


# Unauthenticated sockets are not kept waiting for long.
CONNECTION_INIT_TIMEOUT = timedelta(seconds=10)
# A websocket message over WEBSOCKET_MAX_MESSAGE_BYTES closes the socket with this code.
MESSAGE_TOO_BIG = 1009
# Each subscription holds a Redis pub/sub connection where Redis is configured.
MAX_SUBSCRIPTIONS_PER_CONNECTION = 10
NOT_A_SUBSCRIPTION = (
    "Only subscriptions are accepted over WebSocket; send queries and mutations to POST /graphql"
)


class _GatewayFailure(Exception):
    """The credential could not be checked (e.g. Redis down): not the client's fault."""


class _TextFrames(ASGIWebSocketAdapter):
    """graphql-transport-ws messages are text frames; `encode_json` gives bytes, for HTTP."""

    async def send_json(self, message: Mapping[str, object]) -> None:
        try:
            await self.ws.send_text(orjson.dumps(message).decode())
        except WebSocketDisconnect as exc:
            raise WebSocketDisconnected from exc


class _BoundedMessages:
    """A websocket whose messages over WEBSOCKET_MAX_MESSAGE_BYTES close it (1009) unread,
    whatever server runs the app (uvicorn stops them earlier, at its `ws_max_size`)."""

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self.closed = False

    async def receive(self) -> Message:
        if self.closed:
            return {"type": "websocket.disconnect", "code": MESSAGE_TOO_BIG}
        message = await self._receive()
        if message["type"] == "websocket.receive" and _too_big(message):
            self.closed = True
            await self._send(
                {"type": "websocket.close", "code": MESSAGE_TOO_BIG, "reason": "Message too big"}
            )
            return {"type": "websocket.disconnect", "code": MESSAGE_TOO_BIG}
        return message

    async def send(self, message: Message) -> None:
        if not self.closed:  # after the 1009, the protocol's own goodbye goes nowhere
            await self._send(message)


def _too_big(message: Message) -> bool:
    text: str | None = message.get("text")
    if text is not None:
        # A character is 1 to 4 bytes in UTF-8: encode only when the length cannot tell.
        if len(text) > WEBSOCKET_MAX_MESSAGE_BYTES:
            return True
        return len(text) * 4 > WEBSOCKET_MAX_MESSAGE_BYTES and (
            len(text.encode("utf-8", "surrogatepass")) > WEBSOCKET_MAX_MESSAGE_BYTES
        )
    return len(message.get("bytes") or b"") > WEBSOCKET_MAX_MESSAGE_BYTES


class _SubscriptionsOnly(BaseGraphQLTransportWSHandler[Context, None]):
    """Queries and mutations stay on POST, where every request is rate limited and gets a
    fresh context; a socket's context lives as long as the socket."""

    async def handle_subscribe(self, message: SubscribeMessage) -> None:
        if self.connection_acknowledged and message["id"] not in self.operations:
            payload = message["payload"]
            query, operation_name = payload["query"], payload.get("operationName")
            if _is_ambiguous(query, operation_name):
                await self.send_message(
                    {"id": message["id"], "type": "error", "payload": [AMBIGUOUS.formatted]}
                )
                return
            kind = _operation_type(query, operation_name)
            if kind is not None and kind is not OperationType.SUBSCRIPTION:
                error = GraphQLError(NOT_A_SUBSCRIPTION, extensions={"code": "bad_request"})
                await self.send_message(
                    {"id": message["id"], "type": "error", "payload": [error.formatted]}
                )
                return
        await super().handle_subscribe(message)


# The GraphQL spec's GetOperation(): without a name, a document must hold a single operation.
AMBIGUOUS = GraphQLError(
    "Must provide operation name if query contains multiple operations.",
    extensions={"code": "bad_request"},
)


def _is_ambiguous(query: object, operation_name: object) -> bool:
    if not isinstance(query, str) or operation_name is not None:
        return False
    return OPERATION_CACHE.is_ambiguous(build_schema()._schema, query, None)


def _operation_type(query: object, operation_name: object) -> OperationType | None:
    """None when unsure (no document, no such operation): Strawberry then reports it."""
    if not isinstance(query, str) or not isinstance(operation_name, str | None):
        return None
    try:
        # The parse is cached for the execution that follows (OperationPipeline).
        document = OPERATION_CACHE.prepare(build_schema()._schema, query).document
    except GraphQLError:
        return None
    operation = get_operation_ast(document, operation_name)
    return None if operation is None else operation.operation


class StrawberryView(GraphQL[Context, None]):
    """Strawberry's ASGI app with our context, orjson and the bundled GraphiQL."""

    websocket_adapter_class = _TextFrames
    graphql_transport_ws_handler_class = _SubscriptionsOnly

    async def get_context(self, request: Request | WebSocket, response: Any) -> Context:
        state = request.scope[_STATE_KEY]
        if isinstance(request, WebSocket):
            resources = state["resources"]
            return SocketContext(
                request=request,  # type: ignore[arg-type]
                resources=resources,
                # Never begun (SocketContext opens a session per use): a socket may stay open
                # for hours and must not hold a database connection all that time.
                session=resources.sessionmaker(),
                subject=None,
            )
        return Context(
            request=request,
            resources=state["resources"],
            session=state["session"],
            subject=state["subject"],
        )

    def encode_json(self, data: object) -> bytes:
        return dumps(data)  # never fails on stored data (app/core/jsonutil.py)

    def decode_json(self, data: str | bytes) -> object:
        # The gateway checked the body already; orjson never recurses in Python.
        return orjson.loads(data)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        try:
            response = await self.run(Request(scope=scope, receive=receive))
        except HTTPException as exc:
            # Strawberry would answer in plain text; every /graphql refusal is JSON.
            response = bad_request_response(exc.reason, exc.status_code)
        await response(scope, receive, send)

    async def execute_single(
        self,
        request: Request,
        request_adapter: AsyncHTTPRequestAdapter,
        sub_response: Response,
        context: Context,
        root_value: None,
        request_data: GraphQLRequestData,
    ) -> ExecutionResult:
        if _is_ambiguous(request_data.query, request_data.operation_name):
            return ExecutionResult(data=None, errors=[AMBIGUOUS])
        # Strawberry would run a POSTed subscription as a query of its first event: null.
        kind = _operation_type(request_data.query, request_data.operation_name)
        if kind is OperationType.SUBSCRIPTION:
            raise HTTPException(400, SUBSCRIPTIONS_OVER_WEBSOCKET)
        return await super().execute_single(
            request, request_adapter, sub_response, context, root_value, request_data
        )

    async def on_ws_connect(self, context: Context) -> UnsetType | dict[str, object] | None:
        """Accepts the `connection_init` whose credential validates; 4403 Forbidden otherwise.

        The credential is `Authorization` (or `authorization`) in the payload, else the
        upgrade request's Authorization header. It is checked in a short session of its own.
        """
        assert isinstance(context, SocketContext)
        websocket: WebSocket = context.request  # type: ignore[assignment]
        params = {
            name.lower(): value
            for name, value in context.connection_params.items()
            if isinstance(value, str)
        }
        authorization = params.get("authorization") or websocket.headers.get("authorization")
        if authorization is None:
            raise ConnectionRejectionError()
        resources = context.resources
        async with resources.session(writes=False) as session:
            try:
                credential = await authenticate(
                    session, resources, authorization, client_address(websocket.scope)
                )
                check_organization_header(websocket.headers, credential.subject)
                check_organization_header(params, credential.subject)
            except DomainError:
                raise ConnectionRejectionError() from None
            except Exception as exc:
                logger.exception("graphql websocket gateway failure")
                raise _GatewayFailure() from exc
        context.subject = credential.subject
        context.authorization = authorization
        context.checked_at = time.monotonic()
        await record_key_use(resources, credential.touch_key_id)
        return UnsetType()  # connection_ack without a payload


class GraphQLEndpoint:
    """Resolves the caller once per HTTP request, then hands over to Strawberry.

    A missing Authorization header is allowed (only `login` and `viewer` answer without one);
    a present but invalid one is refused with the same 401 body REST uses. A websocket is
    authenticated by its `connection_init` instead (`StrawberryView.on_ws_connect`).
    """

    def __init__(self) -> None:
        self.schema = build_schema()
        self.view = StrawberryView(
            self.schema,
            allow_queries_via_get=False,
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
            connection_init_wait_timeout=CONNECTION_INIT_TIMEOUT,
            max_subscriptions_per_connection=MAX_SUBSCRIPTIONS_PER_CONNECTION,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._serve_websocket(scope, receive, send)
            return
        if scope["method"] != "POST":
            # GET serves the bundled GraphiQL; operations go over POST only (no CSRF via GET).
            page = HTMLResponse(graphiql_html(scope.get("root_path", "") + "/graphql"))
            await page(scope, receive, send)
            return
        scope["sb.route"] = "POST /graphql"
        resources: Resources = scope["app"].state.resources
        headers = Headers(scope=scope)
        authorization = headers.get("authorization")
        address = client_address(scope)
        touch_key_id = None
        async with resources.session(writes=False) as session:
            subject = None
            try:
                if authorization is None:
                    await enforce_address_limit(resources, address)
                else:
                    credential = await authenticate(session, resources, authorization, address)
                    check_organization_header(headers, credential.subject)
                    subject = credential.subject
                    touch_key_id = credential.touch_key_id
            except DomainError as exc:
                response: Response = error_response(exc, ErrorStyle.DETAIL)
                await response(scope, receive, send)
                return
            except Exception:
                # e.g. the database unreachable (Redis failures fall back): answer like REST.
                logger.exception("graphql gateway failure")
                await internal_error_response(ErrorStyle.DETAIL)(scope, receive, send)
                return
            try:
                body = await read_body(receive, headers, resources.settings.max_body_bytes)
            except ClientDisconnect:
                return  # the caller left before sending its body: nobody to answer
            except BodyTooLarge as exc:
                await body_too_large_response(exc.limit)(scope, receive, send)
                return
            try:
                payload = _json_payload(headers, body)
                if payload is not None:
                    await self._limit_logins(resources, address, payload)
            except _BadRequest as exc:
                await bad_request_response(str(exc))(scope, receive, send)
                return
            except DomainError as exc:
                await error_response(exc, ErrorStyle.DETAIL)(scope, receive, send)
                return
            except Exception:
                logger.exception("graphql gateway failure")
                await internal_error_response(ErrorStyle.DETAIL)(scope, receive, send)
                return
            replay = replaying(body, receive)
            planned = await self._run_planned(scope, replay, payload, resources, session, subject)
            if planned is not None:
                await planned(scope, replay, send)
            else:
                scope[_STATE_KEY] = {"resources": resources, "session": session, "subject": subject}
                await self.view(scope, replay, send)

        await record_key_use(resources, touch_key_id)

    async def _serve_websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Strawberry runs the protocol; `StrawberryView.on_ws_connect` checks the caller."""
        scope[_STATE_KEY] = {"resources": scope["app"].state.resources}
        bounded = _BoundedMessages(receive, send)
        try:
            await self.view(scope, bounded.receive, bounded.send)
        except _GatewayFailure:
            # The graphql-transport-ws code for a server error; the details are logged.
            await send({"type": "websocket.close", "code": 4500, "reason": "Internal server error"})

    async def _limit_logins(
        self, resources: Resources, address: str, payload: dict[str, Any] | list[Any]
    ) -> None:
        """Spends one unit of the address's login bucket per `login` the operation calls."""
        if not isinstance(payload, dict):
            return
        query, operation_name = payload.get("query"), payload.get("operationName")
        if not isinstance(query, str) or not isinstance(operation_name, str | None):
            return
        calls = OPERATION_CACHE.login_calls(self.schema._schema, query, operation_name)
        if calls:
            await enforce_login_address_limit(resources, address, calls)

    async def _run_planned(
        self,
        scope: Scope,
        receive: Receive,
        payload: dict[str, Any] | list[Any] | None,
        resources: Resources,
        session: AsyncSession,
        subject: Subject | None,
    ) -> Response | None:
        """The response of a compiled plan (app/graphql/planned.py), or None to let Strawberry
        handle the request: anything but a plain JSON query that succeeds goes that way."""
        if subject is None or not isinstance(payload, dict):
            return None
        if not resources.settings.graphql_planning:
            return None
        query, variables = payload.get("query"), payload.get("variables")
        operation_name = payload.get("operationName")
        if (
            not isinstance(query, str)
            or not isinstance(variables, dict | None)
            or not isinstance(operation_name, str | None)
        ):
            return None
        plan = OPERATION_CACHE.plan(self.schema, query, operation_name)
        if plan is None:
            return None
        context = Context(
            request=Request(scope, receive), resources=resources, session=session, subject=subject
        )
        data = await run_plan(plan, context, variables)
        if data is None:
            return None
        # jsonutil.dumps writes the UTC datetimes plans leave as objects (app/graphql/planned.py).
        return Response(dumps({"data": data}), media_type="application/json")


# Deeper request bodies are refused before anything walks them (Python's recursion limit is
# 1,000 frames; orjson stops at 1,024 levels).
MAX_BODY_DEPTH = 128


class _BadRequest(Exception):
    """The request body is not a GraphQL request: HTTP 400 in the GraphQL error shape."""


def body_too_large_response(limit: int) -> Response:
    """docs/api.md: a body over the limit is a GraphQL error list with code body_too_large."""
    exc = BodyTooLarge(limit)
    error = {"message": exc.message, "extensions": {"code": exc.code}}
    return Response(dumps({"errors": [error]}), exc.status, media_type="application/json")


def body_limit(settings: Settings) -> BodyLimit:
    """What the app's body limit (app/kit/body.py) allows POST /graphql, and its 413."""
    limit = settings.max_body_bytes
    return BodyLimit(limit, lambda: body_too_large_response(limit))


def bad_request_response(message: str, status_code: int = 400) -> Response:
    """docs/api.md: a request that cannot be run at all gets a GraphQL error list, no data."""
    body = {"errors": [{"message": message, "extensions": {"code": "bad_request"}}]}
    return Response(orjson.dumps(body), status_code=status_code, media_type="application/json")


def _json_payload(headers: Headers, body: bytes) -> dict[str, Any] | list[Any] | None:
    """The parsed JSON body (None when not sent as JSON: Strawberry refuses it)."""
    if "application/json" not in headers.get("content-type", ""):
        return None
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        # orjson's messages name the problem (invalid UTF-8, recursion limit), never the body.
        raise _BadRequest(f"Unable to parse request body as JSON: {exc.msg}") from None
    if not isinstance(payload, dict | list):
        raise _BadRequest("The request body must be a JSON object")
    if _too_deep(payload):
        raise _BadRequest(f"The request body is nested deeper than {MAX_BODY_DEPTH} levels")
    return payload


def _too_deep(value: object) -> bool:
    if not isinstance(value, dict | list) or not value:
        return False
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item
        for child in children:  # type: ignore[attr-defined]
            if isinstance(child, dict | list) and child:
                if depth + 1 > MAX_BODY_DEPTH:
                    return True
                pending.append((child, depth + 1))
    return False
