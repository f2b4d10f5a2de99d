"""Concurrent live calls on one voice process: the latency Switchboard adds, frame pacing, CPU.

A server subprocess runs the live-call pipeline exactly as a media stream runs it
(`app.voice.pipeline.run_agent_call`: pipecat's Twilio serializer on a websocket, Silero
VAD, the user-turn strategy, `AgentTurns` calling the conversation engine, the voice, the
transport's 20 ms pacing), with zero-latency fake providers in the process: speech to text
that hears a fixed line as soon as VAD says the caller stopped, the engine's offline
responder (no model call), and a voice that returns a tone at once. Before its first call
the server does what `switchboard voice` does (`ready_for_calls`: SDKs imported, database
pool opened; then the heap frozen). The bench process plays N simulated carrier streams at
the same time: each waits for the welcome to end, then says a line (real speech, μ-law
8 kHz, paced at 20 ms) followed by silence, as a carrier streams. Callers start at random
moments (fixed seed) within `--stagger` seconds, about one turn of the script, so their turns
end independently as real calls' do; `--stagger 0` puts them in lockstep, every turn of every
call ending within the same few milliseconds (the worst case).

Per turn, added latency = first agent audio frame received - the moment the VAD decided the
caller stopped (its `VADUserStoppedSpeakingFrame`, stamped in the server on the machine's
monotonic clock, which the bench shares) - the end-of-turn silence the turn strategy waits
for after it (`END_OF_TURN_SECONDS`): what remains is Switchboard's own work (turn handling,
the engine, the voice service, the transport) plus the loopback. The nominal figure is also
printed: (first agent frame - the caller's last voiced frame sent) - the VAD's nominal
`stop_secs` - the end-of-turn silence; it also counts how much later than `stop_secs` the
Silero model's confidence falls after the last word (`vad_stop_lag`), which is the model's
behaviour, not Switchboard's work. Jitter: the
deviation of the gap between consecutive agent media frames (20 ms each) from the typical
gap, within utterances (pipecat's transport sends a frame every 10 ms, half a frame ahead,
and the carrier plays them at 20 ms).
CPU: the server process's user+system seconds over the run, per second of a call on the
line (each call's own duration, summed). The knee is the smallest N whose added p99 passes
100 ms.

Run: ``.venv/bin/python bench/voice_calls.py [--calls 20] [--turns 3] [--knee 1,5,10,20,30,40]
[--stagger 3]``.
It ends with one JSON line: added_latency_p50_ms, added_latency_p99_ms, jitter_p99_ms,
cpu_ms_per_call_second (at --calls) and knee_calls. It never asserts on time.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import itertools
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
sys.path.insert(0, str(REPO_DIR))

LINE = "What are your opening hours?"
FRAME = 160  # 20 ms of μ-law
# About one turn of the script (the line, the end of turn, the answer): callers starting
# spread over it are at independent points of their conversations.
STAGGER_SECONDS = 3.0
# One period of the fake voice's tone: 10 samples low, 10 high (16-bit PCM).
TONE_SAMPLES = 20
TONE = (-6000).to_bytes(2, "little", signed=True) * 10 + (6000).to_bytes(2, "little") * 10


# The server side


def serve(port: int, database_url: str, vad_log: Path) -> None:
    import uvicorn
    from pipecat.frames.frames import (
        Frame,
        TranscriptionFrame,
        TTSAudioRawFrame,
        VADUserStoppedSpeakingFrame,
    )
    from pipecat.processors.frame_processor import FrameDirection
    from pipecat.services.settings import STTSettings, TTSSettings
    from pipecat.services.stt_service import STTService
    from pipecat.services.tts_service import TTSService
    from pipecat.transports.websocket.fastapi import (
        FastAPIWebsocketParams,
        FastAPIWebsocketTransport,
    )
    from pipecat.utils.time import time_now_iso8601
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute
    from starlette.websockets import WebSocket

    from app.config import Settings
    from app.engine.engine import ConversationEngine, EngineClients
    from app.engine.types import AgentProfile
    from app.kit.collector import tune_for_serving
    from app.resources import Resources
    from app.voice.pipeline import run_agent_call
    from app.voice.protocol import SAMPLE_RATE, MediaStreamSerializer
    from app.voice.runtime import ready_for_calls
    from app.voice.session import CallSession, LiveCall
    from app.voice.stream import quiet_pipecat

    quiet_pipecat()

    class InstantEars(STTService):  # type: ignore[misc]
        """Hears LINE the moment VAD says the caller stopped, and notes when that was."""

        def __init__(self, call_sid: str) -> None:
            super().__init__(settings=STTSettings(model=None, language=None), ttfs_p99_latency=0.0)
            self.call_sid = call_sid

        async def run_stt(self, audio: bytes) -> Any:
            yield None

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, VADUserStoppedSpeakingFrame):
                with vad_log.open("a") as log:
                    log.write(f"{self.call_sid} {time.monotonic()}\n")
                await self.push_frame(
                    TranscriptionFrame(LINE, "", time_now_iso8601(), finalized=True)
                )

    class InstantVoice(TTSService):  # type: ignore[misc]
        """A tone at once: 60 ms of audio per word."""

        def __init__(self) -> None:
            super().__init__(
                push_start_frame=True,
                push_stop_frames=True,
                settings=TTSSettings(model=None, voice="tone", language=None),
            )

        async def run_tts(self, text: str, context_id: str) -> Any:
            words = max(1, len(text.split()))
            samples = SAMPLE_RATE * 60 * words // 1000
            # A 400 Hz square wave, built by repetition: a fake voice costs no CPU to speak
            # (sample by sample in Python it took 3.6 ms per 20 words, counted as added).
            pcm = (TONE * (samples // TONE_SAMPLES + 1))[: samples * 2]
            yield TTSAudioRawFrame(pcm, SAMPLE_RATE, 1, context_id=context_id)

    settings = Settings(
        database_url=database_url,
        secret_key="bench-secret-key-0123456789abcdef0123456789",
        voice_silence_timeout_seconds=120,
        engine_turn_deadline_seconds=30,
        ai_replies_per_minute="100000/m",
        # One organization's calls, up to the largest level measured: the connections the
        # server opens before its first call (`ready_for_calls`).
        voice_max_concurrent_calls=40,
    )
    resources = Resources.from_settings(settings, serves_api=False)
    clients = EngineClients(settings)

    class Line:
        async def hang_up(self) -> bool:
            return False

        async def transfer(self, number: str) -> bool:
            return False

    async def stream(websocket: WebSocket) -> None:
        await websocket.accept()
        start: dict[str, Any] = {}
        while not start:
            message = json.loads(await websocket.receive_text())
            if message.get("event") == "start":
                start = message["start"]
        agent = AgentProfile(
            agent_id="bench-agent",
            organization_id="bench-org",
            livemode=False,
            name="Ava",
            timezone="UTC",
            config={"llm_provider": "openai", "welcome_message": "Hi, this is Ava."},
            version="1",
        )
        call = LiveCall(
            call_log_id=start["callSid"],
            call_sid=start["callSid"],
            direction="outbound",
            agent=agent,
            stt_provider="deepgram",
            tts_provider="offline",
        )

        async def keep(_transcript: Any, _events: Any) -> bool:
            return True

        session = CallSession(
            call=call,
            engine=ConversationEngine(resources, clients),
            line=Line(),
            write_progress=keep,
            speech_prices=None,
        )
        transport = FastAPIWebsocketTransport(
            websocket,
            FastAPIWebsocketParams(
                audio_in_enabled=True,
                audio_out_enabled=True,
                audio_in_sample_rate=SAMPLE_RATE,
                audio_out_sample_rate=SAMPLE_RATE,
                audio_out_10ms_chunks=2,
                audio_out_end_silence_secs=0,
                serializer=MediaStreamSerializer(start["streamSid"], max_message_bytes=65536),
                allowed_origins=[],
            ),
        )
        await run_agent_call(
            session,
            transport,
            stt=InstantEars(start["callSid"]),
            tts=InstantVoice(),
            welcome="Hi, this is Ava.",
            settings=settings,
        )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        # What `switchboard voice` does before its first call (app/voice/server.py).
        await ready_for_calls(resources)
        tune_for_serving()
        yield
        await resources.aclose()

    app = Starlette(routes=[WebSocketRoute("/voice", stream)], lifespan=lifespan)
    # The websocket settings of `switchboard voice` (app/voice/server.py).
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        ws_max_size=1 << 20,
        ws_per_message_deflate=False,
    )


# The carriers' side


def caller_audio() -> bytes:
    import audioop

    from app.voice.speech import synthesize

    pcm, rate = synthesize(LINE)
    converted, _ = audioop.ratecv(pcm, 2, 1, rate, 8000, None)
    return audioop.lin2ulaw(converted, 2)


async def one_call(
    port: int, index: int, speech: bytes, turns: int, delay: float
) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    await asyncio.sleep(delay)
    began = time.monotonic()

    latencies: list[float] = []
    answers: list[tuple[float, float]] = []  # (caller's last voiced frame, first agent frame)
    gaps: list[float] = []
    received: list[float] = []
    async with connect(f"ws://127.0.0.1:{port}/voice") as ws:
        sid = f"CA{index:032x}"

        async def send(message: dict[str, Any]) -> None:
            await ws.send(json.dumps(message))

        async def read() -> None:
            async for raw in ws:
                message = json.loads(raw)
                if message.get("event") == "media":
                    received.append(time.monotonic())

        reader = asyncio.create_task(read())
        await send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await send(
            {
                "event": "start",
                "start": {"streamSid": f"MZ{index:032x}", "callSid": sid, "customParameters": {}},
            }
        )
        silence = b"\xff" * FRAME
        started = time.monotonic()
        frame_index = 0

        async def play(chunk: bytes) -> None:
            nonlocal frame_index
            payload = base64.b64encode(chunk).decode()
            await send({"event": "media", "media": {"payload": payload}})
            frame_index += 1
            await asyncio.sleep(max(0.0, started + frame_index * 0.02 - time.monotonic()))

        async def quiet_until_agent_done(limit: float) -> None:
            deadline = time.monotonic() + limit
            while time.monotonic() < deadline:
                await play(silence)
                if received and time.monotonic() - received[-1] > 0.3:
                    return

        await quiet_until_agent_done(10)  # the welcome
        frames = [speech[o : o + FRAME].ljust(FRAME, b"\xff") for o in range(0, len(speech), FRAME)]
        last_voiced = max(i for i, f in enumerate(frames) if voiced(f))
        for _ in range(turns):
            spoke_at = time.monotonic()
            for position, chunk in enumerate(frames):
                await play(chunk)
                if position == last_voiced:
                    spoke_at = time.monotonic()  # the caller's end of speech
            before = len(received)
            deadline = spoke_at + 10
            while len(received) == before and time.monotonic() < deadline:
                await play(silence)
            if len(received) > before:
                latencies.append(received[before] - spoke_at)
                answers.append((spoke_at, received[before]))
            mark = len(received)
            await quiet_until_agent_done(10)
            reply = received[mark - 1 :] if mark else received
            gaps += [b - a for a, b in itertools.pairwise(reply) if b - a < 0.2]
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    return {
        "sid": sid,
        "latencies": latencies,
        "answers": answers,
        "gaps": gaps,
        "seconds": time.monotonic() - began,
    }


def voiced(ulaw: bytes) -> bool:
    import audioop

    return audioop.rms(audioop.ulaw2lin(ulaw, 2), 2) > 300


def percentile(values: list[float], q: float, digits: int = 1) -> float | None:
    """The q-quantile, rounded; None when nothing was measured (JSON has no NaN)."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], digits)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vad_stops(vad_log: Path) -> dict[str, list[float]]:
    """When the server's VAD said each call's caller stopped, by call sid; then empties the
    log for the next level."""
    stops: dict[str, list[float]] = {}
    lines = vad_log.read_text().splitlines() if vad_log.exists() else []
    vad_log.write_text("")
    for line in lines:
        sid, at = line.split()
        stops.setdefault(sid, []).append(float(at))
    return stops


