"""The call's pipecat pipeline, the one entry point every live transport runs through.

```python
await run_agent_call(session, transport, stt=stt, tts=tts, welcome=..., settings=settings)
```

`transport` is any pipecat transport whose serializer speaks the far end's protocol: the
carrier's media stream (`FastAPIWebsocketTransport` + `MediaStreamSerializer`, stream.py), or
a browser's websocket with its own serializer. The pipeline is

    transport.input() → speech to text → keypad → user turns (Silero VAD) → AgentTurns
      → text to speech → transport.output()

Turn-taking: the user aggregator's VAD starts a caller turn (which interrupts the agent:
pipecat broadcasts an `InterruptionFrame`, the serializer sends `clear`, the voice drops
what it had not said and `AgentTurns` cancels the engine's turn) and ends it after
`END_OF_TURN_SECONDS` of silence once a transcript arrived; keypad presses become text
after a short pause or `#`. The session's limits run beside it: silence (the user
aggregator's idle timer, after the agent stopped speaking), the longest call, and the
heartbeat that saves progress. The call is over when the session says so (`stream_over`)
or the pipeline ends by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.frames.frames import ErrorFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.dtmf_aggregator import DTMFAggregator
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMUserAggregator,
    LLMUserAggregatorParams,
)
from pipecat.services.stt_service import STTService
from pipecat.services.tts_service import TTSService
from pipecat.transports.base_transport import BaseTransport
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.workers.runner import WorkerRunner

from app.config import Settings
from app.voice.session import MAX_DURATION_GOODBYE, SILENCE_GOODBYE, AgentTurns, CallSession
from app.voice.vad import SharedSessionSileroVAD

logger = structlog.get_logger("switchboard.voice")

# Silence after the caller's words that ends their turn (with a transcript in hand).
END_OF_TURN_SECONDS = 0.6
KEYPAD_PAUSE_SECONDS = 1.5
KEYPAD_PREFIX = "(The caller pressed these keys on the phone keypad: "
# How long the pipeline gets to wind down once the call is over.
SHUTDOWN_SECONDS = 5.0


def _caller_turns(settings: Settings, sample_rate: int) -> LLMUserAggregator:
    return LLMUserAggregator(
        LLMContext(),
        params=LLMUserAggregatorParams(
            vad_analyzer=SharedSessionSileroVAD(sample_rate=sample_rate, params=VADParams()),
            user_turn_strategies=UserTurnStrategies(
                stop=[SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=END_OF_TURN_SECONDS)]
            ),
            user_idle_timeout=settings.voice_silence_timeout_seconds,
        ),
    )


async def run_agent_call(
    session: CallSession,
    transport: BaseTransport,
    *,
    stt: STTService | None,
    tts: TTSService,
    welcome: str,
    settings: Settings,
    sample_rate: int = 8000,
) -> None:
    """Run the call until it is over; never raises for the call's own failures (they end
    the call with a reason), so one call cannot take others on the process down."""
    caller = _caller_turns(settings, sample_rate)
    turns = AgentTurns(session, welcome=welcome, can_hear=stt is not None)
    # Every 20 ms of caller audio passes the keypad step; it only forwards it, so it runs in
    # the task that pushes (direct mode) instead of costing a queue hop per frame.
    keypad = DTMFAggregator(
        timeout=KEYPAD_PAUSE_SECONDS, prefix=KEYPAD_PREFIX, enable_direct_mode=True
    )
    processors: list[Any] = [transport.input()]
    if stt is not None:
        processors.append(stt)
    processors += [keypad, caller, turns, tts, transport.output()]
    worker = PipelineWorker(
        Pipeline(processors),
        params=PipelineParams(audio_in_sample_rate=sample_rate, audio_out_sample_rate=sample_rate),
        idle_timeout_secs=None,
        enable_rtvi=False,
        enable_turn_tracking=False,
        check_dangling_tasks=False,
    )

    async def _silence(*_args: Any) -> None:
        session.close("silence_timeout", say=SILENCE_GOODBYE)

    async def _error(_worker: Any, frame: ErrorFrame) -> None:
        processor = frame.processor
        usable = bool(getattr(processor, "is_usable", True))
        if processor is not None and processor is stt:
            session.provider_failed("stt", permanent=not usable)
        elif processor is not None and processor is tts:
            session.provider_failed("tts", permanent=not usable)
        else:
            logger.warning("call pipeline error", call_log_id=session.call.call_log_id)

    async def _gone(*_args: Any) -> None:
        session.end_now("caller_hung_up")

    caller.add_event_handler("on_user_turn_idle", _silence)
    worker.add_event_handler("on_pipeline_error", _error)
    transport.add_event_handler("on_client_disconnected", _gone)

    runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    beating = asyncio.create_task(_heartbeat(session, settings.voice_heartbeat_seconds))
    limit = asyncio.create_task(_longest_call(session, settings.voice_max_call_seconds))
    over = asyncio.create_task(session.stream_over.wait())
    try:
        await asyncio.wait({running, over}, return_when=asyncio.FIRST_COMPLETED)
        if running.done() and not over.done():
            session.end_now("pipeline_error")
    finally:
        for task in (beating, limit, over):
            task.cancel()
        if not running.done():
            with contextlib.suppress(Exception):
                await worker.cancel(reason=session.end_reason)
            try:
                await asyncio.wait_for(running, SHUTDOWN_SECONDS)
            except (TimeoutError, Exception):
                running.cancel()
                with contextlib.suppress(BaseException):
                    await running
        await asyncio.gather(beating, limit, over, return_exceptions=True)


async def _heartbeat(session: CallSession, seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        await session.save_progress(force=True)


async def _longest_call(session: CallSession, seconds: float) -> None:
    await asyncio.sleep(seconds)
    session.close("max_duration", say=MAX_DURATION_GOODBYE)
