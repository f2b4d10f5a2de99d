"""A channel's platform whose sends go through the channel's send governor.

Every message sent this way first takes its recipient's turn (Meta's pair rate) and then one
send of the channel's budget (app/channels/governor.py), which campaigns draw from too. The
platform's throttling answers act on the governor rather than on this send alone: 130429 holds
the whole channel (the platform's `Retry-After`, else 1 s doubling), 131056 holds the recipient.
The send is then tried again, since a throttled message was not accepted. A send that cannot
leave within `max_wait` seconds fails with the platform's last refusal (or a throttling error
saying what it waited for), so a caller never waits without bound. A governor that cannot be
reached (Redis down) fails the send before anything leaves: sends are never unpaced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from app.channels.governor import PAIR_INTERVAL_SECONDS, SendGovernor, throughput_backoff
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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget.max_wait
        refusal: WhatsAppError | None = None
        throttled = 0
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
            except ThroughputExceeded as exc:
                throttled += 1
                wait = throughput_backoff(exc.retry_after, throttled)
                await governor.hold(budget.channel_id, wait)
                refusal = exc
            except PairRateLimited as exc:
                wait = exc.retry_after or PAIR_INTERVAL_SECONDS
                await governor.pair_limited(budget.channel_id, to, wait)
                refusal = exc
            if loop.time() + wait > deadline:
                raise refusal

    async def _recipient_turn(
        self, to: str, deadline: float, refusal: WhatsAppError | None
    ) -> None:
        """Waits for the recipient's pair rate to let one more message through, and takes it."""
        budget, loop = self._budget, asyncio.get_running_loop()
        while wait := await budget.governor.recipient_wait(budget.channel_id, to):
            if loop.time() + wait > deadline:
                raise refusal or PairRateLimited(
                    f"This recipient was sent too many messages recently; the next may leave in "
                    f"{wait:.0f} s, after the {budget.max_wait:g} s a send may wait"
                )
            await asyncio.sleep(wait)
