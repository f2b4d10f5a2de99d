"""The carrier's media stream of a live call: authenticate it, then run the call on it.

1. The handshake: when it carries `X-Twilio-Signature`, the signature must be the account's
   over the stream URL (the carrier signs websocket requests too); a bad one is refused
   before the upgrade.
2. `connected`, then `start` (within `START_SECONDS`, at most `START_MESSAGES` messages):
   its `customParameters.token` must open a call (tokens.py: unexpired, never used, the call
   under way) whose carrier SID is the stream's `callSid`. Anything else closes the socket
   (1008) without a byte of audio.
3. The call runs (pipeline.py) with the agent's voice and ears; then, unless the caller
   already left or the session acted on the line, the line is hung up, and its log is
   finished (record.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import orjson
import structlog
from starlette.websockets import WebSocket, WebSocketDisconnect

from app.agents.models import Agent
from app.calls.models import CallLog
from app.calls.stream_tokens import consume_stream_token
from app.calls.telephony import GATEWAY_ID_PREFIX, MEDIA_STREAM_PATH
from app.calls.web import is_browser_session
from app.engine.engine import ConversationEngine
from app.engine.limits import ConversationLimitReached
from app.engine.types import AgentProfile
from app.integrations.telephony.signature import SIGNATURE_HEADER, is_valid_signature
from app.integrations.telephony.twilio import stream_url
from app.kit.errors import DomainError
from app.provider_credentials.service import StoredCredential, organization_credential
from app.resources import Resources
from app.voice.line import CallLine, CarrierLine
from app.voice.record import finish_call, record_progress
from app.voice.runtime import VoiceRuntime, runtime_of

if TYPE_CHECKING:
    from pipecat.serializers.base_serializer import FrameSerializer

    from app.voice.session import CallSession

logger = structlog.get_logger("switchboard.voice")

START_SECONDS = 10.0
START_MESSAGES = 5
POLICY_VIOLATION = 1008
TRY_AGAIN_LATER = 1013
# Reasons after which the caller is gone (or elsewhere): nothing to hang up.
LINE_ALREADY_DONE = frozenset({"caller_hung_up", "transferred"})


_QUIETED: list[bool] = []


def quiet_pipecat() -> None:
    """pipecat logs every frame decision at DEBUG through loguru: keep its warnings only."""
    if not _QUIETED:
        import sys

        from loguru import logger as loguru_logger

        loguru_logger.remove()
        loguru_logger.add(sys.stderr, level="WARNING")
        _QUIETED.append(True)


def _signature_ok(websocket: WebSocket, runtime: VoiceRuntime) -> bool:
    signature = websocket.headers.get(SIGNATURE_HEADER)
    settings = runtime.settings
    if signature is None:
        return True
    if not settings.telephony_auth_token or not settings.telephony_public_url:
        return False
    url = stream_url(settings.telephony_public_url, MEDIA_STREAM_PATH)
    return is_valid_signature(settings.telephony_auth_token, url, [], signature)


async def _start_message(websocket: WebSocket, max_bytes: int) -> dict[str, Any] | None:
    """The stream's `start` message, or None (timeout, too many or too big messages)."""
    async with asyncio.timeout(START_SECONDS):
        for _ in range(START_MESSAGES):
            text = await websocket.receive_text()
            if len(text) > max_bytes:
                return None
            try:
                message = orjson.loads(text)
            except orjson.JSONDecodeError:
                return None
            if not isinstance(message, dict):
                return None
            if message.get("event") == "start":
                start = message.get("start")
                return start if isinstance(start, dict) else None
    return None


async def _credential(
    resources: Resources, organization_id: str, provider: str
) -> StoredCredential | None:
    return await organization_credential(resources, organization_id, provider)


async def media_stream(websocket: WebSocket) -> None:
    runtime = runtime_of(websocket.app)
    if runtime is None or runtime.draining:
        await websocket.close(code=TRY_AGAIN_LATER)
        return
    if not _signature_ok(websocket, runtime):
        await websocket.close(code=POLICY_VIOLATION)
        return
    await websocket.accept()
    try:
        opened = await _open(websocket, runtime)
    except (TimeoutError, WebSocketDisconnect, UnicodeDecodeError, KeyError, TypeError):
        opened = None
    if opened is None:
        with contextlib.suppress(Exception):
            await websocket.close(code=POLICY_VIOLATION)
        return
    call_log, agent, start = opened
    await _run(websocket, runtime, call_log, agent, start)


async def _open(
    websocket: WebSocket, runtime: VoiceRuntime
) -> tuple[CallLog, Agent, dict[str, Any]] | None:
    start = await _start_message(websocket, runtime.settings.voice_max_message_bytes)
    if start is None:
        return None
    parameters = start.get("customParameters")
    token = parameters.get("token") if isinstance(parameters, dict) else None
    call_sid, stream_sid = start.get("callSid"), start.get("streamSid")
    if (
        not isinstance(token, str)
        or not isinstance(call_sid, str)
        or not isinstance(stream_sid, str)
    ):
        return None
    resources = runtime.resources
    async with resources.session(writes=True) as session:
        call_log_id = await consume_stream_token(session, token)
        if call_log_id is None:
            await session.rollback()
            logger.info("media stream refused", reason="token")
            return None
        call_log = await session.get(CallLog, call_log_id)
        assert call_log is not None
        if is_browser_session(call_log):  # a browser's token opens its own stream only
            await session.rollback()
            logger.info("media stream refused", reason="browser", call_log_id=call_log_id)
            return None
        if call_log.call_id.startswith(GATEWAY_ID_PREFIX):
            call_log.call_id = call_sid  # the stream came before the placement was recorded
        elif call_log.call_id != call_sid:
            await session.rollback()
            logger.info("media stream refused", reason="call", call_log_id=call_log_id)
            return None
        agent = await session.get(Agent, call_log.agent_id) if call_log.agent_id else None
        if agent is None or agent.organization_id != call_log.organization_id:
            await session.rollback()
            return None
        await session.commit()
    return call_log, agent, start


