"""One live call in the process that holds its media stream.

`CallSession` is the call's state: the conversation so far (the engine's `Message`s), the
transcript (segments timed from the answer), what the call used (speech seconds, characters
spoken, model tokens and cost) and how it ends. `AgentTurns` is the pipeline's LLM step: a
pipecat `FrameProcessor` that hands each finished caller turn to the conversation engine
(`ConversationEngine.respond`, the same tools, knowledge, handoff and cost as every channel)
and streams the reply's words to the voice as the model writes them.

Endings go through `close`: the agent may say a last sentence (a goodbye, the handoff line,
an apology, the voicemail message), the session waits until it was spoken, then acts on the
line (hang up, or transfer to the agent's `transfer_phone_number`); the carrier then ends the
stream. A stream that stops, breaks or is told to end finishes the call at once.

The carrier may stop the stream before its answer to the line action arrives (it applies
the new TwiML first), so a finished stream is not yet a finished call: `settle` waits for a
line action in flight (at most `LINE_ACTION_SECONDS`) before the call is recorded, and
drops a closing that had not reached the line (the caller left during the last sentence).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    CancelFrame,
    EndFrame,
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    OutputTransportMessageUrgentFrame,
    StartFrame,
    TTSSpeakFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from app.engine.engine import ConversationEngine
from app.engine.pricing import speech_cost_usd
from app.engine.types import LLM_UNAVAILABLE, AgentProfile, Message, TurnResult, Usage
from app.kit.errors import RateLimited
from app.voice.frames import TRANSCRIPT_MESSAGE, CarrierMark, StreamFault, StreamStopped
from app.voice.line import CallLine
from app.voice.record import CallOutcome

logger = structlog.get_logger("switchboard.voice")

# Spoken when the agent closes the call itself.
GOODBYE = "Thank you for calling. Goodbye."
SILENCE_GOODBYE = "I haven't heard anything for a while, so I'll end the call here. Goodbye."
MAX_DURATION_GOODBYE = "We have reached the time limit for this call. Goodbye."
NO_EARS = "I'm sorry, I can't hear callers on this line right now."
CANT_HEAR = "I'm sorry, I'm having trouble hearing you right now."
APOLOGY = "I'm sorry, something went wrong on my side."
NO_TRANSFER_LINE = "Someone from the team will get back to you. Goodbye."
# How long a last sentence may take to be spoken (synthesis included, on a busy machine)
# before the line action happens anyway.
SPEECH_GRACE_SECONDS = 10.0
CHARACTERS_PER_SECOND = 12.0
# How long the carrier gets to end the stream after a line action.
STREAM_END_GRACE_SECONDS = 5.0
# How long a finished stream waits for the line action in flight (the carrier client's own
# timeout is 10 s) before the call is recorded anyway.
LINE_ACTION_SECONDS = 15.0
# Transcript segments that make the session write its progress before the heartbeat.
PROGRESS_BATCH = 2
# Provider errors a service may have before the call gives up on it (the service's own
# reconnection handles the first).
PROVIDER_ERRORS_TOLERATED = 1
# End reasons that mean the call did not work (status `failed`); the rest are `completed`.
FAILURE_REASONS = frozenset(
    {
        "stream_error",
        "malformed_stream",
        "oversized_message",
        "stt_rejected",
        "stt_unavailable",
        "tts_rejected",
        "tts_unavailable",
        "pipeline_error",
        "ai_limit",
    }
)


@dataclass(frozen=True, slots=True)
class LiveCall:
    """Who and what the call is, as the stream's token named it."""

    call_log_id: str
    call_sid: str
    direction: str
    agent: AgentProfile
    stt_provider: str | None  # None: no speech-to-text credential
    tts_provider: str

    @property
    def ids(self) -> dict[str, Any]:
        return {
            "call_log_id": self.call_log_id,
            "call_id": self.call_sid,
            "agent_id": self.agent.agent_id,
        }


ProgressWriter = Callable[[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]], Awaitable[bool]]


