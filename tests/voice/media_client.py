"""The carrier's side of a Media Stream: a websocket client that speaks as Twilio does.

It sends `connected`, then `start` (streamSid, callSid, `customParameters.token`), plays
caller audio as `media` messages (base64 μ-law 8 kHz, 20 ms each), and keeps what comes
back: `media` (the agent's audio), `mark` and `clear`, each with its arrival time. When the
fake carrier is told to hang up or transfer the call, `carrier_ended()` sends `stop` and
closes, as the carrier does.
"""

from __future__ import annotations

import asyncio
import audioop
import base64
import json
import secrets
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

FRAME_BYTES = 160  # 20 ms of μ-law at 8 kHz
FRAME_SECONDS = 0.02


@lru_cache(maxsize=32)
def spoken(text: str) -> bytes:
    """`text` said by the offline voice, as μ-law 8 kHz (the caller's side of the line)."""
    from app.voice.speech import synthesize

    pcm, rate = synthesize(text)
    converted, _ = audioop.ratecv(pcm, 2, 1, rate, 8000, None)
    return audioop.lin2ulaw(converted, 2)


def silence(seconds: float) -> bytes:
    return b"\xff" * int(8000 * seconds)  # μ-law silence


def ulaw_rms(ulaw: bytes) -> float:
    return float(audioop.rms(audioop.ulaw2lin(ulaw, 2), 2)) if ulaw else 0.0


@dataclass
class MediaStreamClient:
    url: str
    call_sid: str = field(default_factory=lambda: "CA" + secrets.token_hex(16))
    stream_sid: str = field(default_factory=lambda: "MZ" + secrets.token_hex(16))
    messages: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    close_code: int | None = None
    websocket: ClientConnection | None = None
    _reader: asyncio.Task[None] | None = None
    _sequence: int = 0
    _timestamp_ms: int = 0

    async def open(self, token: str | None, headers: dict[str, str] | None = None) -> None:
        self.websocket = await connect(self.url, additional_headers=headers or {})
        self._reader = asyncio.create_task(self._read())
        await self.send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        parameters = {} if token is None else {"token": token}
        await self.send(
            {
                "event": "start",
                "start": {
                    "accountSid": "AC" + "0" * 32,
                    "streamSid": self.stream_sid,
                    "callSid": self.call_sid,
                    "tracks": ["inbound"],
                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                    "customParameters": parameters,
                },
                "streamSid": self.stream_sid,
            }
        )

    async def send(self, message: dict[str, Any]) -> None:
        assert self.websocket is not None
        self._sequence += 1
        await self.websocket.send(json.dumps({**message, "sequenceNumber": str(self._sequence)}))

    async def send_raw(self, data: str) -> None:
        assert self.websocket is not None
        await self.websocket.send(data)

    async def play(self, ulaw: bytes, *, speed: float = 1.0) -> None:
        """Caller audio in 20 ms media messages, paced at `speed` times real time."""
        started = time.monotonic()
        for index, offset in enumerate(range(0, len(ulaw), FRAME_BYTES)):
            chunk = ulaw[offset : offset + FRAME_BYTES]
            self._timestamp_ms += 20
            await self.send(
                {
                    "event": "media",
                    "streamSid": self.stream_sid,
                    "media": {
                        "track": "inbound",
                        "chunk": str(index + 1),
                        "timestamp": str(self._timestamp_ms),
                        "payload": base64.b64encode(chunk).decode(),
                    },
                }
            )
            due = started + (index + 1) * FRAME_SECONDS / speed
            await asyncio.sleep(max(0.0, due - time.monotonic()))

    async def say(self, text: str, *, speed: float = 2.0) -> None:
        await self.play(spoken(text) + silence(1.0), speed=speed)

    async def press(self, digits: str) -> None:
        for digit in digits:
            await self.send(
                {"event": "dtmf", "streamSid": self.stream_sid, "dtmf": {"digit": digit}}
            )

    async def stop(self) -> None:
        await self.send(
            {"event": "stop", "streamSid": self.stream_sid, "stop": {"callSid": self.call_sid}}
        )
        await self.close()

    async def close(self) -> None:
        if self.websocket is not None:
            await self.websocket.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    def carrier_ended(self, loop: asyncio.AbstractEventLoop) -> Any:
        """A fake-carrier update hook: this call's hang-up or transfer stops its stream."""

        def hook(sid: str, _values: dict[str, str]) -> None:
            if sid == self.call_sid:
                asyncio.run_coroutine_threadsafe(self.stop(), loop)

        return hook

    async def _read(self) -> None:
        assert self.websocket is not None
        try:
            async for raw in self.websocket:
                message = json.loads(raw)
                self.messages.append((time.monotonic(), message))
                if message.get("event") == "mark":  # played at once: echo it back
                    await self.send(message)
        except ConnectionClosed:
            pass
        finally:
            self.close_code = self.websocket.close_code

    # What came back

    def events(self, name: str) -> list[dict[str, Any]]:
        return [m for _, m in self.messages if m.get("event") == name]

    def audio(self) -> bytes:
        return b"".join(base64.b64decode(m["media"]["payload"]) for m in self.events("media"))

    @property
    def closed(self) -> bool:
        return self._reader is not None and self._reader.done()

    async def wait_until(self, check: Any, seconds: float = 20.0) -> None:
        deadline = time.monotonic() + seconds
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"not reached in {seconds} s; got {self.summary()}")
            await asyncio.sleep(0.02)

    async def wait_for_marks(self, count: int, seconds: float = 20.0) -> None:
        await self.wait_until(lambda: len(self.events("mark")) >= count or self.closed, seconds)

    def summary(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, message in self.messages:
            counts[message.get("event", "?")] = counts.get(message.get("event", "?"), 0) + 1
        return counts
