"""Template fixtures: test-mode channels (the simulator answers) and a drain of the jobs a
request left in the outbox, run in the test's own transaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.conversations.tasks import deliver_callback
from app.integrations.whatsapp.factory import CALLBACK_ACTOR
from app.kit.outbox_models import OutboxJob
from app.resources import Resources
from app.templates.service import SUBMIT_ACTOR
from app.templates.tasks import submit_template
from tests.conftest import Tenant
from tests.integrations.whatsapp.fake_graph import FakeGraph

CHANNELS = "/api/v1/channels"
TEMPLATES = "/api/v1/templates"
WABA = "102290129340398"
CHANNEL_TOKEN = "EAAGtest-token"
VALID_BODY = {
    "type": "BODY",
    "text": "Hi {{1}}, your order {{2}} has shipped.",
    "example": {"body_text": [["Ada", "A-1001"]]},
}

Task = Callable[..., Awaitable[Any]]
TASKS: dict[str, Task] = {SUBMIT_ACTOR: submit_template, CALLBACK_ACTOR: deliver_callback}


def template_body(channel_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "channel_id": channel_id,
        "name": "order_shipped",
        "language": "en_US",
        "category": "UTILITY",
        "components": [VALID_BODY],
        **fields,
    }


async def create_channel(
    client: httpx.AsyncClient,
    tenant: Tenant,
    phone_number_id: str = "106540352242922",
    *,
    platform: FakeGraph | None = None,
) -> dict[str, Any]:
    """A channel of `tenant`'s mode; for a live key, `platform` is the local Graph API the
    number is verified with (registered there first, readable by the channel's token)."""
    if platform is not None:
        platform.add_phone_number(phone_number_id, token=CHANNEL_TOKEN)
    response = await client.post(
        CHANNELS,
        json={
            "display_phone_number": "+14155550142",
            "phone_number_id": phone_number_id,
            "business_account_id": WABA,
            "access_token": CHANNEL_TOKEN,
        },
        headers=tenant.headers,
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


class Jobs:
    """Runs the template and simulator-callback jobs waiting in the outbox, as a worker
    would, until none is left (delayed callbacks included: the test skips the wait)."""

    def __init__(
        self, resources: Resources, sessionmaker: async_sessionmaker[AsyncSession]
    ) -> None:
        self.resources = resources
        self.sessionmaker = sessionmaker
        self.ran: list[str] = []

    async def pending(self) -> list[OutboxJob]:
        async with self.sessionmaker() as session:
            rows = await session.scalars(
                select(OutboxJob)
                .where(OutboxJob.actor.in_(list(TASKS)))
                .order_by(OutboxJob.available_at, OutboxJob.created_at)
            )
            return list(rows.all())

    async def run_only(self, actor: str) -> None:
        """Run the waiting jobs of `actor`; drop every other waiting job of TASKS."""
        for job in await self.pending():
            async with self.sessionmaker() as session:
                await session.execute(delete(OutboxJob).where(OutboxJob.id == job.id))
                await session.commit()
            if job.actor == actor:
                await TASKS[job.actor](self.resources, *job.args)

    async def drain(self, limit: int = 50) -> list[str]:
        for _ in range(limit):
            jobs = await self.pending()
            if not jobs:
                return self.ran
            job = jobs[0]
            async with self.sessionmaker() as session:
                await session.execute(delete(OutboxJob).where(OutboxJob.id == job.id))
                await session.commit()
            await TASKS[job.actor](self.resources, *job.args)
            self.ran.append(job.actor)
        raise AssertionError("jobs kept coming")


@pytest.fixture
def jobs(resources: Resources, sessionmaker: async_sessionmaker[AsyncSession]) -> Jobs:
    return Jobs(resources, sessionmaker)


@pytest.fixture
async def channel(client: httpx.AsyncClient, acme: Tenant) -> dict[str, Any]:
    return await create_channel(client, acme)
