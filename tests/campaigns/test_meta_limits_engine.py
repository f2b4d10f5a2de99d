"""A recipient Meta holds back for its per-user marketing limit (131049) is sent again by
the real job engine: a Dramatiq worker (StubBroker on SQLite and PostgreSQL, RedisBroker on
PostgreSQL) runs the deferred-retry job the outbox sweep hands it, then the dispatch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from sqlalchemy import select

from app.campaigns.models import CampaignRecipient
from app.integrations.whatsapp import payloads
from tests.campaigns.conftest import CAMPAIGNS, simulated_campaign_body
from tests.campaigns.test_meta_limits import CHANNEL_NUMBER, HOOK, LIMITED
from tests.engine.fixtures import backend_fixture
from tests.templates.conftest import WABA
from tests.webhooks.test_delivery_engine import Engine, eventually, running_engine

backend = backend_fixture("meta_limits")


@pytest.fixture
async def engine(backend: tuple[str, str | None], tmp_path: Path) -> AsyncIterator[Engine]:
    url, redis_url = backend
    async with running_engine(
        url,
        tmp_path,
        redis_url=redis_url,
        campaign_deferral_seconds=1.0,
        campaign_deferral_max_retries=2,
    ) as running:
        yield running


async def test_deferred_recipient_is_sent_again_by_the_worker(engine: Engine) -> None:
    client = engine.client
    phone = "+14155550300"
    tenant = await engine.tenants.organization()
    body = await simulated_campaign_body(client, tenant, [phone], "Deferred", eventually)
    created = await client.post(CAMPAIGNS, json=body, headers=tenant.headers)
    campaign_id = created.json()["id"]
    await client.post(f"{CAMPAIGNS}/{campaign_id}/launch", headers=tenant.headers)

    async def recipient() -> CampaignRecipient:
        async with engine.sessionmaker() as session:
            found = await session.scalar(
                select(CampaignRecipient).where(CampaignRecipient.campaign_id == campaign_id)
            )
            assert found is not None
            return found

    async def first_sent() -> bool:
        return (await recipient()).platform_message_id is not None

    await eventually(first_sent, 20.0)
    first = (await recipient()).platform_message_id
    assert first is not None
    channel = (await client.get("/api/v1/channels", headers=tenant.headers)).json()["data"][0]
    held = payloads.message_status(
        WABA, channel["phone_number_id"], CHANNEL_NUMBER, first, phone, "failed", errors=LIMITED
    )
    raw = orjson.dumps(held)
    response = await client.post(
        HOOK,
        content=raw,
        headers={
            "Content-Type": "application/json",
            payloads.SIGNATURE_HEADER: payloads.sign(
                engine.settings.whatsapp_app_secret_value(), raw
            ),
        },
    )
    assert response.status_code == 200

    async def sent_again() -> bool:
        row = await recipient()
        return row.deferrals == 1 and row.platform_message_id not in (None, first)

    await eventually(sent_again, 20.0)

    async def completed() -> bool:
        found = (await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=tenant.headers)).json()
        return (found["status"], found["deferred_count"], found["failed_count"]) == (
            "completed",
            0,
            0,
        )

    await eventually(completed, 20.0)
