"""The carrier's messages become the frames pipecat's own Twilio serializer makes."""

from __future__ import annotations

import asyncio
import base64
import json
from types import SimpleNamespace

from pipecat.frames.frames import Frame, InputAudioRawFrame, InputDTMFFrame
from pipecat.serializers.twilio import TwilioFrameSerializer

from app.voice.frames import StreamFault
from app.voice.protocol import MAX_MALFORMED, SAMPLE_RATE, MediaStreamSerializer
from tests.voice.media_client import spoken

STREAM = "MZ0123"


async def _set_up(serializer: TwilioFrameSerializer) -> None:
    # The serializer reads the pipeline's input rate only (its own params set it anyway).
    await serializer.setup(SimpleNamespace(audio_in_sample_rate=SAMPLE_RATE))  # type: ignore[arg-type]


def _media(ulaw: bytes) -> str:
    payload = base64.b64encode(ulaw).decode()
    return json.dumps({"event": "media", "streamSid": STREAM, "media": {"payload": payload}})


def test_media_and_keypad_frames_are_the_stock_serializers() -> None:
    ulaw = spoken("One moment please.")
    messages = [_media(ulaw[start : start + 160]) for start in range(0, len(ulaw), 160)]
    messages.append(json.dumps({"event": "dtmf", "dtmf": {"digit": "5"}}))

    async def both() -> tuple[list[Frame | None], list[Frame | None]]:
        stock = TwilioFrameSerializer(
            STREAM,
            params=TwilioFrameSerializer.InputParams(
                auto_hang_up=False, twilio_sample_rate=SAMPLE_RATE, sample_rate=SAMPLE_RATE
            ),
        )
        ours = MediaStreamSerializer(STREAM, max_message_bytes=65536)
        await _set_up(stock)
        await _set_up(ours)
        return (
            [await stock.deserialize(message) for message in messages],
            [await ours.deserialize(message) for message in messages],
        )

    stock, ours = asyncio.run(both())
    assert len(ours) == len(stock) > 10
    for mine, theirs in zip(ours[:-1], stock[:-1], strict=True):
        assert isinstance(mine, InputAudioRawFrame)
        assert isinstance(theirs, InputAudioRawFrame)
        assert (mine.audio, mine.sample_rate, mine.num_channels) == (
            theirs.audio,
            theirs.sample_rate,
            theirs.num_channels,
        )
    assert isinstance(ours[-1], InputDTMFFrame)
    assert isinstance(stock[-1], InputDTMFFrame)
    assert ours[-1].button == stock[-1].button


def test_media_that_is_not_the_protocol_is_skipped_then_ends_the_call() -> None:
    bad = [
        json.dumps({"event": "media", "media": {"payload": "not base64!"}}),
        json.dumps({"event": "media", "media": {"payload": 12}}),
        json.dumps({"event": "media", "media": "x"}),
        "{not json",
    ]

    async def run() -> list[Frame | None]:
        serializer = MediaStreamSerializer(STREAM, max_message_bytes=65536)
        await _set_up(serializer)
        empty = await serializer.deserialize(json.dumps({"event": "media", "media": {}}))
        assert empty is None
        assert serializer.malformed == 0  # no payload is no audio, not a fault
        return [await serializer.deserialize(bad[i % len(bad)]) for i in range(MAX_MALFORMED)]

    frames = asyncio.run(run())
    assert frames[:-1] == [None] * (MAX_MALFORMED - 1)
    assert isinstance(frames[-1], StreamFault)
    assert frames[-1].reason == "malformed_stream"
