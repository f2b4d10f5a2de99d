"""Concurrent duplicates on a real PostgreSQL deployment: the unique keys decide, and the loser
gets 409, never a 500 and never a second row. Also the expansion on the deployment's read pool.

The usual tests share one rolled-back transaction, so two requests there can never race; here
the app owns its resources on a fresh, committed database.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from app.channels.models import Channel
from app.main import create_app
from app.quick_replies.models import QuickReply
from tests.conftest import Tenant, TenantFactory, fresh_database, make_settings
from tests.quick_replies.conftest import BASE, EXPAND

CHANNELS = "/api/v1/channels"


@pytest.fixture(scope="module")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fresh_database("postgresql", tmp_path_factory.mktemp("qr"), "sb_qr") as url:
        yield url


@pytest.fixture
async def deployment(
    pg_url: str, tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, Tenant]]:
    app = create_app(make_settings(pg_url, tmp_path))
    async with app.router.lifespan_context(app):
        tenant = await TenantFactory(app.state.resources.sessionmaker).organization("Race")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sb") as client:
            yield client, tenant


def inserts_meet_at_a_barrier(monkeypatch: pytest.MonkeyPatch, model: type[Any]) -> None:
    """Each request waits, inside its open transaction, until the other has reached its INSERT
    of `model` too: both pass every check before either writes."""
    barrier = asyncio.Barrier(2)
    original = AsyncSession.flush

    async def flush(self: AsyncSession, objects: Any = None) -> None:
        if any(isinstance(item, model) for item in self.new):
            await asyncio.wait_for(barrier.wait(), timeout=10)
        await original(self, objects)

    monkeypatch.setattr(AsyncSession, "flush", flush)


async def test_concurrent_duplicate_shortcut(
    deployment: tuple[httpx.AsyncClient, Tenant], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, tenant = deployment
    inserts_meet_at_a_barrier(monkeypatch, QuickReply)
    responses = await asyncio.gather(
        *(
            client.post(
                BASE, json={"shortcut": "/race", "content": f"#{n}"}, headers=tenant.headers
            )
            for n in range(2)
        )
    )
    assert sorted(response.status_code for response in responses) == [201, 409]
    loser = next(response for response in responses if response.status_code == 409)
    assert loser.json() == {"detail": "A quick reply with the shortcut '/race' already exists"}
    listed = (await client.get(BASE, headers=tenant.headers)).json()
    assert [item["shortcut"] for item in listed["data"]] == ["/race"]


async def test_concurrent_duplicate_channel(
    deployment: tuple[httpx.AsyncClient, Tenant], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, tenant = deployment
    inserts_meet_at_a_barrier(monkeypatch, Channel)
    body = {
        "display_phone_number": "+14155550142",
        "phone_number_id": "106540352242922",
        "business_account_id": "102290129340398",
        "access_token": "token",
    }
    responses = await asyncio.gather(
        *(client.post(CHANNELS, json=body, headers=tenant.headers) for _ in range(2))
    )
    assert sorted(response.status_code for response in responses) == [201, 409]
    listed = (await client.get(CHANNELS, headers=tenant.headers)).json()
    assert listed["total_count"] == 1


async def test_expansion_on_the_read_pool(deployment: tuple[httpx.AsyncClient, Tenant]) -> None:
    client, tenant = deployment

    async def expand(shortcut: str) -> Any:
        response = await client.post(
            "/graphql",
            json={"query": EXPAND, "variables": {"shortcut": shortcut}},
            headers=tenant.headers,
        )
        return response.json()["data"]["quickReplyExpansion"]

    assert await expand("/pool") is None
    created = await client.post(
        BASE, json={"shortcut": "/pool", "content": "From the pool"}, headers=tenant.headers
    )
    assert created.status_code == 201
    assert await expand("/pool") == "From the pool"
    url = f"{BASE}/{created.json()['id']}"
    await client.put(url, json={"content": "Changed"}, headers=tenant.headers)
    assert await expand("/pool") == "Changed"
