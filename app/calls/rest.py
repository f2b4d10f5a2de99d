"""/api/v1/call-logs: routes → calls service → the JSON shapes of docs/api.md (envelope B lists)."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from app.access.scopes import Scope
from app.calls import analysis, numbers, service, telephony, web
from app.calls.schemas import (
    CallDispatch,
    CallLogListQuery,
    CallLogResponse,
    PhoneNumberAssign,
    PhoneNumberResponse,
    WebCallResponse,
    WebCallStart,
    call_log_to_public,
    phone_number_to_public,
)
from app.core.clock import isoformat
from app.engine.limits import ConversationLimits
from app.kit.errors import NotFound
from app.kit.http_errors import ErrorStyle, error_response
from app.kit.pagination import envelope_b, envelope_c
from app.kit.queries import CursorQuery
from rest_compat.endpoint import Operation, RequestContext, json_response
from rest_compat.resource import get_handler


async def list_call_logs(ctx: RequestContext) -> Response:
    page = await service.list_call_logs(ctx.session, ctx.subject, ctx.query(CallLogListQuery))
    return json_response(envelope_b([call_log_to_public(row) for row in page.items], page))


get_call_log = get_handler(service.get_call_log, "call_log_id", call_log_to_public)


async def analyze_call_log(ctx: RequestContext) -> Response:
    call_log = await analysis.request_analysis(
        ctx.session, ctx.subject, ctx.path_param("call_log_id")
    )
    return json_response(call_log_to_public(call_log), status_code=202)


async def dispatch_call(ctx: RequestContext) -> Response:
    try:
        call_log = await telephony.dispatch_call(
            ctx.session,
            ctx.subject,
            ctx.body(CallDispatch),
            max_live_calls=ctx.resources.settings.voice_max_concurrent_calls,
            limits=ConversationLimits(ctx.resources),
        )
    except NotFound as exc:
        if exc.resource != "Agent":
            raise
        # An unknown agent (or another organization's) answers as the agents routes do.
        return error_response(exc, ErrorStyle.AGENT)
    return json_response(call_log_to_public(call_log), status_code=201)


def web_call_to_public(web_call: web.WebCall) -> dict[str, Any]:
    return {
        "call_log_id": web_call.call_log.id,
        "url": web_call.url,
        "token": web_call.token,
        "expires_at": isoformat(web_call.expires_at),
    }


async def start_web_call(ctx: RequestContext) -> Response:
    settings = ctx.resources.settings
    try:
        web_call = await web.start_web_call(
            ctx.session,
            ctx.subject,
            ctx.body(WebCallStart),
            public_url=web.public_base_url(ctx.request, settings),
            max_calls=settings.voice_max_concurrent_calls,
            token_seconds=settings.voice_stream_token_seconds,
        )
    except NotFound as exc:
        if exc.resource != "Agent":
            raise
        return error_response(exc, ErrorStyle.AGENT)
    return json_response(web_call_to_public(web_call), status_code=201)


async def assign_phone_number(ctx: RequestContext) -> Response:
    try:
        assignment = await numbers.assign_phone_number(
            ctx.session, ctx.subject, ctx.body(PhoneNumberAssign), ctx.resources.settings
        )
    except NotFound as exc:
        if exc.resource != "Agent":
            raise
        return error_response(exc, ErrorStyle.AGENT)
    return json_response(phone_number_to_public(assignment), status_code=201)


async def list_phone_numbers(ctx: RequestContext) -> Response:
    page = await numbers.list_phone_numbers(
        ctx.session, ctx.subject, ctx.query(CursorQuery).cursor()
    )
    return json_response(envelope_c([phone_number_to_public(row) for row in page.items], page))


async def unassign_phone_number(ctx: RequestContext) -> Response:
    await numbers.unassign_phone_number(ctx.session, ctx.subject, ctx.path_param("phone_number_id"))
    return Response(status_code=204)


_NUMBERS_TAG = "phone numbers"
_TAG = "call logs"
OPERATIONS = (
    Operation(
        "POST",
        "/calls",
        dispatch_call,
        Scope.CALLS_DISPATCH,
        "Place an outbound call with an agent (test keys: the simulator)",
        "calls",
        status_code=201,
        request_model=CallDispatch,
        response_model=CallLogResponse,
        errors=(400, 404, 422, 429),
        error_styles=((404, ErrorStyle.AGENT),),
    ),
    Operation(
        "POST",
        "/calls/web",
        start_web_call,
        Scope.CALLS_DISPATCH,
        "Start a browser session with an agent: the browser streams its microphone to `url`"
        " with the single-use `token` and hears the agent (docs/api.md, Browser sessions)",
        "calls",
        status_code=201,
        request_model=WebCallStart,
        response_model=WebCallResponse,
        errors=(400, 404, 422, 429),
        error_styles=((404, ErrorStyle.AGENT),),
    ),
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
    Operation(
        "POST",
        "/call-logs/{call_log_id}/analyze",
        analyze_call_log,
        Scope.CALLS_DISPATCH,  # it writes the call log and may spend the organization's LLM
        "Run the call's analysis again (its agent's analysis_schema and success_criteria);"
        " answers at once with `analysis.status` `pending`",
        _TAG,
        status_code=202,
        response_model=CallLogResponse,
        errors=(400, 403, 404),
    ),
    Operation(
        "POST",
        "/phone-numbers",
        assign_phone_number,
        Scope.AGENTS_WRITE,
        "Assign a phone number to the agent that answers its incoming calls (a live key's"
        " number is verified with the carrier first)",
        _NUMBERS_TAG,
        status_code=201,
        request_model=PhoneNumberAssign,
        response_model=PhoneNumberResponse,
        errors=(400, 404, 409, 422, 502),
        error_styles=((404, ErrorStyle.AGENT),),
    ),
    Operation(
        "GET",
        "/phone-numbers",
        list_phone_numbers,
        Scope.AGENTS_READ,
        "List phone number assignments",
        _NUMBERS_TAG,
        query_model=CursorQuery,
        response_model=PhoneNumberResponse,
        envelope="C",
        errors=(422,),
    ),
    Operation(
        "DELETE",
        "/phone-numbers/{phone_number_id}",
        unassign_phone_number,
        Scope.AGENTS_WRITE,
        "Remove a phone number assignment",
        _NUMBERS_TAG,
        status_code=204,
        errors=(404,),
    ),
)
