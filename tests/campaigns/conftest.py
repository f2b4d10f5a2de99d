"""Campaign fixtures: a test-mode channel, an APPROVED template (settled by the simulator
through the job engine), contacts, and a runner of the due outbox jobs as a worker would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.campaigns import dispatch as campaign_dispatch
from app.campaigns.dispatch import dispatch_campaign
from app.campaigns.meta_limits import RETRY_ACTOR, retry_deferred
from app.campaigns.models import CampaignRecipient
from app.campaigns.service import DISPATCH_ACTOR
from app.conversations.tasks import deliver_callback
from app.core.clock import utcnow
from app.events.models import Event
from app.integrations.whatsapp.factory import CALLBACK_ACTOR
from app.kit.outbox_models import OutboxJob
from app.resources import Resources
from app.templates.service import SUBMIT_ACTOR
from app.templates.tasks import submit_template
from tests.conftest import Tenant
from tests.templates.conftest import TEMPLATES, WABA, create_channel, template_body

CAMPAIGNS = "/api/v1/campaigns"
CONTACTS = "/api/v1/contacts"

Task = Callable[..., Awaitable[Any]]
TASKS: dict[str, Task] = {
    SUBMIT_ACTOR: submit_template,
    CALLBACK_ACTOR: deliver_callback,
    DISPATCH_ACTOR: dispatch_campaign,
    RETRY_ACTOR: retry_deferred,
}


class Jobs:
    """Runs the waiting outbox jobs of TASKS the way the runtime does: a job returning a
    time runs again then. `delayed=True` also runs jobs not yet due (simulator callbacks
    wait a few seconds; the test skips the wait), never a campaign's future schedule."""

    def __init__(
        self, resources: Resources, sessionmaker: async_sessionmaker[AsyncSession]
    ) -> None:
        self.resources = resources
        self.sessionmaker = sessionmaker

    async def waiting(self) -> list[OutboxJob]:
        async with self.sessionmaker() as session:
            rows = await session.scalars(
                select(OutboxJob)
                .where(OutboxJob.actor.in_(list(TASKS)))
                .order_by(OutboxJob.available_at, OutboxJob.created_at)
            )
            return list(rows.all())

    def _runnable(self, job: OutboxJob, delayed: bool) -> bool:
        if job.available_at <= utcnow():
            return True
        return delayed and job.actor not in (DISPATCH_ACTOR, RETRY_ACTOR)

    async def drain(self, *, delayed: bool = True, limit: int = 500) -> list[str]:
        ran: list[str] = []
        for _ in range(limit):
            jobs = [job for job in await self.waiting() if self._runnable(job, delayed)]
            if not jobs:
                return ran
            job = jobs[0]
            again = await TASKS[job.actor](self.resources, *job.args)
            async with self.sessionmaker() as session:
                if isinstance(again, datetime):
                    row = await session.get(OutboxJob, job.id)
                    assert row is not None
                    row.available_at = again
                else:
                    await session.execute(delete(OutboxJob).where(OutboxJob.id == job.id))
                await session.commit()
            ran.append(job.actor)
            if isinstance(again, datetime) and again > utcnow():
                continue
        raise AssertionError("jobs kept coming")

    async def events(self, organization_id: str, prefix: str = "campaign.") -> list[Event]:
        async with self.sessionmaker() as session:
            rows = await session.scalars(
                select(Event)
                .where(Event.organization_id == organization_id, Event.type.startswith(prefix))
                .order_by(Event.created_at, Event.id)
            )
            return list(rows.all())


@dataclass
class TakingTurns(Resources):
    """Resources whose sessions take turns. Every session of a test shares its one connection
    (rolled back at the end), and a live dispatch run claims and settles from concurrent tasks,
    each in a session of its own: pooled connections let them overlap, one connection cannot.
    A session opened inside another one of the same task is already in its turn."""

    turns: asyncio.Lock = field(default_factory=asyncio.Lock)
    holder: asyncio.Task[Any] | None = None

    def session(self, *, writes: bool) -> AbstractAsyncContextManager[AsyncSession]:
        return self._in_turn(super().session(writes=writes))

    @asynccontextmanager
    async def _in_turn(
        self, opening: AbstractAsyncContextManager[AsyncSession]
    ) -> AsyncIterator[AsyncSession]:
        task = asyncio.current_task()
        if self.holder is task:
            async with opening as session:
                yield session
            return
        async with self.turns:
            self.holder = task
            try:
                async with opening as session:
                    yield session
            finally:
                self.holder = None


@pytest.fixture
def jobs(resources: Resources, sessionmaker: async_sessionmaker[AsyncSession]) -> Jobs:
    taking_turns = TakingTurns(
        **{f.name: getattr(resources, f.name) for f in fields(Resources) if f.init}
    )
    return Jobs(taking_turns, sessionmaker)


