"""How a call's session ends when the stream finishes while the session is closing the call:
a line action in flight is waited for (the carrier may stop the stream before it answers),
a closing that had not reached the line is dropped, and nothing is left running."""

from __future__ import annotations

import asyncio
from typing import Any

from app.engine.types import AgentProfile
from app.voice.session import CallSession, LiveCall


class SlowLine:
    """A carrier line that stops the stream at once, then answers `delay` seconds later."""

    def __init__(self, session_of: Any, delay: float) -> None:
        self.session_of = session_of
        self.delay = delay
        self.actions: list[str] = []

    async def _act(self, action: str) -> bool:
        self.actions.append(action)
        self.session_of().end_now("caller_hung_up")  # the carrier's `stop` comes first
        await asyncio.sleep(self.delay)
        return True

    async def hang_up(self) -> bool:
        return await self._act("hang_up")

    async def transfer(self, number: str) -> bool:
        return await self._act(f"transfer:{number}")


def _session(line: Any, **config: Any) -> CallSession:
    agent = AgentProfile("a1", "o1", True, "Ava", "UTC", config, "v1")
    call = LiveCall("cl1", "CA1", "outbound", agent, stt_provider="deepgram", tts_provider="x")

    async def write(*_args: Any) -> bool:
        return True

    return CallSession(call=call, engine=None, line=line, write_progress=write, speech_prices=None)  # type: ignore[arg-type]


async def test_a_transfer_answered_after_the_stream_stopped_is_recorded() -> None:
    holder: list[CallSession] = []
    line = SlowLine(lambda: holder[0], delay=0.3)
    session = _session(line, transfer_phone_number="+14155550199")
    holder.append(session)
    session.hand_off("handoff_requested", say=None)
    await asyncio.wait_for(session.stream_over.wait(), 5)
    assert session.end_reason == "handoff_requested"  # the stream stopped, the answer is due
    await session.settle()
    assert session.end_reason == "transferred"
    assert session.line_acted
    assert session.stream_end == "caller_hung_up"
    assert line.actions == ["transfer:+14155550199"]


async def test_a_caller_who_leaves_during_the_last_sentence_is_not_acted_on() -> None:
    holder: list[CallSession] = []
    line = SlowLine(lambda: holder[0], delay=0.0)
    session = _session(line)
    holder.append(session)
    session.utterances = 1  # the goodbye is still playing
    session.close("silence_timeout", say=None, speaking=40)
    await asyncio.sleep(0.05)
    session.end_now("caller_hung_up")
    await session.settle()
    assert line.actions == []
    assert not session.line_acted
    assert session.end_reason == "silence_timeout"
    assert session._close_task is not None
    assert session._close_task.cancelled()


async def test_an_unanswered_line_action_does_not_hold_the_call_forever(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr("app.voice.session.LINE_ACTION_SECONDS", 0.2)
    holder: list[CallSession] = []
    line = SlowLine(lambda: holder[0], delay=30.0)
    session = _session(line)
    holder.append(session)
    session.close("agent_ended", say=None)
    await asyncio.wait_for(session.stream_over.wait(), 5)
    await asyncio.wait_for(session.settle(), 5)
    assert session.end_reason == "agent_ended"
    assert session._close_task is not None
    await asyncio.sleep(0)
    assert session._close_task.done()
