"""A live-mode campaign run by real `switchboard worker` processes against the local fake
Graph API, for the crash tests (PostgreSQL + Redis).

The API side runs in the test process (tests/workers/test_redis_engine.py's `running_stack`:
REST app and relay on Redis, no worker); the workers are subprocesses sending to the fake,
which runs in a process of its own (tests/campaigns/graph_server.py) and records every send.
Everything is built through public surfaces: organization and keys through the services the
CLI uses, the channel and the campaign over REST, the APPROVED template as a platform sync
stores it (tests/campaigns/test_campaign_live.py), contacts in bulk by one INSERT … SELECT
(as bench/scale.py seeds: 5,000 REST requests would take most of a test's budget, and the
campaign depends on nothing of a contact beyond its row).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Select, String, cast, func, insert, literal, literal_column, select

from app.campaigns.models import CampaignRecipient
from app.campaigns.service import DISPATCH_ACTOR
from app.contacts.models import Contact
from app.core.clock import utcnow
from app.kit.outbox_models import OutboxJob
from tests.campaigns.conftest import CAMPAIGNS, campaign_body
from tests.campaigns.graph_server import PHONE_NUMBERS_PATH, SENDS_PATH
from tests.campaigns.test_campaign_live import TOKEN, approved_live_template
from tests.conftest import Tenant
from tests.templates.conftest import create_channel
from tests.webhooks.test_delivery_engine import Engine
from tests.workers.test_redis_engine import worker_env
from tests.workers.worker_process import REPO_DIR, free_port

Check = Callable[[], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class Send:
    """One send the fake Graph API recorded."""

    to: str
    message_id: str


class GraphProcess:
    """The fake Graph API in its own process, and the sends it recorded so far."""

    def __init__(self, token: str = TOKEN) -> None:
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        self.sent: list[Send] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.campaigns.graph_server", token, str(port)],
            cwd=REPO_DIR,
        )
        self._client = httpx.Client(base_url=self.base_url, timeout=10)

    def wait_ready(self, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"fake Graph API exited with {self.process.returncode}")
            with contextlib.suppress(httpx.TransportError):
                self._client.get(SENDS_PATH, params={"after": 0}).raise_for_status()
                return
            time.sleep(0.05)
        raise AssertionError(f"fake Graph API not ready in {seconds:g} s")

    def refresh(self) -> list[Send]:
        """Fetch the sends recorded since the last call; answers all of them."""
        response = self._client.get(SENDS_PATH, params={"after": len(self.sent)})
        response.raise_for_status()
        self.sent.extend(Send(str(to), str(message_id)) for to, message_id in response.json())
        return self.sent

    def add_phone_number(self, phone_number_id: str) -> None:
        """A number the fake's token may read (what a live channel is verified with)."""
        response = self._client.post(PHONE_NUMBERS_PATH, json={"id": phone_number_id})
        response.raise_for_status()

    def stop(self) -> None:
        self._client.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


@contextlib.contextmanager
def running_graph_process(token: str = TOKEN) -> Iterator[GraphProcess]:
    graph = GraphProcess(token)
    try:
        graph.wait_ready()
        yield graph
    finally:
        graph.stop()


@dataclass
class LiveCampaign:
    """A launched-or-draft live campaign and its audience."""

    stack: Engine
    graph: GraphProcess
    tenant: Tenant
    campaign_id: str
    phones: set[str]
    # Index into the fake's records where this campaign's sends start (the fake is shared).
    first_message: int = 0

    @property
    def url(self) -> str:
        return f"{CAMPAIGNS}/{self.campaign_id}"

    async def get(self) -> dict[str, Any]:
        response = await self.stack.client.get(self.url, headers=self.tenant.headers)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def launch(self) -> dict[str, Any]:
        self.first_message = len(await asyncio.to_thread(self.graph.refresh))
        response = await self.stack.client.post(f"{self.url}/launch", headers=self.tenant.headers)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def sends(self) -> list[Send]:
        """What the fake recorded for this campaign's audience, in arrival order."""
        recorded = await asyncio.to_thread(self.graph.refresh)
        return [send for send in recorded[self.first_message :] if send.to in self.phones]

    async def ledger(self) -> dict[str, CampaignRecipient]:
        """The recipient ledger by phone number (read-only; REST has no per-recipient read)."""
        async with self.stack.sessionmaker() as session:
            rows = await session.scalars(
                select(CampaignRecipient).where(CampaignRecipient.campaign_id == self.campaign_id)
            )
            return {row.phone_number: row for row in rows.all()}

    async def ledger_statuses(self) -> dict[str, int]:
        async with self.stack.sessionmaker() as session:
            rows = await session.execute(
                select(CampaignRecipient.status, func.count())
                .where(CampaignRecipient.campaign_id == self.campaign_id)
                .group_by(CampaignRecipient.status)
            )
            return {status: int(count) for status, count in rows.all()}

    async def dispatch_jobs(self) -> list[OutboxJob]:
        """The campaign's dispatch job rows still in the outbox (none once it finished)."""
        async with self.stack.sessionmaker() as session:
            rows = await session.scalars(select(OutboxJob).where(OutboxJob.actor == DISPATCH_ACTOR))
            return [row for row in rows.all() if row.args == [self.campaign_id]]


