"""/graphql over HTTP: credentials and rate limits first, then Strawberry, one session each."""

from __future__ import annotations

from typing import Any

import orjson
import structlog
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL

from app.auth.gate import authenticate, check_organization_header, record_key_use
from app.graphql.context import Context
from app.graphql.ide import graphiql_html
from app.graphql.schema import build_schema
from app.kit.errors import DomainError
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
        self.view = StrawberryView(build_schema(), allow_queries_via_get=False)

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
            scope[_STATE_KEY] = {"resources": resources, "session": session, "subject": subject}
            try:
                await self.view(scope, receive, send)
            except ClientDisconnect:
                return  # the caller left before sending its body: nobody to answer

        await record_key_use(resources, touch_key_id)
