"""Live calls over the carrier's media stream, end to end: the offline voice and fake
providers, the conversation engine answering, the carrier's REST API acting."""

from __future__ import annotations

import asyncio
import time

from tests.calls.fake_carrier import signed_status
from tests.conftest import Tenant
from tests.voice.conftest import Voice, events_of
from tests.voice.media_client import ulaw_rms

LONG_WELCOME = (
    "Hi, this is Ava from Acme Dental. Thank you for calling us today. "
    "I can help with appointments, opening hours and anything else you need."
)


async def test_a_turn_is_heard_answered_with_a_tool_and_kept_while_the_call_runs(
    voice: Voice,
) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-turn", "What are your opening hours?")
    await voice.credential(tenant, "openai", "sk-fake", f"{voice.llm_url}/v1")
    agent_id = await voice.agent(tenant, welcome_message="Hi, this is Ava.")
    call_log_id, placed = await voice.place(tenant, agent_id)
    assert "MachineDetection=DetectMessageEnd" not in placed["twiml"]
    media = await voice.answer(placed)
    await media.wait_for_marks(1)
    # The offline voice said the welcome: real speech, of a plausible length.
    welcome = media.audio()
    assert 0.5 < len(welcome) / 8000 < 5
    assert ulaw_rms(welcome) > 300
    await media.say("What are your opening hours?")
    await media.wait_for_marks(2, seconds=30)

    # Mid-call: the transcript so far is stored already.
    live = await voice.call_log(tenant, call_log_id)
    assert live["status"] == "in-progress"
    assert [s["speaker"] for s in live["transcript"]] == ["agent", "caller", "agent"]
    assert live["transcript"][1]["text"] == "What are your opening hours?"
    assert live["transcript"][0]["timestamp"] < live["transcript"][1]["timestamp"]
    # The engine ran the turn: a tool round (search_knowledge), then the words.
    first, second = voice.llm.model_requests()[:2]
    assert "search_knowledge" in [t["function"]["name"] for t in first.body["tools"]]
    assert second.body["messages"][-1]["role"] == "tool"
    assert live["transcript"][2]["text"].startswith("Here is what I found")

    await media.stop()
    log = await voice.ended(tenant, call_log_id)
    assert log["status"] == "completed"
    assert log["end_reason"] == "caller_hung_up"
    assert log["duration_seconds"] >= 1
    assert log["summary"]
    assert log["cost"] > 0  # model tokens and speech to text
    kinds = [kind for kind, _ in await events_of(voice, call_log_id)]
    assert kinds[0] == "call.started"
    assert "ai.tool.executed" in kinds
    assert "ai.reply.generated" in kinds
    assert kinds[-1] == "call.completed"


async def test_caller_speech_interrupts_the_agent(voice: Voice) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-barge", "Sorry, can you hold on a second please?")
    agent_id = await voice.agent(tenant, welcome_message=LONG_WELCOME)
    call_log_id, placed = await voice.place(tenant, agent_id)
    media = await voice.answer(placed)
    await media.wait_until(lambda: len(media.events("media")) > 25)  # the agent is talking
    await media.say("Sorry, can you hold on a second please?")
    await media.wait_until(lambda: media.events("clear"))
    [clear] = media.events("clear")
    assert clear["streamSid"] == media.stream_sid
    # The caller's turn ends (after its end-of-turn silence) before they hang up.
    await _transcript_has(voice, tenant, call_log_id, "caller")
    await media.stop()
    log = await voice.ended(tenant, call_log_id)
    # Cut short: the welcome is in the transcript, then the caller's words.
    assert [s["speaker"] for s in log["transcript"]][:2] == ["agent", "caller"]


async def test_the_agent_ends_the_call_through_the_carrier(voice: Voice) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-bye", "Thanks, bye.")
    await voice.credential(tenant, "openai", "sk-fake", f"{voice.llm_url}/v1")
    agent_id = await voice.agent(tenant)
    call_log_id, placed = await voice.place(tenant, agent_id)
    media = await voice.answer(placed)
    await media.wait_for_marks(1)
    await media.say("Thanks, bye.")
    log = await voice.ended(tenant, call_log_id, seconds=30)
    assert log["end_reason"] == "agent_ended"
    assert log["status"] == "completed"
    assert (placed["sid"], {"Status": "completed"}) in voice.carrier.updates
    assert media.closed


