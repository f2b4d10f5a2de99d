"""The agent's voices (ElevenLabs, Cartesia, offline), a voice process killed mid-call, and
the live-call limit held by two processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from app.config import Settings
from app.main import create_app
from app.resources import Resources
from app.voice.record import fail_stale_streams
from app.voice.speech import synthesize
from tests.calls.fake_carrier import ACCOUNT_SID, AUTH_TOKEN
from tests.conftest import TEST_SECRET
from tests.voice.conftest import TOKEN_PATTERN, Voice, free_port
from tests.voice.media_client import MediaStreamClient, ulaw_rms


def test_the_offline_voice_says_real_speech() -> None:
    pcm, rate = synthesize("Thank you for calling. How can I help you today?")
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    seconds = len(samples) / rate
    assert 1.5 < seconds < 6  # about 2.5 words per second
    assert np.sqrt(np.mean(samples**2)) > 500  # not silence
    # Speech has pauses and syllables: its loudness varies a lot over 50 ms windows.
    window = rate // 20
    loudness = [
        np.sqrt(np.mean(samples[i : i + window] ** 2))
        for i in range(0, len(samples) - window, window)
    ]
    assert min(loudness) < 0.2 * max(loudness)


@pytest.mark.parametrize("provider", ["elevenlabs", "cartesia"])
async def test_the_agents_voice_speaks_on_the_organizations_key(
    voice: Voice, provider: str
) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, f"dg-{provider}")
    await voice.credential(tenant, provider, f"{provider}-key", voice.speech_url)
    agent_id = await voice.agent(
        tenant,
        welcome_message="Hello there.",
        voice_settings={"voice_id": "voice-7", "name": "Rachel", "provider": provider},
    )
    call_log_id, placed = await voice.place(tenant, agent_id)
    media = await voice.answer(placed)
    await media.wait_for_marks(1)
    assert (provider, "Hello there. ") in voice.speech.texts or any(
        p == provider and "Hello there." in t for p, t in voice.speech.texts
    )
    assert ulaw_rms(media.audio()) > 1000  # the provider's tone, not the offline voice
    [connection] = [c for c in voice.speech.connections if c[0] == provider]
    if provider == "elevenlabs":
        assert connection[1] == "/v1/text-to-speech/voice-7/multi-stream-input"
        assert connection[2]["output_format"] == "pcm_8000"
    await media.stop()
    log = await voice.ended(tenant, call_log_id)
    assert log["cost"] > 0  # characters spoken at the provider's price


async def test_a_killed_voice_process_leaves_its_transcript_and_the_sweep_fails_the_call(
    voice: Voice, tmp_path: Path
) -> None:
    tenant = await voice.live_tenant()
    await voice.ears(tenant, "dg-killed", "Is anyone there?")
    agent_id = await voice.agent(tenant)
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": voice.settings.database_url,
        "SWITCHBOARD_SECRET_KEY": TEST_SECRET,
        "SWITCHBOARD_VAR_DIR": str(tmp_path / "voice-var"),
        "SWITCHBOARD_TELEPHONY_API_URL": voice.settings.telephony_api_url,
        "SWITCHBOARD_TELEPHONY_ACCOUNT_SID": ACCOUNT_SID,
        "SWITCHBOARD_TELEPHONY_AUTH_TOKEN": AUTH_TOKEN,
        "SWITCHBOARD_TELEPHONY_PUBLIC_URL": voice.url,
        "SWITCHBOARD_ALLOW_PRIVATE_WEBHOOK_URLS": "true",
        "SWITCHBOARD_VOICE_HEARTBEAT_SECONDS": "0.5",
    }
    env.pop("REDIS_URL", None)
    process = subprocess.Popen(  # noqa: ASYNC220 (started once, not awaited on)
        [sys.executable, "-m", "app.cli", "voice", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient() as probe:
            deadline = time.monotonic() + 120  # a booting process on a busy machine
            while True:
                try:
                    if (await probe.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline
                assert process.poll() is None
                await asyncio.sleep(0.1)
        call_log_id, placed = await voice.place(tenant, agent_id)
        token = TOKEN_PATTERN.search(placed["twiml"]).group(1)  # type: ignore[union-attr]
        # The load balancer sends the stream to the voice process.
        media = MediaStreamClient(f"ws://127.0.0.1:{port}/voice/twilio", call_sid=placed["sid"])
        await media.open(token)
        await media.wait_for_marks(1, seconds=40)
        await media.say("Is anyone there?")
        await media.wait_for_marks(2, seconds=40)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    left = await voice.call_log(tenant, call_log_id)
    assert left["status"] == "in-progress"
    assert [s["text"] for s in left["transcript"][:2]] == ["Hi.", "Is anyone there?"]
    resources = Resources.from_settings(voice.settings, serves_api=False)
    try:
        await asyncio.sleep(0.3)
        assert await fail_stale_streams(resources, stale_after_seconds=0.2) >= 1
    finally:
        await resources.aclose()
    log = await voice.call_log(tenant, call_log_id)
    assert (log["status"], log["end_reason"]) == ("failed", "process_lost")
    assert log["transcript"][:2] == left["transcript"][:2]
    assert log["ended_at"] is not None


async def test_the_live_call_limit_holds_across_processes(strict_voice: Voice) -> None:
    voice = strict_voice
    second_settings = Settings(**{**voice.settings.model_dump(), "voice_serve_streams": False})
    second = create_app(second_settings)  # its own engine, pools and limiter
    tenant = await voice.live_tenant()
    agent_id = await voice.agent(tenant)
    body = {"agent_id": agent_id, "to_number": "+14155550142", "from_number": "+14155550100"}
    async with second.router.lifespan_context(second):
        transport = httpx.ASGITransport(app=second)
        async with httpx.AsyncClient(transport=transport, base_url="http://second") as other:
            first, rival = await asyncio.gather(
                voice.client.post("/api/v1/calls", json=body, headers=tenant.headers),
                other.post("/api/v1/calls", json=body, headers=tenant.headers),
            )
            assert sorted([first.status_code, rival.status_code]) == [201, 429]
            refused = rival if rival.status_code == 429 else first
            assert refused.json()["retry_after"] == 60  # docs/api.md's body; the header is exact
            assert refused.headers["retry-after"] == "30"
            # And once more on the second process, after both committed.
            again = await other.post("/api/v1/calls", json=body, headers=tenant.headers)
            assert again.status_code == 429