@dataclass
class CallSession:
    call: LiveCall
    engine: ConversationEngine
    line: CallLine
    write_progress: ProgressWriter
    speech_prices: str | None
    started: float = field(default_factory=time.monotonic)
    history: list[Message] = field(default_factory=list)
    transcript: list[dict[str, Any]] = field(default_factory=list)
    pending_events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    unsaved_segments: int = 0
    usage: Usage = field(default_factory=Usage)
    llm_cost: float = 0.0
    tts_characters: int = 0
    end_reason: str | None = None
    closing: bool = False
    # The line action is under way (`acting`) or was done (`line_acted`: hung up or
    # transferred through the carrier).
    acting: bool = False
    line_acted: bool = False
    # How the stream itself ended (stopped by the carrier, broken, told to end), if it did.
    stream_end: str | None = None
    provider_errors: dict[str, int] = field(default_factory=dict)
    # Set when the stream is over (stopped, broken, closed): the pipeline then ends.
    stream_over: asyncio.Event = field(default_factory=asyncio.Event)
    # Utterances handed to the voice, and those the transport finished playing.
    utterances: int = 0
    utterances_played: int = 0
    spoken: asyncio.Event = field(default_factory=asyncio.Event)
    turns: AgentTurns | None = None
    _write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _close_task: asyncio.Task[None] | None = None

    # The clock and the transcript

    def now(self) -> float:
        return round(time.monotonic() - self.started, 2)

    def segment(self, speaker: str, text: str) -> float:
        at = self.now()
        self.transcript.append({"speaker": speaker, "text": text, "timestamp": at})
        self.unsaved_segments += 1
        return at

    def add_events(self, result: TurnResult, asked_at: float, reply_at: float) -> None:
        for event_type, data in result.events:
            stamp = asked_at if event_type == "agent.handoff" else reply_at
            self.pending_events.append((event_type, {**self.call.ids, **data, "timestamp": stamp}))

    async def save_progress(self, *, force: bool = False) -> None:
        """Write the transcript and events so far (every PROGRESS_BATCH segments, or now)."""
        if not force and self.unsaved_segments < PROGRESS_BATCH:
            return
        async with self._write_lock:
            events, self.pending_events = self.pending_events, []
            self.unsaved_segments = 0
            try:
                await self.write_progress(list(self.transcript), events)
            except Exception:  # the database is away: try again at the next beat
                logger.exception("call progress not saved", call_log_id=self.call.call_log_id)
                self.pending_events[:0] = events

    # The end

    def end_now(self, reason: str) -> None:
        """The stream is over (stopped, broken, told to end): finish without a word."""
        if self.stream_end is None:
            self.stream_end = reason
        if self.end_reason is None:
            self.end_reason = reason
        self.stream_over.set()

    def close(
        self, reason: str, *, say: str | None, transfer: bool = False, speaking: int = 0
    ) -> None:
        """End the call from the agent's side: say `say` (after the `speaking` characters
        already on their way to the voice), then hang up, or transfer."""
        if self.closing or self.stream_over.is_set():
            return
        self.closing = True
        self.end_reason = reason
        self._close_task = asyncio.create_task(self._close(say, transfer, speaking))

    async def _close(self, say: str | None, transfer: bool, speaking: int) -> None:
        number = self.call.agent.config.get("transfer_phone_number")
        if say and self.turns is not None:
            await self.turns.speak(say)
            speaking += len(say)
        if speaking:  # let the caller hear it all before the line changes
            grace = SPEECH_GRACE_SECONDS + speaking / CHARACTERS_PER_SECOND
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_played(), grace)
        acted = False
        self.acting = True
        try:
            if transfer and number:
                acted = await self.line.transfer(str(number))
                if acted:
                    self.end_reason = "transferred"
            if not acted:
                acted = await self.line.hang_up()
        finally:
            self.acting = False
        self.line_acted = acted
        if acted:  # the carrier ends the stream; do not wait for it forever
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stream_over.wait(), STREAM_END_GRACE_SECONDS)
        self.stream_over.set()

    async def settle(self) -> None:
        """The stream is over: let a line action in flight finish (its answer may come
        after the carrier stopped the stream), and drop a closing that had not reached the
        line yet. Never raises: the call is recorded next."""
        task = self._close_task
        if task is None or task.done():
            if task is not None and not task.cancelled() and task.exception() is not None:
                logger.warning("call closing failed", call_log_id=self.call.call_log_id)
            return
        if not self.acting:
            task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), LINE_ACTION_SECONDS)
        except asyncio.CancelledError:
            if not task.cancelled():  # this coroutine itself is cancelled
                raise
        except TimeoutError:
            task.cancel()
            logger.warning("line action unanswered", call_log_id=self.call.call_log_id)
        except Exception:
            logger.exception("call closing failed", call_log_id=self.call.call_log_id)

    async def _all_played(self) -> None:
        while self.utterances_played < self.utterances:
            self.spoken.clear()
            await self.spoken.wait()

    def played(self) -> None:
        self.utterances_played += 1
        self.spoken.set()

    def hand_off(self, reason: str, *, say: str | None, speaking: int = 0) -> None:
        """Give the caller to a person when the agent has a transfer number (`transferred`),
        else tell them and hang up (`reason`)."""
        if self.call.agent.config.get("transfer_phone_number"):
            self.close(reason, say=say, transfer=True, speaking=speaking)
        else:
            line = (say + " " if say else "") + NO_TRANSFER_LINE
            self.close(reason, say=line, speaking=speaking)

    def provider_failed(self, kind: str, permanent: bool) -> None:
        """A speech provider reported an error: a permanent one (4xx) ends the call, a drop is
        reconnected by the service once; the next one ends the call."""
        count = self.provider_errors.get(kind, 0) + 1
        self.provider_errors[kind] = count
        if not permanent and count <= PROVIDER_ERRORS_TOLERATED:
            return
        reason = f"{kind}_{'rejected' if permanent else 'unavailable'}"
        logger.warning("speech provider failed", call_log_id=self.call.call_log_id, reason=reason)
        if kind == "tts":  # no voice left to apologise with
            self.close(reason, say=None, transfer=True)
        else:
            self.hand_off(reason, say=CANT_HEAR)

    async def voicemail(self, answered_by: str) -> None:
        """The carrier's verdict: a machine took the call. Leave the agent's voicemail
        message after the beep, or hang up."""
        if not answered_by.startswith("machine_end") or self.stream_over.is_set():
            return
        message = self.call.agent.config.get("voicemail_message")
        if self.turns is not None:
            await self.turns.stop_talking()
        self.closing = False  # the voicemail supersedes anything the agent was closing with
        if self._close_task is not None:
            self._close_task.cancel()
        if message:
            self.close("voicemail_left", say=str(message))
        else:
            self.close("voicemail_hangup", say=None)

    async def outcome(self) -> CallOutcome:
        """What the call leaves: summary by the agent's model (a deterministic one offline)
        and every cost."""
        duration = max(1, round(time.monotonic() - self.started))
        reason = self.end_reason or "caller_hung_up"
        status = "failed" if reason in FAILURE_REASONS else "completed"
        lines = "\n".join(f"{s['speaker']}: {s['text']}" for s in self.transcript)
        summary, usage, cost = (None, Usage(), 0.0)
        if any(s["speaker"] == "caller" for s in self.transcript):
            summary, usage, cost = await self.engine.summarize(self.call.agent, lines)
        total = self.usage + usage
        speech = speech_cost_usd(
            stt_provider=self.call.stt_provider,
            stt_seconds=duration,
            tts_provider=self.call.tts_provider,
            tts_characters=self.tts_characters,
            overrides=self.speech_prices,
        )
        return CallOutcome(
            status=status,
            end_reason=reason,
            duration_seconds=duration,
            transcript=list(self.transcript),
            summary=summary or self.plain_summary(duration, reason),
            usage_cost=self.llm_cost + cost + speech,
            tokens=(total.input_tokens, total.output_tokens),
            events=list(self.pending_events),
        )

    def plain_summary(self, duration: int, reason: str) -> str:
        said = [s["text"] for s in self.transcript if s["speaker"] == "caller"]
        parts = [f"{self.call.agent.name} spoke with the caller for {duration} s."]
        if said:
            quoted = "; ".join(f'"{text}"' for text in said[:5])
            parts.append(f"The caller said {len(said)} thing(s): {quoted}.")
        else:
            parts.append("The caller said nothing the agent could hear.")
        parts.append(f"The call ended: {reason.replace('_', ' ')}.")
        return " ".join(parts)


