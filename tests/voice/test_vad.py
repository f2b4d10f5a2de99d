"""The shared-session Silero analyzer answers as pipecat's own does, call by call."""

from __future__ import annotations

import asyncio
import audioop

from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams, VADState

from app.voice.vad import SharedSessionSileroVAD, call_model
from tests.voice.media_client import silence, spoken

RATE = 8000
FRAME = 320  # 20 ms of 16-bit PCM at 8 kHz, as the transport hands it over


def caller_audio(text: str) -> bytes:
    ulaw = silence(0.4) + spoken(text) + silence(1.2)
    return audioop.ulaw2lin(ulaw, 2)


async def states(analyzer: SileroVADAnalyzer, pcm: bytes) -> list[VADState]:
    analyzer.set_sample_rate(RATE)
    return [
        await analyzer.analyze_audio(pcm[start : start + FRAME])
        for start in range(0, len(pcm), FRAME)
    ]


def test_it_sets_what_pipecats_analyzer_sets() -> None:
    """A pipecat upgrade that gives its analyzer new state fails here, not in a call."""
    stock = SileroVADAnalyzer(sample_rate=RATE, params=VADParams())
    shared = SharedSessionSileroVAD(sample_rate=RATE, params=VADParams())
    assert set(vars(shared)) == set(vars(stock))
    assert type(shared._model) is type(stock._model)


def test_calls_share_one_session_and_keep_their_own_state() -> None:
    first, second = call_model(), call_model()
    assert first.session is second.session
    assert first._state is not second._state
    assert first._context is not second._context


def test_speech_states_match_pipecats_analyzer_for_the_same_audio() -> None:
    pcm = caller_audio("I would like to book a table for two tomorrow evening.")

    async def both() -> tuple[list[VADState], list[VADState]]:
        stock = await states(SileroVADAnalyzer(params=VADParams()), pcm)
        shared = await states(SharedSessionSileroVAD(params=VADParams()), pcm)
        return stock, shared

    stock, shared = asyncio.run(both())
    assert shared == stock
    assert VADState.SPEAKING in shared  # the audio is speech, so the comparison means something
    assert shared[-1] == VADState.QUIET


def test_interleaved_calls_do_not_disturb_each_other() -> None:
    """Two calls fed frame by frame in turn on one session answer as each would alone."""
    speech = caller_audio("Please call me back this afternoon.")
    quiet = audioop.ulaw2lin(silence(len(speech) / 2 / RATE), 2)

    async def run() -> tuple[list[VADState], list[VADState], list[VADState]]:
        alone = await states(SharedSessionSileroVAD(params=VADParams()), speech)
        talking = SharedSessionSileroVAD(params=VADParams())
        silent = SharedSessionSileroVAD(params=VADParams())
        talking.set_sample_rate(RATE)
        silent.set_sample_rate(RATE)
        heard, unheard = [], []
        for start in range(0, len(speech), FRAME):
            heard.append(await talking.analyze_audio(speech[start : start + FRAME]))
            unheard.append(await silent.analyze_audio(quiet[start : start + FRAME]))
        return alone, heard, unheard

    alone, heard, unheard = asyncio.run(run())
    assert heard == alone
    assert set(unheard) == {VADState.QUIET}