async def _run(
    websocket: WebSocket,
    runtime: VoiceRuntime,
    call_log: CallLog,
    agent_row: Agent,
    start: dict[str, Any],
) -> None:
    from app.voice.protocol import SAMPLE_RATE, MediaStreamSerializer

    call_sid = str(start["callSid"])
    serializer = MediaStreamSerializer(
        str(start["streamSid"]), max_message_bytes=runtime.settings.voice_max_message_bytes
    )
    try:
        await hold_call(
            websocket,
            runtime,
            call_log,
            agent_row,
            call_sid=call_sid,
            line=CarrierLine(runtime.carrier.client, call_sid),
            serializer=serializer,
            sample_rate=SAMPLE_RATE,
            audio_out_10ms_chunks=2,  # 20 ms media messages, as the carrier sends them
        )
    finally:
        with contextlib.suppress(Exception):
            await websocket.close()


async def hold_call(
    websocket: WebSocket,
    runtime: VoiceRuntime,
    call_log: CallLog,
    agent_row: Agent,
    *,
    call_sid: str,
    line: CallLine,
    serializer: FrameSerializer,
    sample_rate: int,
    audio_out_10ms_chunks: int,
) -> CallSession:
    """Run the call on `websocket` (whose far end `serializer` speaks) until it is over,
    then, unless the caller already left, hang up `line` and record the call's end. Every live
    transport (the carrier's stream, a browser's) comes through here."""
    # pipecat is imported with the first call, not with the API.
    quiet_pipecat()
    from pipecat.transports.websocket.fastapi import (
        FastAPIWebsocketParams,
        FastAPIWebsocketTransport,
    )

    from app.voice.pipeline import run_agent_call
    from app.voice.session import CallSession, LiveCall
    from app.voice.speech import choose_voice, guard, speech_to_text, text_to_speech

    resources, settings = runtime.resources, runtime.settings
    agent = AgentProfile.of(agent_row, livemode=call_log.livemode)
    config = agent.config
    voice_settings = config.get("voice_settings")
    voice_provider = str((voice_settings or {}).get("provider") or "elevenlabs")
    org = call_log.organization_id
    deepgram = await _credential(resources, org, "deepgram")
    voice_key = await _credential(resources, org, voice_provider) if voice_settings else None
    allow_private = settings.allow_private_webhook_urls
    try:
        await guard(deepgram, allow_private)
    except DomainError:
        deepgram = None  # an endpoint the guard refuses is no endpoint
    try:
        await guard(voice_key, allow_private)
    except DomainError:
        voice_key = None
    if deepgram is None:
        logger.info("call without speech to text", call_log_id=call_log.id, reason="no_deepgram")
    choice = choose_voice(voice_settings, voice_key is not None)
    call = LiveCall(
        call_log_id=call_log.id,
        call_sid=call_sid,
        direction=call_log.direction,
        agent=agent,
        stt_provider="deepgram" if deepgram is not None else None,
        tts_provider=choice.provider,
    )
    engine = ConversationEngine(resources, runtime.engine_clients)

    async def write_progress(transcript: list[dict[str, Any]], events: list[Any]) -> bool:
        async with resources.session(writes=True) as session:
            kept = await record_progress(session, call.call_log_id, transcript, events)
            await session.commit()
        return kept

    session = CallSession(
        call=call,
        engine=engine,
        line=line,
        write_progress=write_progress,
        speech_prices=settings.voice_prices,
    )
    transport = FastAPIWebsocketTransport(
        websocket,
        FastAPIWebsocketParams(
            audio_in_enabled=True,
            audio_out_enabled=True,
            audio_in_sample_rate=sample_rate,
            audio_out_sample_rate=sample_rate,
            audio_out_10ms_chunks=audio_out_10ms_chunks,
            audio_out_end_silence_secs=0,
            serializer=serializer,
            allowed_origins=[],
        ),
    )
    welcome = config.get("welcome_message") or f"Hello, this is {agent.name}. How can I help?"
    runtime.calls[call.call_log_id] = session
    try:
        async with engine.conversation(agent, f"call:{call.call_log_id}"):
            await run_agent_call(
                session,
                transport,
                stt=speech_to_text(deepgram, str(config.get("language") or "en-US"), sample_rate),
                tts=text_to_speech(choice, voice_key, sample_rate),
                welcome=welcome,
                settings=settings,
                sample_rate=sample_rate,
            )
    except ConversationLimitReached:
        session.end_now("ai_limit")
    except Exception:  # this call's failure only: its log says so, the process goes on
        logger.exception("live call failed", call_log_id=call.call_log_id)
        session.end_now("pipeline_error")
    finally:
        runtime.calls.pop(call.call_log_id, None)
        await session.settle()  # a transfer's answer may come after the stream stopped
        # The line is down before the call is recorded as over.
        if session.stream_end not in LINE_ALREADY_DONE and not session.line_acted:
            await line.hang_up()
        await _finish(session, resources)
    return session


async def _finish(session: Any, resources: Resources) -> None:
    try:
        outcome = await session.outcome()
        async with resources.session(writes=True) as db:
            await finish_call(db, session.call.call_log_id, outcome)
            await db.commit()
    except Exception:  # the sweep ends it if this write never lands
        logger.exception("call end not recorded", call_log_id=session.call.call_log_id)
