"""The /api/v1 router: every Operation becomes a Route; the OpenAPI document is derived."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from rest_compat import contacts
from rest_compat.endpoint import Operation, endpoint_for
from rest_compat.errors import json_response
from rest_compat.openapi import build_openapi

OPERATIONS: tuple[Operation, ...] = (*contacts.OPERATIONS,)


async def openapi_document(_request: Request) -> Response:
    return json_response(build_openapi(OPERATIONS))


def build_routes() -> list[BaseRoute]:
    routes: list[BaseRoute] = [Route("/openapi.json", openapi_document, methods=["GET"])]
    for operation in OPERATIONS:
        routes.append(
            Route(
                operation.path,
                endpoint_for(operation),
                methods=[operation.method],
                name=operation.handler.__name__,
            )
        )
    return routes
