"""The shared-session Silero analyzer answers as pipecat's own does, call by call."""

from __future__ import annotations

import asyncio
import audioop
from typing import Any

import numpy as np
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams, VADState

from app.voice.vad import SharedSessionSileroVAD, WindowBatch, call_model, loop_batch
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
    # Ours adds the batched probability waiting for pipecat's loop to ask for it.
    assert set(vars(shared)) == set(vars(stock)) | {"_scored"}
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


def test_calls_batched_in_one_run_answer_as_each_alone() -> None:
    """Windows of several calls scored in one session run give each call the speech states
    and the model state it gets alone (on pipecat's own analyzer), to the bit."""
    lines = [
        "I would like to book a table for two tomorrow evening.",
        "Please call me back this afternoon.",
        "Can you tell me where my order is?",
    ]
    audios = [caller_audio(line) for line in lines]
    audios.append(audioop.ulaw2lin(silence(len(audios[0]) / 2 / RATE), 2))
    frames = max(len(pcm) for pcm in audios)
    audios = [pcm.ljust(frames, b"\0") for pcm in audios]

    async def alone(pcm: bytes) -> tuple[list[VADState], np.ndarray]:
        stock = SileroVADAnalyzer(params=VADParams())
        return await states(stock, pcm), stock._model._state

    async def batched() -> tuple[list[list[VADState]], list[np.ndarray], WindowBatch]:
        analyzers = [SharedSessionSileroVAD(params=VADParams()) for _ in audios]
        for analyzer in analyzers:
            analyzer.set_sample_rate(RATE)
        heard: list[list[VADState]] = [[] for _ in analyzers]
        for start in range(0, frames, FRAME):
            found = await asyncio.gather(
                *(
                    analyzer.analyze_audio(pcm[start : start + FRAME])
                    for analyzer, pcm in zip(analyzers, audios, strict=True)
                )
            )
            for sequence, state in zip(heard, found, strict=True):
                sequence.append(state)
        return heard, [analyzer._model._state for analyzer in analyzers], loop_batch()

    expected = [asyncio.run(alone(pcm)) for pcm in audios]
    heard, model_states, batch = asyncio.run(batched())
    assert batch.largest == len(audios)  # the windows did share runs
    assert batch.runs < batch.windows
    for (alone_states, alone_model), got, model_state in zip(
        expected, heard, model_states, strict=True
    ):
        assert got == alone_states
        assert np.array_equal(model_state, alone_model)
    assert all(VADState.SPEAKING in sequence for sequence in heard[:3])
    assert set(heard[3]) == {VADState.QUIET}


def test_a_window_the_batch_cannot_score_is_scored_alone(monkeypatch: Any) -> None:
    pcm = caller_audio("Please call me back this afternoon.")

    def broken(self: WindowBatch, *_args: Any) -> Any:
        raise RuntimeError("no run")

    async def run() -> tuple[list[VADState], list[VADState]]:
        stock = await states(SileroVADAnalyzer(params=VADParams()), pcm)
        monkeypatch.setattr(WindowBatch, "score", broken)
        shared = await states(SharedSessionSileroVAD(params=VADParams()), pcm)
        return stock, shared

    stock, shared = asyncio.run(run())
    assert shared == stock
    assert VADState.SPEAKING in shared
