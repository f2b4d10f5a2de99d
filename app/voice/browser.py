"""Browser sessions: a web page's microphone and speaker on the call's pipeline.

The framing (docs/api.md, "Browser sessions"), on the websocket `url` that
`POST /api/v1/calls/web` answers:

- the browser's first message is text, `{"event": "start", "token": "…"}`, within
  `START_SECONDS`; a missing, forged, expired or used token, or one of a phone call, closes the
  socket (1008) without a byte of audio, as on the carrier's stream;
- the service answers `{"event": "started", "call_log_id", "sample_rate": 16000,
  "encoding": "pcm_s16le"}`; from then on binary messages are raw 16-bit little-endian mono
  PCM at that rate, both ways (the microphone in, the agent's voice out);
- text from the service: `{"event": "transcript", "speaker", "text", "timestamp"}` as each
  segment is said, `{"event": "clear"}` when the caller talks over the agent (drop what is
  queued for playing), `{"event": "ended", "end_reason"}` just before it closes the socket;
- text from the browser: `{"event": "stop"}` hangs up (closing the socket does too).

The call itself is the phone call's (stream.py `hold_call`): same VAD, speech to text,
conversation engine, voices, limits and records; only the serializer and the line differ.
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import lru_cache
from importlib import resources as package_files
from typing import TYPE_CHECKING

import orjson
import structlog
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from app.agents.models import Agent
from app.calls.models import CallLog
from app.calls.stream_tokens import consume_stream_token
from app.calls.web import is_browser_session
from app.voice.runtime import VoiceRuntime, runtime_of
from app.voice.stream import (
    POLICY_VIOLATION,
    START_SECONDS,
    TRY_AGAIN_LATER,
    hold_call,
)

if TYPE_CHECKING:
    from app.voice.session import CallSession

logger = structlog.get_logger("switchboard.voice")

STATIC_DIR = str(package_files.files("app.voice") / "static")
STATIC_URL_PREFIX = "/voice/static"
# Wideband, both ways (the carrier's stream runs at 8 kHz).
SAMPLE_RATE = 16000
ENCODING = "pcm_s16le"
NORMAL_CLOSURE = 1000
# 40 ms of the agent's voice per binary message.
AUDIO_OUT_10MS_CHUNKS = 4


class BrowserLine:
    """A browser session's line: hanging up tells the page why and closes its socket; there
    is no number to transfer to (the session hangs up instead)."""

    def __init__(self, websocket: WebSocket, runtime: VoiceRuntime, call_log_id: str) -> None:
        self.websocket = websocket
        self.runtime = runtime
        self.call_log_id = call_log_id
        self.session: CallSession | None = None
        self._lock = asyncio.Lock()

    def _end_reason(self) -> str | None:
        session = self.session or self.runtime.calls.get(self.call_log_id)
        return None if session is None else session.end_reason

    async def hang_up(self) -> bool:
        async with self._lock:
            if self.websocket.application_state != WebSocketState.CONNECTED:
                return True
            reason = self._end_reason()
            with contextlib.suppress(Exception):  # the browser already left
                await self.websocket.send_text(
                    orjson.dumps({"event": "ended", "end_reason": reason}).decode()
                )
            with contextlib.suppress(Exception):
                await self.websocket.close(code=NORMAL_CLOSURE)
            return True

    async def transfer(self, number: str) -> bool:
        return False


async def _start_message(websocket: WebSocket, max_bytes: int) -> str | None:
    """The token of the browser's `start` message, or None."""
    async with asyncio.timeout(START_SECONDS):
        message = await websocket.receive()
    text = message.get("text")
    if not isinstance(text, str) or len(text) > max_bytes:
        return None
    try:
        start = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(start, dict) or start.get("event") != "start":
        return None
    token = start.get("token")
    return token if isinstance(token, str) else None


async def _open(websocket: WebSocket, runtime: VoiceRuntime) -> tuple[CallLog, Agent] | None:
    token = await _start_message(websocket, runtime.settings.voice_max_message_bytes)
    if token is None:
        return None
    async with runtime.resources.session(writes=True) as session:
        call_log_id = await consume_stream_token(session, token)
        call_log = await session.get(CallLog, call_log_id) if call_log_id else None
        if call_log is None or not is_browser_session(call_log):
            await session.rollback()
            logger.info("browser stream refused", reason="token")
            return None
        agent = await session.get(Agent, call_log.agent_id) if call_log.agent_id else None
        if agent is None or agent.organization_id != call_log.organization_id:
            await session.rollback()
            return None
        await session.commit()
    return call_log, agent


async def browser_stream(websocket: WebSocket) -> None:
    runtime = runtime_of(websocket.app)
    if runtime is None or runtime.draining:
        await websocket.close(code=TRY_AGAIN_LATER)
        return
    await websocket.accept()
    try:
        opened = await _open(websocket, runtime)
    except (TimeoutError, WebSocketDisconnect, KeyError, TypeError):
        opened = None
    if opened is None:
        with contextlib.suppress(Exception):
            await websocket.close(code=POLICY_VIOLATION)
        return
    call_log, agent = opened
    line = BrowserLine(websocket, runtime, call_log.id)
    started = {
        "event": "started",
        "call_log_id": call_log.id,
        "sample_rate": SAMPLE_RATE,
        "encoding": ENCODING,
    }
    # pipecat is imported with the first call, not with the API.
    from app.voice.browser_protocol import BrowserSerializer

    try:
        await websocket.send_text(orjson.dumps(started).decode())
        session = await hold_call(
            websocket,
            runtime,
            call_log,
            agent,
            call_sid=call_log.call_id,
            line=line,
            serializer=BrowserSerializer(
                max_message_bytes=runtime.settings.voice_max_message_bytes
            ),
            sample_rate=SAMPLE_RATE,
            audio_out_10ms_chunks=AUDIO_OUT_10MS_CHUNKS,
        )
        line.session = session
    finally:
        await line.hang_up()


@lru_cache(maxsize=1)
def _page() -> str:
    return (package_files.files("app.voice") / "static" / "browser.html").read_text("utf-8")


async def browser_page(_request: Request) -> Response:
    """The page that talks to an agent: microphone, transcript as it grows, hang-up."""
    return HTMLResponse(_page(), headers={"Cache-Control": "no-store"})