async def seed_contacts(stack: Engine, tenant: Tenant, area: str, count: int) -> list[str]:
    """`count` contacts "Person <n>" with phone numbers +1<area><n, 7 digits>, in one
    INSERT … SELECT; answers the phone numbers."""
    number = func.generate_series(0, count - 1).table_valued("n").render_derived()
    digits = cast(number.c.n, String)
    now = utcnow()
    rows: Select[Any] = select(
        cast(func.gen_random_uuid(), String),
        literal(tenant.organization_id),
        literal(f"+1{area}") + func.lpad(digits, 7, "0"),
        literal("Person ") + digits,
        literal_column("'[]'::jsonb"),
        literal(now),
        literal(now),
    )
    columns = ["id", "organization_id", "phone_number", "name", "tags", "created_at", "updated_at"]
    async with stack.sessionmaker() as session:
        await session.execute(insert(Contact).from_select(columns, rows))
        await session.commit()
    return [f"+1{area}{index:07d}" for index in range(count)]


async def draft_live_campaign(
    stack: Engine, graph: GraphProcess, area: str, count: int, phone_number_id: str
) -> LiveCampaign:
    """An organization with a live channel (the fake's token, 1,000 messages/s), an APPROVED
    live template, `count` contacts in area code `area`, and a draft campaign to all of them."""
    organization = await stack.tenants.organization("Resilient")
    live = await stack.tenants.key(organization, ["full_access"], livemode=True)
    graph.add_phone_number(phone_number_id)
    channel = await create_channel(stack.client, live, phone_number_id=phone_number_id)
    # The channel's full budget: at the default 80 messages/s the sends alone would take 60 s.
    paced = await stack.client.put(
        f"/api/v1/channels/{channel['id']}",
        json={"messages_per_second": 1000},
        headers=live.headers,
    )
    assert paced.status_code == 200, paced.text
    template = await approved_live_template(stack.sessionmaker, live, channel["id"])
    phones = await seed_contacts(stack, live, area, count)
    created = await stack.client.post(
        CAMPAIGNS, json=campaign_body(channel, template), headers=live.headers
    )
    assert created.status_code == 201, created.text
    return LiveCampaign(stack, graph, live, created.json()["id"], set(phones))


def live_worker_env(
    database_url: str, redis_url: str, tmp_path: Path, graph: GraphProcess, **overrides: Any
) -> dict[str, str]:
    """tests/workers/test_redis_engine.py's worker environment, sending to the fake."""
    return worker_env(
        database_url, redis_url, tmp_path, SWITCHBOARD_GRAPH_API_URL=graph.base_url, **overrides
    )


async def wait_until(check: Check, seconds: float, what: str, interval: float = 0.02) -> None:
    """Poll `check` until it holds; fail naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {seconds:g} s")
        await asyncio.sleep(interval)


async def wait_for_sends(campaign: LiveCampaign, count: int, seconds: float) -> int:
    """Until the fake recorded at least `count` sends of the campaign; answers how many."""

    async def enough() -> bool:
        return len(await campaign.sends()) >= count

    await wait_until(enough, seconds, f"{count} sends recorded by the fake Graph API")
    return len(await campaign.sends())


async def wait_for_completion(
    campaign: LiveCampaign,
    seconds: float,
    next_run_within: float,
    log_tail: Callable[[], str] = str,
) -> None:
    """Until the campaign is `completed` and its dispatch job has left the outbox (so no
    late send can follow). Fails at once, naming the cause, when the engine puts the next
    dispatch run more than `next_run_within` seconds ahead (e.g. a reconciliation of stale
    claims that ignores the configured staleness)."""
    deadline = time.monotonic() + seconds
    while True:
        body = await campaign.get()
        jobs = await campaign.dispatch_jobs()
        if body["status"] == "completed" and not jobs:
            return
        bound = utcnow().timestamp() + next_run_within
        late = [job for job in jobs if job.available_at.timestamp() > bound]
        if late or time.monotonic() > deadline:
            statuses = await campaign.ledger_statuses()
            detail = ", ".join(
                f"job available_at={job.available_at.isoformat()} starts={job.starts}"
                f" locked_until={job.locked_until} last_error={job.last_error!r}"
                for job in jobs
            )
            reason = (
                f"the engine put the next dispatch run over {next_run_within:g} s ahead"
                if late
                else f"not completed in {seconds:g} s"
            )
            raise AssertionError(
                f"campaign {body['status']}: {reason}; ledger {statuses}; counters"
                f" sent={body['sent_count']} failed={body['failed_count']}; dispatch jobs:"
                f" [{detail}]\n{log_tail()}"
            )
        await asyncio.sleep(0.1)


def duplicates(sends: list[Send]) -> dict[str, int]:
    """Phones the fake received more than once, with their counts."""
    return {to: count for to, count in Counter(send.to for send in sends).items() if count > 1}
