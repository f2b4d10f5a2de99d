"""Silero voice activity detection with one ONNX session per process.

pipecat's `SileroVADAnalyzer` builds an ONNX `InferenceSession` for every call and hands every
20 ms frame to a thread of its own. Profiled at five calls on one process, building the session
cost about 7 % of the process's CPU and the thread hand-offs about 4 %, while one inference of
a 32 ms window takes about a tenth of a millisecond. Here the session (the model's weights and
its optimized graph) is built once per process and shared, each call keeping its own recurrent
state and audio context, and the analysis runs on the call's event loop. onnxruntime allows
concurrent `run` calls on one session, so voice processes running calls in several threads
stay safe.

`tests/voice/test_vad.py` holds this analyzer to pipecat's own: the same attributes after
construction and the same speech states for the same audio, so an upgrade of pipecat that
changes either fails there.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources

from pipecat.audio.vad.silero import SileroOnnxModel, SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams, VADState

MODEL_PACKAGE = "pipecat.audio.vad.data"
MODEL_FILE = "silero_vad.onnx"


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


class SharedSessionSileroVAD(SileroVADAnalyzer):
    """Silero VAD for one call, on the process's shared ONNX session."""

    def __init__(self, *, sample_rate: int | None = None, params: VADParams | None = None):
        # SileroVADAnalyzer.__init__ would build a session; the base sets everything else.
        VADAnalyzer.__init__(self, sample_rate=sample_rate, params=params)
        self._model = call_model()
        self._windows_since_reset = 0
        self._low_confidence_windows = 0

    async def analyze_audio(self, buffer: bytes) -> VADState:
        return self._run_analyzer(buffer)
