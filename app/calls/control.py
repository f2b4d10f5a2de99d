"""Control of a call from any process: the carrier's callbacks reach whichever replica the
load balancer picked, the call's media stream is held by one voice process.

`publish` sends `{"call_log_id", "action", …}` on the Redis channel
`switchboard:voice:control` (every voice process subscribes) or, without Redis, on the
process's own bus. The holding process hands it to the call's session (`CallRegistry`);
the others ignore it. Best effort, like every pub/sub: a lost message leaves the carrier's
own end of the call (the stream's `stop`) and, failing that, the sweep.

Actions: `hangup` (the carrier says the call ended), `voicemail` (the answering-machine
verdict, with `answered_by`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from redis.asyncio import Redis

from app.core.jsonutil import dumps, loads
from app.kit.redis_clients import REDIS_FAILURES

logger = structlog.get_logger("switchboard.voice")

CHANNEL = "switchboard:voice:control"
Handler = Callable[[dict[str, Any]], Awaitable[None]]


class LocalControlBus:
    """One process: the API's callbacks and the streams share the event loop's handlers."""

    def __init__(self) -> None:
        self.handlers: list[Handler] = []

    async def publish(self, message: dict[str, Any]) -> None:
        for handler in list(self.handlers):
            await handler(message)


LOCAL_CONTROL_BUS = LocalControlBus()


async def publish(redis: Redis | None, message: dict[str, Any]) -> None:
    if redis is None:
        await LOCAL_CONTROL_BUS.publish(message)
        return
    try:
        await redis.publish(CHANNEL, dumps(message))
    except REDIS_FAILURES as exc:
        logger.warning("voice control not published", error=type(exc).__name__, **message)


async def listen(redis: Redis | None, handler: Handler, ready: asyncio.Event) -> None:
    """Hand every control message to `handler` until cancelled; reconnects after a Redis
    failure (messages sent meanwhile are lost: see the module's docstring)."""
    if redis is None:
        LOCAL_CONTROL_BUS.handlers.append(handler)
        ready.set()
        try:
            await asyncio.Event().wait()
        finally:
            LOCAL_CONTROL_BUS.handlers.remove(handler)
        return
    while True:
        pubsub = redis.pubsub()
        try:
            await pubsub.subscribe(CHANNEL)
            ready.set()
            async for message in pubsub.listen():
                if message.get("type") == "message":
                    with contextlib.suppress(ValueError, TypeError):
                        await handler(loads(message["data"]))
        except REDIS_FAILURES as exc:
            logger.warning("voice control listener lost Redis", error=type(exc).__name__)
            await asyncio.sleep(1.0)
        finally:
            with contextlib.suppress(*REDIS_FAILURES):
                await pubsub.aclose()  # type: ignore[no-untyped-call]
