"""The platform a channel's work goes to: the simulator in test mode, Meta's Graph API live."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from app.config import Settings
from app.core.clock import utcnow
from app.integrations.whatsapp.bulk import BulkGraphApiClient, BulkMessageSender
from app.integrations.whatsapp.client import GraphApiClient, RetryPolicy
from app.integrations.whatsapp.governed import GovernedPlatform, SendBudget
from app.integrations.whatsapp.simulator import Simulator
from app.integrations.whatsapp.types import WhatsAppPlatform
from app.kit import outbox

# The job that hands a simulated callback to the inbound webhook handler.
CALLBACK_ACTOR = "whatsapp.callback"
CALLBACK_QUEUE = "default"


class OutboxCallbacks:
    """Simulator callbacks as outbox jobs of the caller's transaction: they reach the inbound
    handler only once the work that caused them is committed, and survive a crash."""

    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    def post(self, body: bytes, signature: str, delay: float) -> None:
        at = utcnow() + timedelta(seconds=delay) if delay > 0 else None
        outbox.schedule(
            self._session, CALLBACK_ACTOR, body.decode(), signature, queue=CALLBACK_QUEUE, at=at
        )


@asynccontextmanager
async def platform_for(
    *,
    livemode: bool,
    access_token: str,
    business_account_id: str,
    display_phone_number: str,
    settings: Settings,
    session: AsyncSession | None,
    budget: SendBudget | None = None,
    sender: BulkMessageSender | None = None,
    retry: RetryPolicy | None = None,
) -> AsyncIterator[WhatsAppPlatform]:
    """Test mode needs `session` (the simulator records there); live work never holds one.
    With a `budget`, sends are paced by the channel's send governor (governed.py), in test
    mode as live, and the governor, not the client, handles the platform's throttling.
    With a `sender` (a worker's, for sends at a channel's full rate), live messages leave
    through it and throttling is raised at once: the caller paces and holds (a campaign run
    takes its budget in batches and answers throttling with governed.ThrottleHolds).
    `retry`: how a live send through `sender` is tried again (none: it is not)."""
    if not livemode:
        if session is None:
            raise ValueError("the simulator records in a session; none was given")
        simulator = Simulator(
            session,
            OutboxCallbacks(session),
            settings.whatsapp_app_secret_value(),
            business_account_id=business_account_id,
            display_phone_number=display_phone_number,
        )
        yield simulator if budget is None else GovernedPlatform(simulator, budget)
        return
    if sender is not None:
        async with BulkGraphApiClient(sender, access_token, retry=retry) as bulk:
            yield bulk if budget is None else GovernedPlatform(bulk, budget)
        return
    async with GraphApiClient(
        settings.graph_api_url,
        access_token,
        retry_throttling=budget is None,
        version=settings.graph_api_version,
    ) as client:
        yield client if budget is None else GovernedPlatform(client, budget)
