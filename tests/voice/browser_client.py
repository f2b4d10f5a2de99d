"""A browser's side of a browser session (app/voice/browser.py), as the page speaks it: the
`start` message with the token, the microphone as 16-bit PCM at 16 kHz in 20 ms messages,
and what comes back kept with its arrival time (binary audio, JSON events)."""

from __future__ import annotations

import asyncio
import audioop
import json
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

RATE = 16000
FRAME_BYTES = 640  # 20 ms of 16-bit PCM at 16 kHz
FRAME_SECONDS = 0.02


@lru_cache(maxsize=16)
def spoken_pcm(text: str) -> bytes:
    """`text` said by the offline voice, as 16-bit PCM at 16 kHz."""
    from app.voice.speech import synthesize

    pcm, rate = synthesize(text)
    converted, _ = audioop.ratecv(pcm, 2, 1, rate, RATE, None)
    return converted


def silent_pcm(seconds: float) -> bytes:
    return b"\x00\x00" * int(RATE * seconds)


@dataclass
class BrowserClient:
    url: str
    audio: bytearray = field(default_factory=bytearray)
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    close_code: int | None = None
    websocket: ClientConnection | None = None
    _reader: asyncio.Task[None] | None = None

    async def open(self, token: str | None) -> None:
        self.websocket = await connect(self.url)
        self._reader = asyncio.create_task(self._read())
        await self.send({"event": "start"} if token is None else {"event": "start", "token": token})

    async def send(self, message: dict[str, Any]) -> None:
        assert self.websocket is not None
        await self.websocket.send(json.dumps(message))

    async def play(self, pcm: bytes, *, speed: float = 2.0) -> None:
        """Microphone audio in 20 ms messages, paced at `speed` times real time."""
        assert self.websocket is not None
        started = time.monotonic()
        for index, offset in enumerate(range(0, len(pcm), FRAME_BYTES)):
            await self.websocket.send(pcm[offset : offset + FRAME_BYTES])
            due = started + (index + 1) * FRAME_SECONDS / speed
            await asyncio.sleep(max(0.0, due - time.monotonic()))

    async def say(self, text: str) -> None:
        await self.play(spoken_pcm(text) + silent_pcm(1.0))

    async def hang_up(self) -> None:
        await self.send({"event": "stop"})
        await self.close()

    async def close(self) -> None:
        if self.websocket is not None:
            await self.websocket.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    async def _read(self) -> None:
        assert self.websocket is not None
        try:
            async for raw in self.websocket:
                if isinstance(raw, bytes):
                    self.audio.extend(raw)
                else:
                    self.events.append((time.monotonic(), json.loads(raw)))
        except ConnectionClosed:
            pass
        finally:
            self.close_code = self.websocket.close_code

    # What came back

    def of(self, name: str) -> list[dict[str, Any]]:
        return [event for _, event in self.events if event.get("event") == name]

    def said(self, speaker: str) -> list[str]:
        return [e["text"] for e in self.of("transcript") if e["speaker"] == speaker]

    @property
    def closed(self) -> bool:
        return self._reader is not None and self._reader.done()

    async def wait_until(self, check: Any, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"not reached in {seconds} s; events {[e for _, e in self.events]}, "
                    f"{len(self.audio)} bytes of audio, closed: {self.close_code}"
                )
            await asyncio.sleep(0.02)
