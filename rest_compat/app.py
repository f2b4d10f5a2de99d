"""The /api/v1 surface: every Operation, routed by RestRoutes; the OpenAPI document is derived."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from rest_compat import agents, calls, channels, contacts, inbox, quick_replies, webhooks
from rest_compat.endpoint import Operation
from rest_compat.errors import json_response
from rest_compat.openapi import build_openapi
from rest_compat.router import RestRoutes

OPERATIONS: tuple[Operation, ...] = (
    *agents.OPERATIONS,
    *calls.OPERATIONS,
    *channels.OPERATIONS,
    *contacts.OPERATIONS,
    *inbox.OPERATIONS,
    *quick_replies.OPERATIONS,
    *webhooks.OPERATIONS,
)


async def openapi_document(_request: Request) -> Response:
    return json_response(build_openapi(OPERATIONS))


def build_routes(prefix: str = "/api/v1") -> list[BaseRoute]:
    return [RestRoutes(prefix, OPERATIONS, {"/openapi.json": openapi_document})]
