"""The one throttling policy of every WhatsApp send, and a channel's platform paced by it.

`ThrottleHolds` is how any sender of a channel (a campaign run, a reply, an agent) answers the
platform's throttling: on the channel's send governor (app/kit/send_governor.py), not on the
send alone. 130429 holds the whole channel (the platform's `Retry-After`, else 1 s doubling),
131056 holds the recipient; the message is then tried again, since it was not accepted.

`GovernedPlatform` sends one message at a time under that policy: every message first takes
its recipient's turn (Meta's pair rate) and then one send of the channel's budget, which
campaigns draw from too (a campaign run takes its budget in batches, with the same holds).
A send that cannot leave within `max_wait` seconds fails with the platform's last refusal (or
a throttling error saying what it waited for), so a caller never waits without bound. A
governor that cannot be reached (Redis down) fails the send before anything leaves: sends are
never unpaced.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from app.integrations.whatsapp.errors import (
    PairRateLimited,
    PlatformUnavailable,
    ThroughputExceeded,
    WhatsAppError,
)
from app.integrations.whatsapp.types import (
    CreatedTemplate,
    LibraryFilters,
    PlatformTemplate,
    SentMessage,
    TemplateMessage,
    TemplateSpec,
    WhatsAppPlatform,
)
from app.kit.send_governor import PAIR_INTERVAL_SECONDS, SendGovernor, throughput_backoff


class ThrottleHolds:
    """The platform's throttling answers for one sender of one channel, as holds in the
    channel's send governor. One hold per episode: sends in flight beside one that met a
    130429 and meet it too wait for the same hold rather than doubling it each; the doubling
    counts 130429s in a row, until a message is accepted."""

    def __init__(self, governor: SendGovernor, channel_id: str) -> None:
        self._governor = governor
        self._channel_id = channel_id
        self._throttled_in_a_row = 0
        self._hold_until = 0.0

    async def refused(self, refusal: WhatsAppError, to: str) -> float | None:
        """When (`time.monotonic()`) the refused message to `to` may be tried again, the
        hold recorded in the governor; None when the refusal is not throttling."""
        now = time.monotonic()
        if isinstance(refusal, ThroughputExceeded):
            if now >= self._hold_until:
                self._throttled_in_a_row += 1
                hold = throughput_backoff(refusal.retry_after, self._throttled_in_a_row)
                self._hold_until = now + hold
                await self._governor.hold(self._channel_id, hold)
            return self._hold_until
        if isinstance(refusal, PairRateLimited):
            wait = refusal.retry_after or PAIR_INTERVAL_SECONDS
            await self._governor.pair_limited(self._channel_id, to, wait)
            return now + wait
        return None

    def accepted(self) -> None:
        self._throttled_in_a_row = 0


@dataclass(frozen=True, slots=True)
class SendBudget:
    """Whose budget a platform's sends draw from, and how long one send may wait for it."""

    governor: SendGovernor
    channel_id: str
    messages_per_second: int
    max_wait: float


class GovernedPlatform:
    """`platform` with paced sends; template management passes straight through."""

    def __init__(self, platform: WhatsAppPlatform, budget: SendBudget) -> None:
        self._platform = platform
        self._budget = budget

    async def create_template(
        self, business_account_id: str, spec: TemplateSpec
    ) -> CreatedTemplate:
        return await self._platform.create_template(business_account_id, spec)

    async def list_templates(self, business_account_id: str) -> list[PlatformTemplate]:
        return await self._platform.list_templates(business_account_id)

    async def delete_template(
        self, business_account_id: str, name: str, platform_template_id: str | None
    ) -> None:
        await self._platform.delete_template(business_account_id, name, platform_template_id)

    async def browse_library(self, filters: LibraryFilters) -> list[dict[str, Any]]:
        return await self._platform.browse_library(filters)

    async def send_text(self, phone_number_id: str, to: str, body: str) -> SentMessage:
        return await self._send(to, lambda: self._platform.send_text(phone_number_id, to, body))

    async def send_template(
        self, phone_number_id: str, to: str, template: TemplateMessage
    ) -> SentMessage:
        return await self._send(
            to, lambda: self._platform.send_template(phone_number_id, to, template)
        )

    async def _send(self, to: str, send: Callable[[], Awaitable[SentMessage]]) -> SentMessage:
        try:
            return await self._paced(to, send)
        except RedisError as exc:
            raise PlatformUnavailable(
                "The channel's send budget could not be checked (Redis unreachable); "
                "nothing was sent"
            ) from exc

    async def _paced(self, to: str, send: Callable[[], Awaitable[SentMessage]]) -> SentMessage:
        budget, governor = self._budget, self._budget.governor
        holds = ThrottleHolds(governor, budget.channel_id)
        # `time.monotonic`, the holds' clock, is also the event loop's.
        deadline = time.monotonic() + budget.max_wait
        refusal: WhatsAppError | None = None
        while True:
            await self._recipient_turn(to, deadline, refusal)
            try:
                async with asyncio.timeout_at(deadline):
                    await governor.acquire(budget.channel_id, budget.messages_per_second, 1)
            except TimeoutError:
                raise refusal or ThroughputExceeded(
                    f"The channel's send budget had no room within {budget.max_wait:g} s"
                ) from None
            try:
                return await send()
            except (ThroughputExceeded, PairRateLimited) as exc:
                due = await holds.refused(exc, to)
                refusal = exc
            if due is None or due > deadline:
                raise refusal

    async def _recipient_turn(
        self, to: str, deadline: float, refusal: WhatsAppError | None
    ) -> None:
        """Waits for the recipient's pair rate to let one more message through, and takes it."""
        budget = self._budget
        while wait := await budget.governor.recipient_wait(budget.channel_id, to):
            if time.monotonic() + wait > deadline:
                raise refusal or PairRateLimited(
                    f"This recipient was sent too many messages recently; the next may leave in "
                    f"{wait:.0f} s, after the {budget.max_wait:g} s a send may wait"
                )
            await asyncio.sleep(wait)
