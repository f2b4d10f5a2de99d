"""/api/v1/call-logs: routes → calls service → the spec's JSON shapes (envelope B lists)."""

from __future__ import annotations

from starlette.responses import Response

from app.auth.scopes import Scope
from app.calls import service
from app.calls.schemas import CallLogListQuery, CallLogResponse, call_log_to_public
from app.kit.pagination import envelope_b
from rest_compat.endpoint import Operation, RequestContext, json_response


async def list_call_logs(ctx: RequestContext) -> Response:
    page = await service.list_call_logs(ctx.session, ctx.subject, ctx.query(CallLogListQuery))
    return json_response(envelope_b([call_log_to_public(row) for row in page.items], page))


async def get_call_log(ctx: RequestContext) -> Response:
    row = await service.get_call_log(ctx.session, ctx.subject, ctx.path_param("call_log_id"))
    return json_response(call_log_to_public(row))


_TAG = "call logs"
OPERATIONS = (
    Operation(
        "GET",
        "/call-logs",
        list_call_logs,
        Scope.CALLS_READ,
        "List call logs (newest call first)",
        _TAG,
        query_model=CallLogListQuery,
        response_model=CallLogResponse,
        envelope="B",
        errors=(422,),
    ),
    Operation(
        "GET",
        "/call-logs/{call_log_id}",
        get_call_log,
        Scope.CALLS_READ,
        "Get a call log",
        _TAG,
        response_model=CallLogResponse,
        errors=(404,),
    ),
)