class AgentTurns(FrameProcessor):
    """The pipeline's LLM step: the conversation engine answers each finished caller turn.

    Turns run as tasks of their own, so an interruption (the caller talks over the agent)
    cancels the engine's turn at once; words already spoken stay in the transcript. The
    caller's turns arrive as the user aggregator's `LLMContextFrame`s (VAD and the turn
    strategy decided the turn is over); keypad presses arrive the same way, as text.
    """

    def __init__(self, session: CallSession, *, welcome: str, can_hear: bool) -> None:
        # Direct mode: frames are handled in the task that pushes them, without a queue hop
        # (the caller's audio reaches this step 50 times a second only to be dropped); turns
        # run as tasks of their own, so nothing here holds the pusher for long.
        super().__init__(name="agent-turns", enable_direct_mode=True)
        self.session = session
        self.welcome = welcome
        self.can_hear = can_hear
        self._turn: asyncio.Task[None] | None = None
        self._spoken_words: list[str] = []
        self._speaking = False
        self._marks = 0
        session.turns = self

    async def _note(self, speaker: str, text: str) -> float:
        """A transcript segment, kept by the session and sent down the pipeline as a
        message (a browser shows it; the carrier's serializer drops it)."""
        at = self.session.segment(speaker, text)
        segment = {"speaker": speaker, "text": text, "timestamp": at}
        await self.push_frame(
            OutputTransportMessageUrgentFrame(message={"event": TRANSCRIPT_MESSAGE, **segment})
        )
        return at

    # Speaking

    async def speak(self, text: str) -> None:
        """Say `text` as it is (the welcome, a closing line), noted in the transcript."""
        await self._note("agent", text)
        self.session.history.append(Message.assistant(text))
        self.session.tts_characters += len(text)
        self.session.utterances += 1
        await self.push_frame(TTSSpeakFrame(text))

    async def stop_talking(self) -> None:
        await self._cancel_turn()
        await self.broadcast_interruption()  # type: ignore[no-untyped-call]

    async def _greet(self) -> None:
        await self.speak(self.welcome)
        if not self.can_hear:
            self.session.hand_off("no_speech_to_text", say=NO_EARS, speaking=len(self.welcome))

    # Turns

    async def _cancel_turn(self) -> None:
        task, self._turn = self._turn, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if self._spoken_words:  # what was said before the caller cut in
                said = "".join(self._spoken_words).strip()
                if said:
                    await self._note("agent", said)
                    self.session.history.append(Message.assistant(said))
        self._spoken_words = []

    async def _run_turn(self, text: str) -> None:
        session = self.session
        asked_at = await self._note("caller", text)
        session.history.append(Message.user(text))
        self._spoken_words = []
        started = False

        async def on_text(words: str) -> None:
            nonlocal started
            if not started:
                started = True
                session.utterances += 1
                await self.push_frame(LLMFullResponseStartFrame())
            self._spoken_words.append(words)
            session.tts_characters += len(words)
            await self.push_frame(LLMTextFrame(words))

        try:
            result = await session.engine.respond(
                session.call.agent, session.history, on_text=on_text
            )
        except RateLimited:
            self._spoken_words = []
            self._turn = None
            session.hand_off(LLM_UNAVAILABLE, say=APOLOGY)
            return
        if started:
            await self.push_frame(LLMFullResponseEndFrame())
        elif result.reply:
            session.tts_characters += len(result.reply)
            session.utterances += 1
            await self.push_frame(TTSSpeakFrame(result.reply))
        self._spoken_words = []
        self._turn = None
        session.history.extend(result.messages)
        session.usage += result.usage
        session.llm_cost += result.cost
        reply_at = await self._note("agent", result.reply) if result.reply else asked_at
        session.add_events(result, asked_at, reply_at)
        await session.save_progress()
        action = result.action
        if action is None:
            return
        speaking = len(result.reply or "")
        if action.kind == "end":
            session.close("agent_ended", say=None, speaking=speaking)
        elif result.failure is not None:
            session.hand_off(LLM_UNAVAILABLE, say=APOLOGY)
        else:
            session.hand_off("handoff_requested", say=None, speaking=speaking)

    def _caller_said(self, frame: LLMContextFrame) -> str:
        messages = frame.context.get_messages()
        if not messages:
            return ""
        last = messages[-1]
        content = last.get("content") if isinstance(last, dict) else None
        return content.strip() if isinstance(content, str) else ""

    # Frames

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame):
            # The caller's audio ends here: VAD and speech to text are behind us, and the
            # voice and the transport's output have no use for it (50 frames a second saved
            # from two more processors' queues, per call).
            return
        session = self.session
        if isinstance(frame, StartFrame):
            await self.push_frame(frame, direction)
            self.create_task(self._greet(), "greet")
            return
        if isinstance(frame, (EndFrame, CancelFrame)):
            await self._cancel_turn()
            await self.push_frame(frame, direction)
            return
        if isinstance(frame, LLMContextFrame):
            text = self._caller_said(frame)
            frame.context.set_messages([])  # the session keeps the conversation
            if text and not session.closing:
                await self._cancel_turn()
                self._turn = self.create_task(self._run_turn(text), "turn")
            return
        if isinstance(frame, InterruptionFrame):
            if not session.closing:
                await self._cancel_turn()
                session.utterances_played = session.utterances  # what was queued is dropped
            await self.push_frame(frame, direction)
            return
        if isinstance(frame, BotStartedSpeakingFrame):
            self._speaking = True
        elif isinstance(frame, BotStoppedSpeakingFrame):
            if self._speaking and direction == FrameDirection.UPSTREAM:
                self._speaking = False
                session.played()
                self._marks += 1
                # The carrier echoes the mark once it played everything sent before it.
                await self.push_frame(
                    OutputTransportMessageUrgentFrame(
                        message={"event": "mark", "mark": {"name": f"agent-{self._marks}"}}
                    )
                )
        elif isinstance(frame, StreamStopped):
            session.end_now("caller_hung_up")
            return
        elif isinstance(frame, StreamFault):
            session.end_now(frame.reason)
            return
        elif isinstance(frame, CarrierMark):
            return
        await self.push_frame(frame, direction)
