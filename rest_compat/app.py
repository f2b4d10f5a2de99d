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
    by_path: dict[str, list[Operation]] = {}
    for operation in OPERATIONS:
        by_path.setdefault(operation.path, []).append(operation)
    # One Route per path (not per operation) so a 405 lists every allowed method.
    for path, operations in by_path.items():
        routes.append(
            Route(path, endpoint_for(operations), methods=[op.method for op in operations])
        )
    return routes
