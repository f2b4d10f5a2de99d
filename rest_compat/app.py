"""The /api/v1 surface: every Operation, routed by RestRoutes; the OpenAPI document is derived."""

from __future__ import annotations

from itertools import chain

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from app.kit.domains import collect
from app.kit.http_errors import json_response
from rest_compat.endpoint import Operation
from rest_compat.openapi import build_openapi
from rest_compat.reference import reference_page
from rest_compat.router import Endpoint, RestRoutes

# Each domain's rest module contributes its OPERATIONS (app/kit/domains.py).
OPERATIONS: tuple[Operation, ...] = tuple(chain.from_iterable(collect("rest", "OPERATIONS")))


async def openapi_document(_request: Request) -> Response:
    return json_response(build_openapi(OPERATIONS))


def build_routes(prefix: str = "/api/v1") -> list[BaseRoute]:
    endpoints: dict[str, Endpoint] = {"/openapi.json": openapi_document, "/docs": reference_page}
    return [RestRoutes(prefix, OPERATIONS, endpoints)]
