"""Local fakes of the speech providers, on one real socket, speaking their streaming formats.

- Deepgram live transcription, `wss://…/v1/listen?model=…&encoding=linear16&sample_rate=…`
  (`Authorization: Token <key>`): binary audio in; `KeepAlive`, `Finalize`, `CloseStream`
  text messages; `Results` messages out (`channel.alternatives[0].transcript`, `is_final`,
  `speech_final`, `from_finalize`), `Metadata` on close. The fake "hears" a line of its
  script (per API key) once it received speech (loud enough audio) and a `Finalize`.
- ElevenLabs multi-context TTS, `/v1/text-to-speech/{voice}/multi-stream-input`
  (`xi-api-key`): `{"text", "context_id", "voice_settings"?}`, `{"flush"}`,
  `{"close_context"}` in; `{"audio": base64 PCM, "alignment", "contextId"}` and
  `{"isFinal": true, "contextId"}` out.
- Cartesia TTS websocket, `/tts/websocket` (`X-API-Key`, `Cartesia-Version`):
  `{"transcript", "continue", "context_id", "voice", "output_format", …}` and `{"cancel"}`
  in; `{"type": "chunk", "data"}`, `{"type": "timestamps"}`, `{"type": "done"}` out.

The voices answer with a tone (audible, non-silent PCM) of a length proportional to the
text. A key in `rejected_keys` is refused at the handshake (401); `drops` makes the next
connections of a provider close right after opening.
"""

from __future__ import annotations

import base64
import json
import math
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.calls.fake_carrier import ServedApp

SPEECH_RMS = 500  # 16-bit PCM louder than this counts as speech
MS_PER_CHARACTER = 12


def tone(sample_rate: int, milliseconds: int, frequency: float = 440.0) -> bytes:
    count = sample_rate * milliseconds // 1000
    return b"".join(
        struct.pack("<h", int(8000 * math.sin(2 * math.pi * frequency * i / sample_rate)))
        for i in range(count)
    )


