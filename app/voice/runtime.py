"""What a process that terminates media streams keeps: the engine's clients, the carrier
client, the calls it holds (for control messages), the control listener and the sweep of
calls whose process died; and draining on shutdown.

Made by the app's lifespan when the process serves streams (`switchboard serve` with
`SWITCHBOARD_VOICE_SERVE_STREAMS`, the default, or `switchboard voice`), kept on
`app.state.voice`. Nothing here imports pipecat: the API process pays for it only when the
first call's stream opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import structlog
from starlette.applications import Starlette

from app.calls import control, placement
from app.calls.tasks import LiveCarrier
from app.engine import providers
from app.engine.engine import EngineClients
from app.resources import Resources
from app.voice.record import fail_stale_streams

if TYPE_CHECKING:
    from app.voice.session import CallSession

logger = structlog.get_logger("switchboard.voice")

DRAIN_POLL_SECONDS = 0.2
# Calls still under way at the drain's limit get this long for their goodbye.
DRAIN_GOODBYE_SECONDS = 10.0
# The runtimes of this process (one per app), for the server's drain on SIGTERM.
RUNTIMES: list[VoiceRuntime] = []


class VoiceRuntime:
    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.settings = resources.settings
        self.engine_clients = EngineClients(self.settings)
        self.carrier = LiveCarrier(self.settings)
        self.calls: dict[str, CallSession] = {}
        self.draining = False
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        ready = asyncio.Event()
        self._tasks = [
            asyncio.create_task(
                control.listen(self.resources.listening_redis, self.on_control, ready)
            ),
            asyncio.create_task(self._sweep()),
        ]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ready.wait(), 2.0)

    async def on_control(self, message: dict[str, Any]) -> None:
        session = self.calls.get(str(message.get("call_log_id")))
        if session is None:
            return
        action = message.get("action")
        if action == "hangup":
            session.end_now("caller_hung_up")
        elif action == "voicemail":
            await session.voicemail(str(message.get("answered_by") or ""))

    async def _sweep(self) -> None:
        every = max(1.0, self.settings.voice_stale_after_seconds / 2)
        while True:
            try:
                await fail_stale_streams(self.resources, self.settings.voice_stale_after_seconds)
                # Outbound calls the carrier never confirmed (app/calls/placement.py).
                await placement.sweep(self.resources)
            except Exception:  # the database is away: the next round tries again
                logger.exception("voice sweep failed")
            await asyncio.sleep(every)

    async def drain(self, seconds: float) -> None:
        """Take no new stream; let the calls under way finish for up to `seconds`, then end
        the rest (`draining_limit`, the caller hears a goodbye)."""
        self.draining = True
        deadline = time.monotonic() + seconds
        await self._calls_over(deadline)
        for session in list(self.calls.values()):
            session.close("draining_limit", say="I have to end the call now. Goodbye.")
        await self._calls_over(deadline + DRAIN_GOODBYE_SECONDS)

    async def _calls_over(self, deadline: float) -> None:
        while self.calls and time.monotonic() < deadline:  # noqa: ASYNC110 (a dict, not an event)
            await asyncio.sleep(DRAIN_POLL_SECONDS)

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.engine_clients.aclose()
        await self.carrier.aclose()


async def ready_for_calls(resources: Resources) -> None:
    """What a process that holds calls does once, before it serves: the engine's SDKs
    imported (they then join the heap the caller freezes) and a connection opened for each
    call one organization may hold at once (within the pool), so the first calls' turns
    wait for neither."""
    settings = resources.settings
    await providers.load_all()
    await resources.open_connections(
        min(settings.db_pool_size, settings.voice_max_concurrent_calls)
    )


def runtime_of(app: Starlette) -> VoiceRuntime | None:
    return getattr(app.state, "voice", None)


@asynccontextmanager
async def serving_streams(app: Starlette, resources: Resources) -> AsyncIterator[None]:
    """The lifespan part of a process that terminates media streams: on exit (SIGTERM
    included) it drains the calls first."""
    runtime = VoiceRuntime(resources)
    await runtime.start()
    app.state.voice = runtime
    RUNTIMES.append(runtime)
    try:
        yield
    finally:
        RUNTIMES.remove(runtime)
        await runtime.drain(resources.settings.voice_drain_seconds)
        await runtime.aclose()


async def drain_all(seconds: float) -> None:
    """Every runtime of the process drains (the server calls it before closing sockets)."""
    await asyncio.gather(*(runtime.drain(seconds) for runtime in list(RUNTIMES)))