@pytest.fixture
def batches_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dispatch sends two recipients a batch and one batch a run, then reschedules itself:
    a test sees the campaign between batches."""
    monkeypatch.setattr(campaign_dispatch, "BATCH_SIZE", 2)
    monkeypatch.setattr(campaign_dispatch, "BATCHES_PER_RUN", 1)


@pytest.fixture
async def channel(client: httpx.AsyncClient, acme: Tenant) -> dict[str, Any]:
    return await create_channel(client, acme)


async def create_template(
    client: httpx.AsyncClient, tenant: Tenant, channel_id: str, jobs: Jobs, **fields: Any
) -> dict[str, Any]:
    response = await client.post(
        TEMPLATES, json=template_body(channel_id, **fields), headers=tenant.headers
    )
    assert response.status_code == 201, response.text
    await jobs.drain()
    settled = await client.get(f"{TEMPLATES}/{response.json()['id']}", headers=tenant.headers)
    body: dict[str, Any] = settled.json()
    return body


@pytest.fixture
async def template(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], jobs: Jobs
) -> dict[str, Any]:
    body = await create_template(client, acme, channel["id"], jobs)
    assert body["status"] == "APPROVED"
    return body


async def create_contact(
    client: httpx.AsyncClient, tenant: Tenant, phone: str, name: str, **fields: Any
) -> dict[str, Any]:
    response = await client.post(
        CONTACTS, json={"phone_number": phone, "name": name, **fields}, headers=tenant.headers
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def campaign_body(
    channel: dict[str, Any], template: dict[str, Any], **fields: Any
) -> dict[str, Any]:
    return {
        "name": "Spring sale",
        "chat_phone_number_id": channel["id"],
        "message_template_id": template["id"],
        "audience_type": "all",
        "template_parameters": {"1": "{{contact.name}}", "2": "A-1001"},
        **fields,
    }


async def launch_campaign(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]
) -> dict[str, Any]:
    """Create a campaign from `body` and launch it; the launched campaign."""
    created = await client.post(CAMPAIGNS, json=body, headers=tenant.headers)
    assert created.status_code == 201, created.text
    launched = await client.post(
        f"{CAMPAIGNS}/{created.json()['id']}/launch", headers=tenant.headers
    )
    assert launched.status_code == 200, launched.text
    result: dict[str, Any] = launched.json()
    return result


async def fetch_campaign(
    client: httpx.AsyncClient, tenant: Tenant, campaign_id: str
) -> dict[str, Any]:
    response = await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=tenant.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def ledger(
    sessionmaker: async_sessionmaker[AsyncSession], campaign_id: str
) -> dict[str, CampaignRecipient]:
    """The campaign's recipients by phone number, read in a session of their own."""
    async with sessionmaker() as session:
        rows = await session.scalars(
            select(CampaignRecipient).where(CampaignRecipient.campaign_id == campaign_id)
        )
        return {row.phone_number: row for row in rows}


async def simulated_campaign_body(
    client: httpx.AsyncClient,
    tenant: Tenant,
    phones: list[str],
    name: str,
    eventually: Callable[[Callable[[], Awaitable[bool]]], Awaitable[None]],
) -> dict[str, Any]:
    """A test-mode channel, a template the simulator approves (awaited with `eventually`) and
    the contacts of `phones`, in `tenant`; returns the body of a campaign to all of them."""
    channel = await client.post(
        "/api/v1/channels",
        json={
            "display_phone_number": "+14155550142",
            "phone_number_id": f"pn{tenant.organization_id[:8]}",
            "business_account_id": WABA,
            "access_token": "EAAGtest-token",
        },
        headers=tenant.headers,
    )
    assert channel.status_code == 201, channel.text
    template = await client.post(
        TEMPLATES,
        # The simulator's business account is shared by the module's tests: a name each.
        json=template_body(channel.json()["id"], name=f"sale_{tenant.organization_id[:8]}"),
        headers=tenant.headers,
    )
    template_id = template.json()["id"]

    async def approved() -> bool:
        found = await client.get(f"{TEMPLATES}/{template_id}", headers=tenant.headers)
        return bool(found.json()["status"] == "APPROVED")

    await eventually(approved)
    for n, phone in enumerate(phones):
        response = await client.post(
            CONTACTS, json={"phone_number": phone, "name": f"P{n}"}, headers=tenant.headers
        )
        assert response.status_code == 200, response.text
    return {
        "name": name,
        "chat_phone_number_id": channel.json()["id"],
        "message_template_id": template_id,
        "audience_type": "all",
        "template_parameters": {"1": "{{contact.name}}", "2": "A-1"},
    }
