"""The browser-session page (GET /voice/web) in headless Chromium with a fake microphone
playing a WAV file made here with the offline voice: the page starts a session with the key
typed into it, connects, plays the agent's welcome and shows the transcript as it grows,
the caller's question and the agent's answer included; hang-up ends the call. Nothing is
fetched from any host but the service's. A screenshot is saved (SWITCHBOARD_SCREENSHOT_DIR,
tests/browser.py)."""

from __future__ import annotations

import wave
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.browser import browser_page, screenshot_dir
from tests.calls.fake_carrier import RunningCarrier
from tests.conftest import fresh_database
from tests.engine.fakes import FakeProviders
from tests.voice.browser_client import RATE, silent_pcm, spoken_pcm
from tests.voice.conftest import Voice, running_voice
from tests.voice.fakes import FakeSpeech

WELCOME = "Hi, this is Ava. How can I help?"
QUESTION = "What are your opening hours?"


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fresh_database("sqlite", tmp_path_factory.mktemp("voice-page"), "sb_page") as url:
        yield url


@pytest.fixture
async def voice(
    sqlite_url: str,
    tmp_path: Path,
    carrier: RunningCarrier,
    speech_server: tuple[FakeSpeech, str],
    llm_server: tuple[FakeProviders, str],
) -> AsyncIterator[Voice]:
    async with running_voice(sqlite_url, tmp_path, carrier, speech_server, llm_server) as v:
        yield v


def microphone_file(path: Path) -> Path:
    """What the fake microphone hears: a pause while the agent greets, the question, quiet."""
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes(silent_pcm(6.0) + spoken_pcm(QUESTION) + silent_pcm(20.0))
    return path


async def test_the_page_talks_to_the_agent_with_a_fake_microphone(
    voice: Voice, tmp_path: Path
) -> None:
    tenant = await voice.tenants.organization()
    await voice.ears(tenant, "dg-page", QUESTION)
    agent_id = await voice.agent(tenant, welcome_message=WELCOME)
    wav = microphone_file(tmp_path / "microphone.wav")
    switches = [
        "--use-fake-ui-for-media-stream",  # the microphone permission is granted
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
        "--autoplay-policy=no-user-gesture-required",
    ]
    async with browser_page(extra_args=switches) as page:
        await page.goto(voice.url + "/voice/web")
        # The page's script is ready: the Call button is enabled once it handles the click.
        await page.wait_for("document.getElementById('call')?.disabled === false")
        await page.evaluate(
            f"document.getElementById('api-key').value = {tenant.api_key!r};"
            f"document.getElementById('agent-id').value = {agent_id!r};"
            "document.getElementById('call').click()"
        )
        await page.wait_for("document.getElementById('status').dataset.state === 'live'")
        await page.wait_for(
            "[...document.querySelectorAll('#transcript li.agent')]"
            f".some(li => li.textContent.includes({WELCOME!r}))"
        )
        # The welcome's audio arrived and was scheduled for playing.
        await page.wait_for("window.browserSession.heard > 1.5")
        await page.wait_for(
            "[...document.querySelectorAll('#transcript li.caller')]"
            f".some(li => li.textContent.includes({QUESTION!r}))",
            seconds=45,
        )
        await page.wait_for("document.querySelectorAll('#transcript li.agent').length >= 2")
        assert await page.evaluate("window.browserSession.sent") > 5
        await page.screenshot(screenshot_dir(tmp_path) / "browser-session.png")
        call_log_id = await page.evaluate(
            "document.getElementById('status').textContent.match(/call ([0-9a-f-]{36})/)[1]"
        )
        await page.evaluate("document.getElementById('hang-up').click()")
        await page.wait_for("document.getElementById('status').dataset.state === 'ended'")
        assert page.outside_requests() == []
        assert page.console_errors == []
    log = await voice.ended(tenant, call_log_id)
    assert log["direction"] == "inbound"
    assert log["status"] == "completed"
    assert log["end_reason"] == "caller_hung_up"
    assert [s["speaker"] for s in log["transcript"]][:3] == ["agent", "caller", "agent"]
    assert log["transcript"][1]["text"] == QUESTION
