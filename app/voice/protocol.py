"""The carrier's Media Streams protocol on pipecat's Twilio serializer.

pipecat's `TwilioFrameSerializer` turns `media` (base64 μ-law 8 kHz) into audio frames,
`dtmf` into keypad frames, and audio, interruptions (`clear`) and messages (`mark`) back
into the carrier's JSON. This subclass bounds what a stream may send: a message over
`max_message_bytes` ends the call; text that is not the protocol (bad JSON, bad base64, a
message that is not an object) is skipped, and after `MAX_MALFORMED` such messages the call
ends. It also reads `stop` and `mark`, and never hangs up by itself: the call's line does
that through the carrier's REST API (app/voice/line.py).

`media` is most of what a stream sends (50 messages a second per call): each is parsed once
here and its μ-law becomes the frame as the stock serializer makes it, which would parse the
JSON a second time.
"""

from __future__ import annotations

import base64
import binascii
import json

import orjson
import structlog
from pipecat.audio.utils import ulaw_to_pcm
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    OutputTransportMessageUrgentFrame,
)
from pipecat.serializers.twilio import TwilioFrameSerializer

from app.voice.frames import TRANSCRIPT_MESSAGE, CarrierMark, StreamFault, StreamStopped

logger = structlog.get_logger("switchboard.voice")

MAX_MALFORMED = 20
SAMPLE_RATE = 8000


class MediaStreamSerializer(TwilioFrameSerializer):
    def __init__(self, stream_sid: str, *, max_message_bytes: int) -> None:
        super().__init__(
            stream_sid,
            params=TwilioFrameSerializer.InputParams(
                auto_hang_up=False, twilio_sample_rate=SAMPLE_RATE, sample_rate=SAMPLE_RATE
            ),
        )
        self.stream_sid = stream_sid
        self.max_message_bytes = max_message_bytes
        self.malformed = 0
        self.faulted = False

    async def serialize(self, frame: Frame) -> str | bytes | None:
        if isinstance(frame, OutputTransportMessageUrgentFrame) and isinstance(frame.message, dict):
            if frame.message.get("event") == TRANSCRIPT_MESSAGE:
                return None  # not the carrier's protocol; the call log keeps the transcript
            # Messages of the session (marks) belong to this stream.
            return json.dumps({**frame.message, "streamSid": self.stream_sid})
        return await super().serialize(frame)

    def _fault(self, reason: str) -> Frame | None:
        if self.faulted:
            return None
        self.faulted = True
        return StreamFault(reason=reason)

    async def _audio(self, payload: object) -> Frame | None:
        """The caller's audio of one `media` message, as the stock serializer makes it."""
        if not payload:
            return None
        if not isinstance(payload, str):
            raise TypeError("payload is not text")
        pcm = await ulaw_to_pcm(
            base64.b64decode(payload),
            self._twilio_sample_rate,
            self._sample_rate,
            self._input_resampler,
        )
        if not pcm:
            return None
        return InputAudioRawFrame(audio=pcm, num_channels=1, sample_rate=self._sample_rate)

    async def deserialize(self, data: str | bytes) -> Frame | None:
        if self.faulted:
            return None
        if len(data) > self.max_message_bytes:
            return self._fault("oversized_message")
        try:
            message = orjson.loads(data)
            if not isinstance(message, dict):
                raise ValueError("not an object")
            event = message.get("event")
            if event == "media":
                media = message.get("media")
                if not isinstance(media, dict):
                    raise ValueError("media without a payload object")
                return await self._audio(media.get("payload"))
            if event == "stop":
                return StreamStopped()
            if event == "mark":
                mark = message.get("mark")
                name = mark.get("name") if isinstance(mark, dict) else None
                return CarrierMark(name=str(name or ""))
            if event == "dtmf" and not isinstance(message.get("dtmf"), dict):
                raise ValueError("dtmf without a digit object")
            return await super().deserialize(data)
        except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
            self.malformed += 1
            logger.info("malformed media stream message", error=type(exc).__name__)
            if self.malformed >= MAX_MALFORMED:
                return self._fault("malformed_stream")
            return None
