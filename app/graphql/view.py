"""/graphql over HTTP: credentials and rate limits first, then Strawberry, one session each."""

from __future__ import annotations

from typing import Any

import orjson
import structlog
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, Response
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL

from app.auth.gate import authenticate, check_organization_header, record_key_use
from app.auth.subject import Subject
from app.graphql.context import Context
from app.graphql.ide import graphiql_html
from app.graphql.planned import run_plan
from app.graphql.schema import OPERATION_CACHE, build_schema
from app.kit.errors import DomainError
from app.kit.jsonutil import dumps
from app.resources import Resources
from rest_compat.errors import ErrorStyle, error_response, internal_error_response

_STATE_KEY = "sb.graphql"
logger = structlog.get_logger("switchboard.graphql")


class StrawberryView(GraphQL[Context, None]):
    """Strawberry's ASGI app with our context, orjson and the bundled GraphiQL."""

    async def get_context(self, request: Request | WebSocket, response: Any) -> Context:
        state = request.scope[_STATE_KEY]
        return Context(
            request=request,  # type: ignore[arg-type]
            resources=state["resources"],
            session=state["session"],
            subject=state["subject"],
        )

    def encode_json(self, data: object) -> bytes:
        return orjson.dumps(data)


class GraphQLEndpoint:
    """Resolves the caller once per HTTP request, then hands over to Strawberry.

    A missing Authorization header is allowed (only `login` and `viewer` answer without one);
    a present but invalid one is refused with the same 401 body REST uses.
    """

    def __init__(self) -> None:
        self.schema = build_schema()
        self.view = StrawberryView(self.schema, allow_queries_via_get=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.view(scope, receive, send)
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