def rms(pcm: bytes) -> float:
    samples = struct.unpack(f"<{len(pcm) // 2}h", pcm[: len(pcm) // 2 * 2])
    return math.sqrt(sum(s * s for s in samples) / len(samples)) if samples else 0.0


@dataclass
class FakeSpeech:
    scripts: dict[str, list[str]] = field(default_factory=dict)
    rejected_keys: set[str] = field(default_factory=set)
    drops: dict[str, int] = field(default_factory=dict)
    connections: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    texts: list[tuple[str, str]] = field(default_factory=list)  # (provider, text) spoken
    heard: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.scripts.clear()
            self.rejected_keys.clear()
            self.drops.clear()
            self.connections.clear()
            self.texts.clear()
            self.heard.clear()

    async def _admit(self, websocket: WebSocket, provider: str, key: str | None) -> bool:
        with self.lock:
            self.connections.append((provider, websocket.url.path, dict(websocket.query_params)))
            dropping = self.drops.get(provider, 0)
            if dropping:
                self.drops[provider] = dropping - 1
        if key is None or key in self.rejected_keys:
            await websocket.close(code=1008)  # refused before the upgrade: the client sees 403
            return False
        await websocket.accept()
        if dropping:
            await websocket.close(code=1011)
            return False
        return True

    # Deepgram

    async def deepgram(self, websocket: WebSocket) -> None:
        authorization = websocket.headers.get("authorization", "")
        key = authorization.removeprefix("Token ") if authorization.startswith("Token ") else None
        if not await self._admit(websocket, "deepgram", key):
            return
        assert key is not None
        sample_rate = int(websocket.query_params.get("sample_rate", "16000"))
        received = 0.0
        spoke = False
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("bytes"):
                    audio = message["bytes"]
                    received += len(audio) / 2 / sample_rate
                    spoke = spoke or rms(audio) > SPEECH_RMS
                    continue
                body = json.loads(message.get("text") or "{}")
                kind = body.get("type")
                if kind == "CloseStream":
                    await websocket.send_text(json.dumps(_metadata(received)))
                    await websocket.close()
                    return
                if kind == "Finalize":
                    with self.lock:
                        script = self.scripts.get(key, [])
                        text = script.pop(0) if spoke and script else ""
                        if text:
                            self.heard.append(text)
                    spoke = False
                    await websocket.send_text(json.dumps(_results(text, received)))
        except WebSocketDisconnect:
            return

    # ElevenLabs

    async def elevenlabs(self, websocket: WebSocket) -> None:
        if not await self._admit(websocket, "elevenlabs", websocket.headers.get("xi-api-key")):
            return
        output = websocket.query_params.get("output_format", "pcm_16000")
        sample_rate = int(output.split("_")[1])
        try:
            while True:
                body = json.loads(await websocket.receive_text())
                context = body.get("context_id")
                text = body.get("text") or ""
                if text.strip():
                    with self.lock:
                        self.texts.append(("elevenlabs", text))
                    audio = tone(sample_rate, MS_PER_CHARACTER * len(text))
                    await websocket.send_text(
                        json.dumps(
                            {
                                "audio": base64.b64encode(audio).decode(),
                                "alignment": None,
                                "contextId": context,
                            }
                        )
                    )
                if body.get("close_context") or body.get("flush"):
                    await websocket.send_text(json.dumps({"isFinal": True, "contextId": context}))
        except WebSocketDisconnect:
            return

    # Cartesia

    async def cartesia(self, websocket: WebSocket) -> None:
        if not await self._admit(websocket, "cartesia", websocket.headers.get("x-api-key")):
            return
        try:
            while True:
                body = json.loads(await websocket.receive_text())
                context = body.get("context_id")
                if body.get("cancel"):
                    continue
                text = body.get("transcript") or ""
                sample_rate = int(body.get("output_format", {}).get("sample_rate", 16000))
                if text.strip():
                    with self.lock:
                        self.texts.append(("cartesia", text))
                    audio = tone(sample_rate, MS_PER_CHARACTER * len(text))
                    await websocket.send_text(
                        json.dumps(
                            {
                                "type": "chunk",
                                "context_id": context,
                                "data": base64.b64encode(audio).decode(),
                                "done": False,
                                "status_code": 206,
                            }
                        )
                    )
                if not body.get("continue", True):
                    await websocket.send_text(
                        json.dumps(
                            {
                                "type": "done",
                                "context_id": context,
                                "done": True,
                                "status_code": 206,
                            }
                        )
                    )
        except WebSocketDisconnect:
            return

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                WebSocketRoute("/v1/listen", self.deepgram),
                WebSocketRoute("/v1/text-to-speech/{voice}/multi-stream-input", self.elevenlabs),
                WebSocketRoute("/tts/websocket", self.cartesia),
            ]
        )


def _metadata(duration: float) -> dict[str, Any]:
    return {
        "type": "Metadata",
        "transaction_key": "deprecated",
        "request_id": "fake-request",
        "sha256": "0" * 64,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
        "duration": duration,
        "channels": 1,
        "models": ["fake-model"],
        "model_info": {"fake-model": {"name": "nova-3", "version": "1", "arch": "fake"}},
    }


def _results(text: str, received: float) -> dict[str, Any]:
    words = [
        {"word": w.lower().strip(".,?!"), "start": 0.0, "end": 0.1, "confidence": 0.99}
        for w in text.split()
    ]
    return {
        "type": "Results",
        "channel_index": [0, 1],
        "duration": received,
        "start": 0.0,
        "is_final": True,
        "speech_final": True,
        "from_finalize": True,
        "channel": {"alternatives": [{"transcript": text, "confidence": 0.99, "words": words}]},
        "metadata": {
            "request_id": "fake-request",
            "model_info": {"name": "nova-3", "version": "1", "arch": "fake"},
            "model_uuid": "00000000-0000-0000-0000-000000000000",
        },
    }


@contextmanager
def running_speech() -> Iterator[tuple[FakeSpeech, str]]:
    fake = FakeSpeech()
    served = ServedApp(fake.app())
    url = served.start()
    try:
        yield fake, url
    finally:
        served.stop()
