"""Media streams that must not open, streams that break, providers that fail, limits."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from app.integrations.telephony.signature import SIGNATURE_HEADER, compute_signature
from tests.calls.fake_carrier import AUTH_TOKEN
from tests.voice.conftest import SERVICE_NUMBER, TOKEN_PATTERN, URL_PATTERN, Voice
from tests.voice.media_client import MediaStreamClient

STREAM_TWIML = re.compile(
    r'^<Response><Connect><Stream url="ws://127\.0\.0\.1:\d+/voice/twilio">'
    r'<Parameter name="token" value="[^"]+"/></Stream></Connect></Response>$'
)


async def _refused(client: MediaStreamClient) -> None:
    await client.wait_until(lambda: client.closed, seconds=10)
    assert client.close_code == 1008
    assert client.events("media") == []


async def test_tokens_open_one_stream_of_one_call(voice: Voice) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-tokens")
    agent_id = await voice.agent(tenant)
    _call_log_id, placed = await voice.place(tenant, agent_id)
    url = URL_PATTERN.search(placed["twiml"]).group(1)  # type: ignore[union-attr]
    token = TOKEN_PATTERN.search(placed["twiml"]).group(1)  # type: ignore[union-attr]
    assert STREAM_TWIML.match(placed["twiml"])

    for bad in (None, "", token[:-4] + "AAAA", token.replace(".", "x", 1), "x" * 5000):
        client = MediaStreamClient(url, call_sid=placed["sid"])
        await client.open(bad)
        await _refused(client)
    # Another call's SID with this call's token.
    stranger = MediaStreamClient(url)
    await stranger.open(token)
    await _refused(stranger)

    # An expired token: its expiry is inside the hashed token, so it cannot be extended.
    parts = token.split(".")
    expired = MediaStreamClient(url, call_sid=placed["sid"])
    await expired.open(".".join([parts[0], str(int(time.time()) - 1), parts[2]]))
    await _refused(expired)

    # A forged signature on the handshake.
    forged = MediaStreamClient(url, call_sid=placed["sid"])
    with pytest.raises(Exception, match="403"):
        await forged.open(token, headers={SIGNATURE_HEADER: "bm90LWEtc2lnbmF0dXJl"})


async def test_a_used_token_opens_nothing_twice(voice: Voice) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-reuse")
    agent_id = await voice.agent(tenant)
    call_log_id, placed = await voice.place(tenant, agent_id)
    signature = compute_signature(AUTH_TOKEN, URL_PATTERN.search(placed["twiml"]).group(1), [])  # type: ignore[union-attr]
    media = await voice.answer(placed, headers={SIGNATURE_HEADER: signature})
    await media.wait_for_marks(1)
    token = TOKEN_PATTERN.search(placed["twiml"]).group(1)  # type: ignore[union-attr]
    again = MediaStreamClient(media.url, call_sid=placed["sid"])
    await again.open(token)
    await _refused(again)
    await media.stop()
    await voice.ended(tenant, call_log_id)


async def test_a_broken_stream_ends_its_call_and_no_other(voice: Voice) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-broken")
    agent_id = await voice.agent(tenant)
    broken_id, broken_call = await voice.place(tenant, agent_id)
    healthy_id, healthy_call = await voice.place(tenant, agent_id)
    broken = await voice.answer(broken_call)
    healthy = await voice.answer(healthy_call)
    await broken.wait_for_marks(1)
    for _ in range(20):
        await broken.send_raw("{not json")
    log = await voice.ended(tenant, broken_id)
    assert (log["status"], log["end_reason"]) == ("failed", "malformed_stream")
    assert (broken_call["sid"], {"Status": "completed"}) in voice.carrier.updates
    assert (await voice.call_log(tenant, healthy_id))["status"] == "in-progress"
    await healthy.wait_for_marks(1)

    oversized_id, oversized_call = await voice.place(tenant, agent_id)
    oversized = await voice.answer(oversized_call)
    await oversized.send_raw('{"event": "media", "media": {"payload": "' + "A" * 70_000 + '"}}')
    log = await voice.ended(tenant, oversized_id)
    assert (log["status"], log["end_reason"]) == ("failed", "oversized_message")
    await healthy.stop()
    assert (await voice.ended(tenant, healthy_id))["end_reason"] == "caller_hung_up"


async def test_without_speech_to_text_the_caller_is_told(voice: Voice) -> None:
    tenant = await voice.live_tenant()  # no deepgram credential
    agent_id = await voice.agent(tenant)
    call_log_id, placed = await voice.place(tenant, agent_id)
    media = await voice.answer(placed)
    log = await voice.ended(tenant, call_log_id, seconds=30)
    assert log["end_reason"] == "no_speech_to_text"
    said = " ".join(s["text"] for s in log["transcript"])
    assert "can't hear" in said
    assert len(media.audio()) > 8000  # said out loud, not hung up silently
    assert (placed["sid"], {"Status": "completed"}) in voice.carrier.updates


async def test_a_rejected_speech_to_text_key_ends_the_call_with_its_reason(voice: Voice) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-bad-key")
    voice.speech.rejected_keys.add("dg-bad-key")
    agent_id = await voice.agent(tenant)
    call_log_id, placed = await voice.place(tenant, agent_id)
    await voice.answer(placed)
    log = await voice.ended(tenant, call_log_id, seconds=30)
    assert (log["status"], log["end_reason"]) == ("failed", "stt_rejected")


async def test_a_dropping_provider_is_given_one_reconnection(voice: Voice) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-drops")
    voice.speech.drops["deepgram"] = 5
    # The carrier stops the stream before it answers the transfer request, as Twilio may.
    voice.carrier.update_delay = 1.0
    agent_id = await voice.agent(tenant, transfer_phone_number="+14155550199")
    call_log_id, placed = await voice.place(tenant, agent_id)
    await voice.answer(placed)
    log = await voice.ended(tenant, call_log_id, seconds=40)
    # Apologised, then handed to a person.
    assert log["end_reason"] == "transferred"
    assert "trouble hearing" in log["transcript"][-1]["text"]
    deepgram = [c for c in voice.speech.connections if c[0] == "deepgram"]
    assert len(deepgram) >= 2


async def test_a_silent_caller_is_told_goodbye(strict_voice: Voice) -> None:
    voice = strict_voice
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-silent")
    agent_id = await voice.agent(tenant)
    call_log_id, placed = await voice.place(tenant, agent_id)
    await voice.answer(placed)
    log = await voice.ended(tenant, call_log_id, seconds=30)
    assert log["end_reason"] == "silence_timeout"
    assert "Goodbye" in log["transcript"][-1]["text"]


async def test_keypad_presses_reach_the_engine_as_text(voice: Voice) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-keys")
    await voice.credential(tenant, "openai", "sk-fake", f"{voice.llm_url}/v1")
    agent_id = await voice.agent(tenant)
    call_log_id, placed = await voice.place(tenant, agent_id)
    media = await voice.answer(placed)
    await media.wait_for_marks(1)
    await media.press("42#")
    await media.wait_for_marks(2)
    await media.stop()
    log = await voice.ended(tenant, call_log_id)
    assert "keypad: 42#" in log["transcript"][1]["text"]
    assert "keypad: 42#" in voice.llm.model_requests()[0].body["messages"][-1]["content"]


async def test_live_calls_are_limited_per_organization(strict_voice: Voice) -> None:
    voice = strict_voice
    tenant = await voice.live_tenant()
    agent_id = await voice.agent(tenant)
    first = await voice.dispatch(tenant, agent_id)
    assert first.status_code == 201
    over = await voice.dispatch(tenant, agent_id)
    assert over.status_code == 429
    assert over.json()["error"] == "rate_limit_exceeded"
    assert over.json()["retry_after"] > 0
    # Another organization is not held back.
    other = await voice.live_tenant()
    other_agent = await voice.agent(other)
    assert (await voice.dispatch(other, other_agent)).status_code == 201
    # An inbound call over the limit hears busy.
    response = await voice.client.post(
        "/api/v1/phone-numbers",
        json={"phone_number": SERVICE_NUMBER, "agent_id": agent_id},
        headers=tenant.headers,
    )
    assert response.status_code in (201, 400), response.text


async def test_an_inbound_call_is_answered_with_its_media_stream(voice: Voice) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-inbound")
    agent_id = await voice.agent(tenant)
    voice.carrier.incoming_numbers.append("+14155550111")
    response = await voice.client.post(
        "/api/v1/phone-numbers",
        json={"phone_number": "+14155550111", "agent_id": agent_id},
        headers=tenant.headers,
    )
    assert response.status_code == 201, response.text
    twiml, sid = await voice.ring("+14155550111")
    assert STREAM_TWIML.match(twiml), twiml
    media = MediaStreamClient(URL_PATTERN.search(twiml).group(1), call_sid=sid)  # type: ignore[union-attr]
    voice.carrier.update_hooks.append(media.carrier_ended(asyncio.get_running_loop()))
    await media.open(TOKEN_PATTERN.search(twiml).group(1))  # type: ignore[union-attr]
    await media.wait_for_marks(1)
    await media.stop()
    logs = (await voice.client.get("/api/v1/call-logs", headers=tenant.headers)).json()["items"]
    [log] = [item for item in logs if item["call_id"] == sid]
    assert log["direction"] == "inbound"
    assert (await voice.ended(tenant, log["id"]))["transcript"][0]["text"] == "Hi."