async def run_level(
    port: int, pid: int, calls: int, turns: int, speech: bytes, vad_log: Path, stagger: float
) -> dict[str, Any]:
    from pipecat.audio.vad.vad_analyzer import VAD_STOP_SECS

    from app.voice.pipeline import END_OF_TURN_SECONDS

    # Independent callers: each starts at a random moment within `stagger` seconds (the same
    # moments every run: a fixed seed), so their turns end independently of one another, as
    # real calls' do, clusters included; with 0 every caller speaks in lockstep and all turns
    # end within the same few milliseconds (the worst case).
    chance = random.Random(calls)
    delays = [chance.uniform(0, stagger) for _ in range(calls)]
    cpu_before = cpu_seconds(pid)
    results = await asyncio.gather(
        *(one_call(port, i, speech, turns, delays[i]) for i in range(calls))
    )
    cpu = cpu_seconds(pid) - cpu_before
    call_seconds = sum(result["seconds"] for result in results)
    waits = VAD_STOP_SECS + END_OF_TURN_SECONDS
    nominal = [(t - waits) * 1000 for r in results for t in r["latencies"]]
    stops = vad_stops(vad_log)
    added: list[float] = []
    vad_lag: list[float] = []
    for result in results:
        for spoke_at, answered_at in result["answers"]:
            stopped = [t for t in stops.get(result["sid"], []) if spoke_at < t < answered_at]
            if stopped:
                added.append((answered_at - stopped[-1] - END_OF_TURN_SECONDS) * 1000)
                vad_lag.append((stopped[-1] - spoke_at - VAD_STOP_SECS) * 1000)
    # pipecat sends each 20 ms frame half a frame ahead (the carrier buffers): regularity is
    # measured against the typical gap, whatever it is.
    typical = statistics.median([g for r in results for g in r["gaps"]] or [0.02])
    jitter = [abs(g - typical) * 1000 for r in results for g in r["gaps"]]
    return {
        "calls": calls,
        "turns": len(added),
        "turns_expected": calls * turns,
        "added_p50_ms": percentile(added, 0.5),
        "added_p99_ms": percentile(added, 0.99),
        "nominal_p50_ms": percentile(nominal, 0.5),
        "nominal_p99_ms": percentile(nominal, 0.99),
        "vad_stop_lag_p50_ms": percentile(vad_lag, 0.5),
        "jitter_p99_ms": percentile(jitter, 0.99, 2),
        "cpu_ms_per_call_second": round(cpu * 1000 / call_seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--knee", default="1,5,10,20,30,40")
    parser.add_argument(
        "--stagger",
        type=float,
        default=STAGGER_SECONDS,
        help="callers start spread over this many seconds (0: all in lockstep)",
    )
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    parser.add_argument("--vad-log", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.database_url, args.vad_log)
        return

    from app.db.migrate import upgrade
    from app.kit.collector import tune_for_serving

    work = Path(tempfile.mkdtemp(prefix="sb-voice-bench-"))
    vad_log = work / "vad-stops.log"
    database_url = f"sqlite+aiosqlite:///{work / 'bench.db'}"
    upgrade(database_url)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            __file__,
            *("--serve", str(port), "--database-url", database_url, "--vad-log", str(vad_log)),
        ],
        cwd=REPO_DIR,
    )
    try:
        deadline = time.monotonic() + 180  # a cold start on a busy machine
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("the bench server did not start")
            time.sleep(0.1)
        speech = caller_audio()
        # The carriers' side keeps its own collector out of the way too: a full pass here
        # would delay the timestamps of every call it measures.
        tune_for_serving()
        asyncio.run(run_level(port, server.pid, 1, 1, speech, vad_log, 0))  # warm up
        levels = sorted({int(n) for n in args.knee.split(",")} | {args.calls})
        rows: dict[int, dict[str, Any]] = {}
        for calls in levels:
            rows[calls] = asyncio.run(
                run_level(port, server.pid, calls, args.turns, speech, vad_log, args.stagger)
            )
            print(json.dumps(rows[calls]))
        # The knee: the first level whose added p99 passes 100 ms, or where no turn came back.
        knee = next((n for n in levels if (rows[n]["added_p99_ms"] or float("inf")) > 100), None)
        at = rows[args.calls]
        print(
            json.dumps(
                {
                    "calls": args.calls,
                    "added_latency_p50_ms": at["added_p50_ms"],
                    "added_latency_p99_ms": at["added_p99_ms"],
                    "nominal_added_latency_p99_ms": at["nominal_p99_ms"],
                    "vad_stop_lag_p50_ms": at["vad_stop_lag_p50_ms"],
                    "jitter_p99_ms": at["jitter_p99_ms"],
                    "cpu_ms_per_call_second": at["cpu_ms_per_call_second"],
                    "knee_calls": knee,
                    "knee_levels": levels,
                    "median_of_turns": statistics.median([r["turns"] for r in rows.values()]),
                }
            )
        )
    finally:
        server.terminate()
        server.wait(timeout=20)


if __name__ == "__main__":
    main()
