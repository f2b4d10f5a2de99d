"""Browser sessions: a person talks to an agent from a web page, through the same voice
engine as a phone call (app/voice/browser.py holds the stream).

Starting one logs an `inbound` call (`in-progress`, `call.started`, call id `web_…`) and
hands back the session's websocket URL and a single-use stream token (app/calls/stream_tokens.py).
A session counts against the organization's limit of calls holding the voice engine in
either mode: it runs the real pipeline, test keys included. One that is never opened is
ended by the voice sweep (`not_connected`) once its token has expired.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import Request

from app.access.subject import Subject
from app.agents.repository import AgentRepository
from app.agents.schemas import ACTIVE
from app.agents.service import INVALID_ID_MESSAGE
from app.calls.models import BROWSER_CALL_ID_PREFIX, CallLog
from app.calls.repository import CallLogRepository
from app.calls.schemas import WebCallStart, call_log_to_public
from app.calls.stream_tokens import new_stream_token, token_expires_at
from app.calls.telephony import (
    CALL_STARTED,
    IN_PROGRESS,
    LiveCallLimitReached,
    has_room_for_live_call,
)
from app.config import Settings
from app.core.clock import utcnow
from app.core.ids import normalize_id
from app.events.service import emit
from app.integrations.telephony.twilio import stream_url
from app.kit.errors import InvalidInput, NotFound

# Where browsers stream their microphone (websocket) and the page that does it (GET).
BROWSER_STREAM_PATH = "/voice/web"
# A browser session has no phone numbers; its call log names the browser instead.
BROWSER_NUMBER = "browser"


@dataclass(frozen=True, slots=True)
class WebCall:
    call_log: CallLog
    url: str
    token: str

    @property
    def expires_at(self) -> datetime:
        return token_expires_at(self.token)


async def start_web_call(
    session: AsyncSession,
    subject: Subject,
    data: WebCallStart,
    *,
    public_url: str,
    max_calls: int,
    token_seconds: float,
) -> WebCall:
    """Log a browser session with one of the organization's active agents and mint the token
    that opens its stream at `public_url`. Over the organization's `max_calls` under way:
    LiveCallLimitReached (429)."""
    agent_id = normalize_id(data.agent_id.strip())
    if agent_id is None:
        raise InvalidInput(INVALID_ID_MESSAGE, field="agent_id")
    agent = await AgentRepository(session, subject).get_row(agent_id)
    if agent is None:
        raise NotFound("Agent")
    if agent.status != ACTIVE:
        raise InvalidInput(f"Agent is not active (status: {agent.status})", field="agent_id")
    if not await has_room_for_live_call(session, subject.organization_id, max_calls):
        raise LiveCallLimitReached()
    call_log = CallLog(
        organization_id=subject.organization_id,
        livemode=subject.livemode,
        call_id=BROWSER_CALL_ID_PREFIX + secrets.token_hex(16),
        agent_id=agent.id,
        from_number=BROWSER_NUMBER,
        to_number=BROWSER_NUMBER,
        direction="inbound",
        status=IN_PROGRESS,
        duration_seconds=0,
        started_at=utcnow(),
        transcript=[],
        cost=0.0,
    )
    CallLogRepository(session, subject).add(call_log)
    await session.flush()
    token = new_stream_token(call_log, token_seconds)
    web_call = WebCall(call_log, stream_url(public_url, BROWSER_STREAM_PATH), token)
    # Never opened: the sweep ends it once the token can no longer open it.
    call_log.media_heartbeat_at = web_call.expires_at
    await session.flush()
    await emit(session, call_log, CALL_STARTED, call_log_to_public(call_log))
    return web_call


def public_base_url(request: Request, settings: Settings) -> str:
    """The service's public base URL: the configured one, else the one the request came to."""
    return settings.telephony_public_url or str(request.base_url)


def is_browser_session(call_log: CallLog) -> bool:
    return call_log.call_id.startswith(BROWSER_CALL_ID_PREFIX)
