"""Silero voice activity detection: one ONNX session per process, one run for all calls' windows.

pipecat's `SileroVADAnalyzer` builds an ONNX `InferenceSession` for every call and hands every
20 ms frame to a thread of its own. Profiled at five calls on one process, building the session
cost about 7 % of the process's CPU and the thread hand-offs about 4 %. Here the session (the
model's weights and its optimized graph) is built once per process and shared, each call
keeping its own recurrent state and audio context, and the analysis runs on the call's event
loop.

A run of the session has a large fixed cost (measured: 0.23 ms for one window, 0.31 ms for
five, 0.98 ms for twenty), and the calls of a process all want a run every 32 ms. So a
window is not scored on its own: the call hands it (with its state and context) to its event
loop's `WindowBatch` and waits; at the loop's next turn the batch scores every window handed
in meanwhile in one run (input [calls, context + window], state [2, calls, 128]) and gives
each call its probability and its new state. Rows of a batch do not mix, so each call's
figures are those it would get alone, to the bit; nothing waits for a timer, so an idle
process scores a lone window at once and a busy one gathers more per run.

`tests/voice/test_vad.py` holds this analyzer to pipecat's own: the same attributes after
construction and the same speech states (and model state) for the same audio, alone or
batched with other calls, so an upgrade of pipecat that changes either fails there.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import weakref
from importlib import resources

import numpy as np
import structlog
from pipecat.audio.vad.silero import SileroOnnxModel, SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams, VADState

MODEL_PACKAGE = "pipecat.audio.vad.data"
MODEL_FILE = "silero_vad.onnx"
# Samples of the previous window the model sees before each window (Silero v5).
CONTEXT_SAMPLES = {8000: 32, 16000: 64}

logger = structlog.get_logger("switchboard.voice")

Scored = tuple[np.ndarray, np.ndarray]  # a window's probability (shape (1,)) and new state


@functools.cache
def _process_model() -> SileroOnnxModel:
    """The process's one Silero model; calls take copies that share its session."""
    model_path = str(resources.files(MODEL_PACKAGE).joinpath(MODEL_FILE))
    return SileroOnnxModel(model_path)  # type: ignore[no-untyped-call]


def call_model() -> SileroOnnxModel:
    """A model for one call: the shared ONNX session with a state and context of its own."""
    model = copy.copy(_process_model())
    model.reset_states()  # type: ignore[no-untyped-call]  # new arrays: no state shared
    return model


class WindowBatch:
    """The windows an event loop's calls handed in since its last run of the shared session."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # By sample rate (one `sr` per run): each window's row, state and waiting call.
        self._pending: dict[int, list[tuple[np.ndarray, np.ndarray, asyncio.Future[Scored]]]] = {}
        self._scheduled = False
        self.runs = 0
        self.windows = 0
        self.largest = 0

    def score(self, row: np.ndarray, state: np.ndarray, sample_rate: int) -> asyncio.Future[Scored]:
        """`row` (context + window, shape (1, n)) and the call's `state` (2, 1, 128), scored at
        the loop's next turn with whatever else was handed in by then."""
        waiting: asyncio.Future[Scored] = self._loop.create_future()
        self._pending.setdefault(sample_rate, []).append((row, state, waiting))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._run)
        return waiting

    def _run(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, {}
        session = _process_model().session
        for sample_rate, entries in pending.items():
            entries = [entry for entry in entries if not entry[2].done()]  # callers gone
            if not entries:
                continue
            try:
                probabilities, states = session.run(
                    None,
                    {
                        "input": np.concatenate([entry[0] for entry in entries]),
                        "state": np.concatenate([entry[1] for entry in entries], axis=1),
                        "sr": np.array(sample_rate, dtype="int64"),
                    },
                )
            except Exception as exc:  # each call falls back to scoring its window alone
                for _, _, waiting in entries:
                    waiting.set_exception(exc)
                continue
            self.runs += 1
            self.windows += len(entries)
            self.largest = max(self.largest, len(entries))
            for index, (_, _, waiting) in enumerate(entries):
                state = np.ascontiguousarray(states[:, index : index + 1])
                waiting.set_result((probabilities[index], state))


_BATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WindowBatch] = (
    weakref.WeakKeyDictionary()
)


def loop_batch() -> WindowBatch:
    """The running event loop's batch (a process may run calls on several loops)."""
    loop = asyncio.get_running_loop()
    batch = _BATCHES.get(loop)
    if batch is None:
        batch = _BATCHES[loop] = WindowBatch(loop)
    return batch


class SharedSessionSileroVAD(SileroVADAnalyzer):
    """Silero VAD for one call, on the process's shared ONNX session, batched with the other
    calls on its event loop."""

    def __init__(self, *, sample_rate: int | None = None, params: VADParams | None = None):
        # SileroVADAnalyzer.__init__ would build a session; the base sets everything else.
        VADAnalyzer.__init__(self, sample_rate=sample_rate, params=params)
        self._model = call_model()
        self._windows_since_reset = 0
        self._low_confidence_windows = 0
        self._scored: np.ndarray | None = None

    async def analyze_audio(self, buffer: bytes) -> VADState:
        window_bytes = self._vad_frames_num_bytes
        buffered = len(self._vad_buffer)
        if (buffered + len(buffer)) // window_bytes == 1:  # a 20 ms frame completes one window
            window = (self._vad_buffer + buffer[: window_bytes - buffered])[:window_bytes]
            self._scored = await self._score(window)
        # No window: nothing to score. Several (frames longer than a window): each one's input
        # depends on the state machine after the previous one, so pipecat's loop scores them.
        return self._run_analyzer(buffer)

    async def _score(self, window: bytes) -> np.ndarray | None:
        """The window's probability from the loop's batch; the model's state and context move
        on as `SileroOnnxModel.__call__` moves them. None: score it alone."""
        model, sample_rate = self._model, self.sample_rate
        context_samples = CONTEXT_SAMPLES[sample_rate]
        if not model._last_batch_size or model._last_sr != sample_rate:
            model.reset_states()  # type: ignore[no-untyped-call]
        if not model._context.shape[1]:
            model._context = np.zeros((1, context_samples), dtype="float32")
        audio = np.frombuffer(window, np.int16).astype(np.float32) / 32768.0
        row = np.concatenate((model._context, audio[None, :]), axis=1)
        try:
            probability, state = await loop_batch().score(row, model._state, sample_rate)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("batched VAD run failed", error=type(exc).__name__)
            return None
        model._state = state
        model._context = row[..., -context_samples:]
        model._last_sr = sample_rate
        model._last_batch_size = 1
        return probability

    def voice_confidence(self, buffer: bytes) -> float:
        scored, self._scored = self._scored, None
        if scored is None:
            return super().voice_confidence(buffer)
        self._maybe_reset_model(scored.item())
        return scored  # type: ignore[return-value]  # pipecat's returns the (1,) array too
