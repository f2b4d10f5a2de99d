"""Live calls over the carrier's media stream, end to end."""

from __future__ import annotations

from tests.voice.conftest import Voice
from tests.voice.media_client import ulaw_rms


async def test_welcome_then_a_turn_answered_with_a_tool(voice: Voice) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-key-1", "What are your opening hours?")
    await voice.credential(tenant, "openai", "sk-fake", f"{voice.llm_url}/v1")
    agent_id = await voice.agent(tenant, welcome_message="Hi, this is Ava.")
    call_log_id, placed = await voice.place(tenant, agent_id)
    media = await voice.answer(placed)
    await media.wait_for_marks(1)
    welcome = media.audio()
    assert len(welcome) > 8000 * 0.5 and ulaw_rms(welcome) > 300
    await media.say("What are your opening hours?")
    await media.wait_for_marks(2, seconds=30)
    await media.stop()
    log = await voice.ended(tenant, call_log_id)
    print(log)
    assert log["status"] == "completed"
    speakers = [s["speaker"] for s in log["transcript"]]
    assert speakers[:3] == ["agent", "caller", "agent"]
