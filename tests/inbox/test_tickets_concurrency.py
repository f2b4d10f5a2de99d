"""The one-open-ticket rule under concurrent creates, on a committed database.

The `client` fixture runs every request inside one rolled-back transaction on one
connection, where nothing is concurrent. Here the app owns its engine and pool on a fresh
database, so each request has its own connection and transaction, as in production.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.access.scopes import Scope
from app.access.subject import PrincipalType, Subject
from app.db.engine import create_engine, create_sessionmaker
from app.events.models import Event
from app.inbox import service
from app.inbox.models import Ticket
from app.inbox.schemas import TicketCreate
from app.main import create_app
from tests.conftest import Tenant, TenantFactory, fresh_database, make_settings
from tests.inbox.conftest import TICKETS, org_headers

CONCURRENT_CREATES = 20


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def committed_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with fresh_database(request.param, tmp_path_factory.mktemp("inbox"), "sb_inbox") as url:
        yield url


@dataclass
class Deployment:
    backend: str
    client: httpx.AsyncClient
    sessionmaker: async_sessionmaker[AsyncSession]
    tenant: Tenant

    async def contact(self) -> str:
        response = await self.client.post(
            "/api/v1/contacts",
            json={"phone_number": "+14155550100", "name": "Ada"},
            headers=self.tenant.headers,
        )
        assert response.status_code == 200, response.text
        contact_id: str = response.json()["id"]
        return contact_id

    async def count(self, statement: object) -> int:
        async with self.sessionmaker() as session:
            return int((await session.execute(statement)).scalar_one())  # type: ignore[call-overload]


@pytest.fixture
async def deployment(committed_url: str, tmp_path: Path) -> AsyncIterator[Deployment]:
    backend = "postgresql" if committed_url.startswith("postgresql") else "sqlite"
    engine = create_engine(committed_url, pool_size=4)
    sessionmaker = create_sessionmaker(engine)
    tenant = await TenantFactory(sessionmaker).organization("Racers")
    app = create_app(make_settings(committed_url, tmp_path, db_pool_size=CONCURRENT_CREATES))
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://sb") as client:
                yield Deployment(backend, client, sessionmaker, tenant)
    finally:
        await engine.dispose()


async def test_simultaneous_creates_make_exactly_one_ticket(deployment: Deployment) -> None:
    contact_id = await deployment.contact()
    responses = await asyncio.gather(
        *(
            deployment.client.post(
                TICKETS, json={"contact_id": contact_id}, headers=org_headers(deployment.tenant)
            )
            for _ in range(CONCURRENT_CREATES)
        )
    )
    statuses = Counter(response.status_code for response in responses)
    assert statuses == {201: 1, 200: CONCURRENT_CREATES - 1}, [r.text for r in responses]
    assert len({response.json()["id"] for response in responses}) == 1
    tickets = select(func.count()).select_from(Ticket).where(Ticket.contact_id == contact_id)
    assert await deployment.count(tickets) == 1
    created_events = (
        select(func.count())
        .select_from(Event)
        .where(
            Event.organization_id == deployment.tenant.organization_id,
            Event.type.in_(["ticket.created", "conversation.started"]),
        )
    )
    assert await deployment.count(created_events) == 2


async def _until_a_backend_waits_on_a_lock(deployment: Deployment) -> None:
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    deadline = asyncio.get_running_loop().time() + 10
    while await deployment.count(waiting) == 0:
        assert asyncio.get_running_loop().time() < deadline, "the second insert never waited"
        await asyncio.sleep(0.02)


async def test_a_create_that_loses_the_race_returns_the_winners_ticket(
    deployment: Deployment,
) -> None:
    """Deterministic version of the race: the loser passed the "no open ticket" check before
    the winner committed, so only the partial unique index stops its insert."""
    if deployment.backend != "postgresql":
        pytest.skip("SQLite writers take the database lock up front: no two creates overlap")
    contact_id = await deployment.contact()
    tenant = deployment.tenant
    subject = Subject(
        tenant.organization_id,
        tenant.key_id,
        PrincipalType.API_KEY,
        frozenset({Scope.FULL_ACCESS}),
        livemode=False,
    )
    data = TicketCreate.model_validate({"contact_id": contact_id})
    async with deployment.sessionmaker() as winner, deployment.sessionmaker() as loser:
        won = await service.create_ticket(winner, subject, data)  # inserted, not committed
        losing = asyncio.create_task(service.create_ticket(loser, subject, data))
        # Its check found nothing committed, so it inserted and now waits on the index.
        await _until_a_backend_waits_on_a_lock(deployment)
        assert not losing.done()
        await winner.commit()
        lost = await asyncio.wait_for(losing, timeout=10)
        await loser.commit()
    assert won.created is True
    assert lost.created is False
    assert lost.ticket == won.ticket
    tickets = select(func.count()).select_from(Ticket).where(Ticket.contact_id == contact_id)
    assert await deployment.count(tickets) == 1
    created_events = (
        select(func.count())
        .select_from(Event)
        .where(Event.organization_id == tenant.organization_id, Event.type == "ticket.created")
    )
    assert await deployment.count(created_events) == 1
