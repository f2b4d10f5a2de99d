"""The browser session's framing (app/voice/browser.py) as a pipecat serializer: raw 16-bit
PCM both ways, JSON text for the rest, bounded like the carrier's stream (a message over
`max_message_bytes` ends the call; 20 that are not the protocol end it too)."""

from __future__ import annotations

import orjson
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
    OutputAudioRawFrame,
    OutputTransportMessageUrgentFrame,
)
from pipecat.serializers.base_serializer import FrameSerializer

from app.voice.browser import SAMPLE_RATE
from app.voice.frames import TRANSCRIPT_MESSAGE, StreamFault, StreamStopped
from app.voice.protocol import MAX_MALFORMED


class BrowserSerializer(FrameSerializer):
    """Raw PCM both ways, JSON text for the rest; bounded like the carrier's stream."""

    def __init__(self, *, max_message_bytes: int) -> None:
        super().__init__()
        self.max_message_bytes = max_message_bytes
        self.malformed = 0
        self.faulted = False

    async def serialize(self, frame: Frame) -> str | bytes | None:
        if isinstance(frame, OutputAudioRawFrame):
            return bytes(frame.audio)
        if isinstance(frame, InterruptionFrame):
            return orjson.dumps({"event": "clear"}).decode()
        # Transcript segments only; the carrier's marks mean nothing to a browser.
        if (
            isinstance(frame, OutputTransportMessageUrgentFrame)
            and isinstance(frame.message, dict)
            and frame.message.get("event") == TRANSCRIPT_MESSAGE
        ):
            return orjson.dumps(frame.message).decode()
        return None

    def _fault(self, reason: str) -> Frame | None:
        if self.faulted:
            return None
        self.faulted = True
        return StreamFault(reason=reason)

    def _malformed(self) -> Frame | None:
        self.malformed += 1
        if self.malformed >= MAX_MALFORMED:
            return self._fault("malformed_stream")
        return None

    async def deserialize(self, data: str | bytes) -> Frame | None:
        if self.faulted:
            return None
        if len(data) > self.max_message_bytes:
            return self._fault("oversized_message")
        if isinstance(data, bytes):
            if len(data) % 2:  # not whole 16-bit samples
                return self._malformed()
            return InputAudioRawFrame(audio=data, sample_rate=SAMPLE_RATE, num_channels=1)
        try:
            message = orjson.loads(data)
        except orjson.JSONDecodeError:
            return self._malformed()
        if isinstance(message, dict) and message.get("event") == "stop":
            return StreamStopped()
        return self._malformed()
