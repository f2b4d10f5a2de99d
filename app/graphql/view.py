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

from app.auth.gate import authenticate, check_organization_header, record_key_use
from app.auth.subject import Subject
from app.graphql.context import Context
from app.graphql.events import SUBSCRIPTIONS_OVER_WEBSOCKET, SocketContext
from app.graphql.ide import graphiql_html
from app.graphql.planned import run_plan
from app.graphql.schema import OPERATION_CACHE, build_schema
from app.kit.errors import DomainError
from app.kit.jsonutil import dumps
from app.resources import Resources
from rest_compat.errors import ErrorStyle, error_response, internal_error_response

_STATE_KEY = "sb.graphql"
logger = structlog.get_logger("switchboard.graphql")


# Unauthenticated sockets are not kept waiting for long.
CONNECTION_INIT_TIMEOUT = timedelta(seconds=10)
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


class _SubscriptionsOnly(BaseGraphQLTransportWSHandler[Context, None]):
    """Queries and mutations stay on POST, where every request is rate limited and gets a
    fresh context; a socket's context lives as long as the socket."""

    async def handle_subscribe(self, message: SubscribeMessage) -> None:
        if self.connection_acknowledged and message["id"] not in self.operations:
            payload = message["payload"]
            kind = _operation_type(payload["query"], payload.get("operationName"))
            if kind is not None and kind is not OperationType.SUBSCRIPTION:
                error = GraphQLError(NOT_A_SUBSCRIPTION, extensions={"code": "bad_request"})
                await self.send_message(
                    {"id": message["id"], "type": "error", "payload": [error.formatted]}
                )
                return
        await super().handle_subscribe(message)


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
        return orjson.dumps(data)

    async def execute_single(
        self,
        request: Request,
        request_adapter: AsyncHTTPRequestAdapter,
        sub_response: Response,
        context: Context,
        root_value: None,
        request_data: GraphQLRequestData,
    ) -> ExecutionResult:
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
                credential = await authenticate(session, resources, authorization)
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
        touch_key_id = None
        async with resources.session(writes=False) as session:
            subject = None
            if authorization is not None:
                try:
                    credential = await authenticate(session, resources, authorization)
                    check_organization_header(headers, credential.subject)
                except DomainError as exc:
                    response: Response = error_response(exc, ErrorStyle.DETAIL)
                    await response(scope, receive, send)
                    return
                except Exception:
                    # e.g. Redis (rate limits) unreachable: answer like REST does, logged.
                    logger.exception("graphql gateway failure")
                    await internal_error_response(ErrorStyle.DETAIL)(scope, receive, send)
                    return
                subject = credential.subject
                touch_key_id = credential.touch_key_id
            try:
                body = await _read_body(receive)
            except ClientDisconnect:
                return  # the caller left before sending its body: nobody to answer
            replay = _replaying(body, receive)
            planned = await self._run_planned(
                scope, replay, headers, body, resources, session, subject
            )
            if planned is not None:
                await planned(scope, replay, send)
            else:
                scope[_STATE_KEY] = {"resources": resources, "session": session, "subject": subject}
                await self.view(scope, replay, send)

        await record_key_use(resources, touch_key_id)

    async def _serve_websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Strawberry runs the protocol; `StrawberryView.on_ws_connect` checks the caller."""
        scope[_STATE_KEY] = {"resources": scope["app"].state.resources}
        try:
            await self.view(scope, receive, send)
        except _GatewayFailure:
            # The graphql-transport-ws code for a server error; the details are logged.
            await send({"type": "websocket.close", "code": 4500, "reason": "Internal server error"})

    async def _run_planned(
        self,
        scope: Scope,
        receive: Receive,
        headers: Headers,
        body: bytes,
        resources: Resources,
        session: AsyncSession,
        subject: Subject | None,
    ) -> Response | None:
        """The response of a compiled plan (app/graphql/planned.py), or None to let Strawberry
        handle the request: anything but a plain JSON query that succeeds goes that way."""
        if subject is None or not headers.get("content-type", "").startswith("application/json"):
            return None
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(payload, dict):
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


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that hands out the body already read, then defers to the real one."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
