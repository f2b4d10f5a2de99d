"""Browser sessions end to end on the served app: a websocket client playing the page's part
streams microphone audio and hears the agent (the offline voice), the transcript arriving as
it grows; the token rules of the carrier's stream (single use, expiry, refused without a byte
of audio); the agent that cannot hear says so."""

from __future__ import annotations

import audioop
from typing import Any

from app.calls.models import CallLog
from app.calls.stream_tokens import new_stream_token
from tests.conftest import Tenant
from tests.voice.browser_client import BrowserClient
from tests.voice.conftest import Voice, events_of
from tests.voice.media_client import MediaStreamClient

WELCOME = "Hi, this is Ava. How can I help?"
QUESTION = "What are your opening hours?"


async def start(voice: Voice, tenant: Tenant, agent_id: str) -> dict[str, Any]:
    response = await voice.client.post(
        "/api/v1/calls/web", json={"agent_id": agent_id}, headers=tenant.headers
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_a_browser_hears_the_welcome_and_talks_to_the_agent(voice: Voice) -> None:
    tenant = await voice.tenants.organization()  # a test key: offline voice and responder
    await voice.ears(tenant, "dg-web", QUESTION)
    agent_id = await voice.agent(tenant, welcome_message=WELCOME)
    session = await start(voice, tenant, agent_id)
    assert session["url"] == voice.url.replace("http://", "ws://") + "/voice/web"
    browser = BrowserClient(session["url"])
    await browser.open(session["token"])
    await browser.wait_until(lambda: browser.of("started"))
    [started] = browser.of("started")
    assert started == {
        "event": "started",
        "call_log_id": session["call_log_id"],
        "sample_rate": 16000,
        "encoding": "pcm_s16le",
    }
    # The welcome: in the transcript at once, then spoken by the offline voice at 16 kHz.
    await browser.wait_until(lambda: browser.said("agent") == [WELCOME])
    await browser.wait_until(lambda: len(browser.audio) > 16000 * 2 * 1.0)
    assert audioop.rms(bytes(browser.audio), 2) > 300
    await browser.play(b"\x00\x00" * 16000)  # a second of room silence after the welcome
    await browser.say(QUESTION)
    await browser.wait_until(lambda: len(browser.said("agent")) >= 2, seconds=40)
    assert browser.said("caller") == [QUESTION]
    segments = browser.of("transcript")
    assert [s["speaker"] for s in segments] == ["agent", "caller", "agent"]
    assert segments[0]["timestamp"] <= segments[1]["timestamp"] <= segments[2]["timestamp"]

    # The call log grows as the call goes, then ends when the browser hangs up.
    live = await voice.call_log(tenant, session["call_log_id"])
    assert live["status"] == "in-progress"
    await browser.hang_up()
    log = await voice.ended(tenant, session["call_log_id"])
    assert log["direction"] == "inbound"
    assert log["status"] == "completed"
    assert log["end_reason"] == "caller_hung_up"
    assert [s["text"] for s in log["transcript"]] == [s["text"] for s in segments]
    assert log["summary"]
    kinds = [kind for kind, _ in await events_of(voice, session["call_log_id"])]
    assert kinds[0] == "call.started"
    assert "ai.reply.generated" in kinds
    assert kinds[-1] == "call.completed"


async def test_without_speech_to_text_the_agent_says_so_and_hangs_up(voice: Voice) -> None:
    tenant = await voice.tenants.organization()
    agent_id = await voice.agent(tenant, welcome_message=WELCOME)
    session = await start(voice, tenant, agent_id)
    browser = BrowserClient(session["url"])
    await browser.open(session["token"])
    await browser.wait_until(lambda: browser.closed, seconds=40)
    said = browser.said("agent")
    assert said[0] == WELCOME
    assert "can't hear callers" in " ".join(said)
    assert browser.of("ended") == [{"event": "ended", "end_reason": "no_speech_to_text"}]
    assert browser.close_code == 1000
    assert len(browser.audio) > 16000 * 2 * 2  # the welcome and the explanation were spoken
    log = await voice.ended(tenant, session["call_log_id"])
    assert log["end_reason"] == "no_speech_to_text"


async def _refused(url: str, token: str | None) -> BrowserClient:
    browser = BrowserClient(url)
    await browser.open(token)
    await browser.wait_until(lambda: browser.closed, seconds=15)
    assert browser.close_code == 1008
    assert not browser.audio
    assert not browser.events
    return browser


async def test_bad_expired_and_used_tokens_are_refused_without_audio(voice: Voice) -> None:
    tenant = await voice.tenants.organization()
    await voice.ears(tenant, "dg-web-tokens")
    agent_id = await voice.agent(tenant)
    session = await start(voice, tenant, agent_id)
    url, token = session["url"], session["token"]
    await _refused(url, None)
    await _refused(url, "not-a-token")
    call_log_id, expiry, _secret = token.split(".")
    await _refused(url, f"{call_log_id}.{expiry}.{'A' * 43}")  # forged
    await _refused(url, f"{call_log_id}.{int(expiry) + 60}.{_secret}")  # expiry moved

    # The carrier's stream does not take a browser's token.
    media = MediaStreamClient(voice.url.replace("http://", "ws://") + "/voice/twilio")
    await media.open(token)
    await media.wait_until(lambda: media.closed, seconds=15)
    assert media.close_code == 1008
    assert not media.events("media")

    # The token opens one stream, once.
    browser = BrowserClient(url)
    await browser.open(token)
    await browser.wait_until(lambda: browser.of("started"))
    await _refused(url, token)
    await browser.hang_up()
    await voice.ended(tenant, session["call_log_id"])
    await _refused(url, token)

    # An expired token.
    other = await start(voice, tenant, agent_id)
    async with voice.sessionmaker() as db:
        if db.get_bind().dialect.name == "sqlite":
            await db.connection(execution_options={"sqlite_begin": "IMMEDIATE"})
        row = await db.get(CallLog, other["call_log_id"])
        assert row is not None
        expired = new_stream_token(row, -30)
        await db.commit()
    await _refused(url, expired)
