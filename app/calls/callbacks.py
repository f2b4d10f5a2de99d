"""The carrier's callbacks (outside /api/v1): signed with the account's auth token, as
Twilio signs them (app/integrations/telephony/signature.py), then handed to the same status
handler the simulator reports through (app/calls/telephony.py `apply_status`)."""

from __future__ import annotations

import math
import re
from urllib.parse import parse_qsl

import structlog
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.calls import control, telephony
from app.config import Settings
from app.integrations.telephony.signature import SIGNATURE_HEADER, is_valid_signature
from app.kit.errors import DomainError, InvalidInput
from app.kit.http_errors import ErrorStyle, error_response, json_response
from app.resources import Resources

logger = structlog.get_logger("switchboard.calls")

# Carrier callbacks are a few hundred bytes of form fields.
MAX_CALLBACK_BYTES = 16 * 1024


def _signed_url(request: Request, settings: Settings) -> str:
    """The URL the carrier requested, as it saw it (the public URL behind a proxy)."""
    if not settings.telephony_public_url:
        return str(request.url)
    query = request.url.query
    base = settings.telephony_public_url.rstrip("/") + request.url.path
    return f"{base}?{query}" if query else base


async def _verified_form(request: Request, settings: Settings) -> list[tuple[str, str]] | None:
    if not settings.telephony_auth_token:
        return None
    body = await request.body()
    if len(body) > MAX_CALLBACK_BYTES:
        return None
    params = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
    signature = request.headers.get(SIGNATURE_HEADER)
    if not is_valid_signature(
        settings.telephony_auth_token, _signed_url(request, settings), params, signature
    ):
        return None
    return params


# Longest call the carrier places (Twilio: 24 hours); a duration past it is not a real call's.
MAX_CALL_SECONDS = 24 * 3600
# A price far past any call's, in USD.
MAX_PRICE = 10_000.0
# The carrier's call SIDs (`CA` + 32 hex digits for Twilio), with room for compatible
# carriers: letters, digits, `_` and `-` only.
CALL_SID = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_URL_LENGTH = 2048
_UNPRINTABLE = re.compile(r"[\x00-\x20\x7f]")


def _duration(value: str | None) -> int | None:
    if not value:
        return None
    if not value.isascii() or not value.isdigit() or int(value) > MAX_CALL_SECONDS:
        raise InvalidInput(
            f"CallDuration must be a whole number of seconds from 0 to {MAX_CALL_SECONDS}",
            field="CallDuration",
        )
    return int(value)


def _cost(value: str | None) -> float | None:
    if not value:
        return None
    try:
        price = abs(float(value))
    except ValueError:
        price = math.inf
    if not price <= MAX_PRICE:  # NaN too
        raise InvalidInput(f"Price must be a number up to {MAX_PRICE:g}", field="Price")
    return price


def _call_sid(value: str) -> str:
    if value and not CALL_SID.fullmatch(value):
        raise InvalidInput("CallSid must be 1 to 64 letters, digits, '_' or '-'", field="CallSid")
    return value


def _recording_url(value: str | None) -> str | None:
    if not value:
        return None
    if len(value) > MAX_URL_LENGTH or _UNPRINTABLE.search(value):
        raise InvalidInput(
            f"RecordingUrl must be a URL of at most {MAX_URL_LENGTH} characters",
            field="RecordingUrl",
        )
    return value


def status_update(call_log_id: str, form: dict[str, str]) -> telephony.StatusUpdate:
    """A status callback's fields, checked: a value out of range is InvalidInput (400),
    never a value the database refuses."""
    return telephony.StatusUpdate(
        call_log_id=call_log_id,
        call_sid=_call_sid(form.get("CallSid", "")),
        carrier_status=form.get("CallStatus", ""),
        duration_seconds=_duration(form.get("CallDuration")),
        recording_url=_recording_url(form.get("RecordingUrl")),
        cost=_cost(form.get("Price") or form.get("CallPrice")),
    )