async def test_transfer_to_human_dials_the_transfer_number(voice: Voice) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-person", "Can I talk to a person?")
    await voice.credential(tenant, "openai", "sk-fake", f"{voice.llm_url}/v1")
    agent_id = await voice.agent(tenant, transfer_phone_number="+1 415 555 0199")
    # The carrier stops the stream before it answers the transfer request, as Twilio may:
    # the call is still recorded as transferred, and nothing hangs it up.
    voice.carrier.update_delay = 1.0
    call_log_id, placed = await voice.place(tenant, agent_id)
    media = await voice.answer(placed)
    await media.wait_for_marks(1)
    await media.say("Can I talk to a person?")
    log = await voice.ended(tenant, call_log_id, seconds=30)
    assert log["end_reason"] == "transferred"
    [(_sid, update)] = [u for u in voice.carrier.updates if u[0] == placed["sid"]]
    assert update == {"Twiml": "<Response><Dial>+14155550199</Dial></Response>"}
    handoffs = [
        data for kind, data in await events_of(voice, call_log_id) if kind == "agent.handoff"
    ]
    assert handoffs
    assert handoffs[0]["reason"] == "the customer asked for a person"


async def test_a_machine_gets_the_voicemail_message(voice: Voice) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-vm")
    agent_id = await voice.agent(tenant, voicemail_message="Please call us back.")
    call_log_id, placed = await voice.place(tenant, agent_id)
    assert "MachineDetection" in [k for k, _ in _placement_form(voice, placed["sid"])]
    media = await voice.answer(placed)
    await media.wait_for_marks(1)
    before = len(media.audio())
    url = dict(_placement_form(voice, placed["sid"]))["AsyncAmdStatusCallback"]
    form, headers = signed_status(url, {"CallSid": placed["sid"], "AnsweredBy": "machine_end_beep"})
    response = await voice.client.post(url.removeprefix(voice.url), data=form, headers=headers)
    assert response.status_code == 204, response.text
    log = await voice.ended(tenant, call_log_id, seconds=30)
    assert log["answered_by"] == "machine_end_beep"
    assert log["end_reason"] == "voicemail_left"
    assert log["transcript"][-1] == {
        "speaker": "agent",
        "text": "Please call us back.",
        "timestamp": log["transcript"][-1]["timestamp"],
    }
    assert len(media.audio()) > before  # the message was spoken before the hang-up
    assert voice.carrier.updates[-1] == (placed["sid"], {"Status": "completed"})


async def test_the_carrier_ending_the_call_reaches_its_stream(voice: Voice) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-end")
    agent_id = await voice.agent(tenant)
    call_log_id, placed = await voice.place(tenant, agent_id)
    media = await voice.answer(placed)
    await media.wait_for_marks(1)
    url = f"{voice.url}/webhooks/telephony/status?call_log_id={call_log_id}"
    form, headers = signed_status(
        url, {"CallSid": placed["sid"], "CallStatus": "completed", "CallDuration": "4"}
    )
    response = await voice.client.post(url.removeprefix(voice.url), data=form, headers=headers)
    assert response.status_code == 204
    log = await voice.ended(tenant, call_log_id)
    assert log["end_reason"] == "caller_hung_up"
    assert log["transcript"][0]["text"] == "Hi."
    await asyncio.wait_for(media.close(), 5)


async def _transcript_has(voice: Voice, tenant: Tenant, call_log_id: str, speaker: str) -> None:
    """Until the call's stored transcript (saved as it grows) has a segment of `speaker`."""
    deadline = time.monotonic() + 30
    while True:
        log = await voice.call_log(tenant, call_log_id)
        if any(s["speaker"] == speaker for s in log["transcript"] or []):
            return
        assert time.monotonic() < deadline, f"no {speaker} segment: {log['transcript']}"
        await asyncio.sleep(0.1)


def _placement_form(voice: Voice, sid: str) -> list[tuple[str, str]]:
    callback = voice.carrier.calls[sid]["status_callback"]
    for method, path, form in voice.carrier.requests:
        if (
            method == "POST"
            and path.endswith("/Calls.json")
            and ("StatusCallback", callback) in form
        ):
            return form
    raise AssertionError("no placement")