async def telephony_status(request: Request) -> Response:
    """A call's progress: 204 when taken (also when it changed nothing), 403 for a bad
    signature, 400 for a value out of range, 404 for a call this account's carrier did not
    place."""
    resources: Resources = request.app.state.resources
    params = await _verified_form(request, resources.settings)
    if params is None:
        return json_response({"detail": "Invalid carrier signature"}, 403)
    try:
        # call_log_id is absent for inbound calls.
        update = status_update(request.query_params.get("call_log_id", ""), dict(params))
        async with resources.session(writes=True) as session:
            outcome = await telephony.apply_status(session, update, livemode=True)
            await session.commit()
    except DomainError as exc:
        return error_response(exc, ErrorStyle.DETAIL)
    if outcome.hand_to_stream:  # the process holding the stream ends the call
        await control.publish(
            resources.redis, {"call_log_id": outcome.call_log.id, "action": "hangup"}
        )
    return Response(status_code=204)


NOT_IN_SERVICE = "<Response><Say>This number is not in service.</Say><Hangup/></Response>"
# Too many live calls of the organization under way: the caller hears busy.
BUSY = '<Response><Reject reason="busy"/></Response>'


async def telephony_incoming(request: Request) -> Response:
    """The carrier asks what to do with a call to one of the service's numbers: the agent
    assigned to the number answers (TwiML), and the call is logged `inbound`."""
    resources: Resources = request.app.state.resources
    params = await _verified_form(request, resources.settings)
    if params is None:
        return json_response({"detail": "Invalid carrier signature"}, 403)
    form = dict(params)
    if not form.get("CallSid"):
        return json_response({"detail": "CallSid is required"}, 400)
    try:
        incoming = telephony.IncomingCall(
            call_sid=_call_sid(form["CallSid"]),
            from_number=form.get("From", ""),
            to_number=form.get("To", ""),
        )
        settings = resources.settings
        async with resources.session(writes=True) as session:
            call_log = await telephony.receive_call(
                session, incoming, max_live_calls=settings.voice_max_concurrent_calls
            )
            answer = (
                None
                if call_log is None
                else telephony.media_stream_answer(
                    call_log,
                    settings.telephony_public_url or str(request.base_url),
                    settings.voice_stream_token_seconds,
                )
            )
            await session.commit()
    except telephony.LiveCallLimitReached:
        return Response(BUSY, media_type="text/xml")
    except DomainError as exc:
        return error_response(exc, ErrorStyle.DETAIL)
    if answer is None:
        return Response(NOT_IN_SERVICE, media_type="text/xml")
    return Response(answer, media_type="text/xml")


# Twilio's AnsweredBy values of asynchronous answering-machine detection.
ANSWERED_BY = frozenset(
    {
        "human",
        "machine_start",
        "machine_end_beep",
        "machine_end_silence",
        "machine_end_other",
        "fax",
        "unknown",
    }
)


async def telephony_machine_detection(request: Request) -> Response:
    """The answering-machine verdict on an outbound live call: recorded on the call log
    (`answered_by`) and handed to the process holding its stream, which leaves the agent's
    voicemail message (or hangs up) when a machine answered."""
    resources: Resources = request.app.state.resources
    params = await _verified_form(request, resources.settings)
    if params is None:
        return json_response({"detail": "Invalid carrier signature"}, 403)
    form = dict(params)
    answered_by = form.get("AnsweredBy", "")
    if answered_by not in ANSWERED_BY:
        return json_response({"detail": "AnsweredBy is not a known verdict"}, 400)
    try:
        call_sid = _call_sid(form.get("CallSid", ""))
    except DomainError as exc:
        return error_response(exc, ErrorStyle.DETAIL)
    async with resources.session(writes=True) as session:
        call_log = await telephony.record_answered_by(
            session, request.query_params.get("call_log_id", ""), call_sid, answered_by
        )
        await session.commit()
    if call_log is None:
        return json_response({"detail": "Call log not found"}, 404)
    await control.publish(
        resources.redis,
        {"call_log_id": call_log.id, "action": "voicemail", "answered_by": answered_by},
    )
    return Response(status_code=204)


ROUTES = [
    Route(telephony.STATUS_PATH, telephony_status, methods=["POST"]),
    Route(telephony.INCOMING_PATH, telephony_incoming, methods=["POST"]),
    Route(telephony.MACHINE_DETECTION_PATH, telephony_machine_detection, methods=["POST"]),
]
