"""Test mode end to end through the job engine: a real Dramatiq worker (StubBroker on SQLite
and PostgreSQL, RedisBroker on PostgreSQL) runs the template submission and the simulator's
signed callbacks, which reach the same inbound handler as the platform's POSTs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.integrations.whatsapp import payloads
from tests.engine.fixtures import backend_fixture
from tests.templates.conftest import TEMPLATES, WABA, template_body
from tests.webhooks.test_delivery_engine import Engine, eventually, running_engine

PHONE_ID = "106540352242922"


backend = backend_fixture("wa")


@pytest.fixture
async def engine(backend: tuple[str, str | None], tmp_path: Path) -> AsyncIterator[Engine]:
    url, redis_url = backend
    async with running_engine(url, tmp_path, redis_url=redis_url) as running:
        yield running


async def test_template_and_message_lifecycle_in_test_mode(engine: Engine) -> None:
    tenant = await engine.tenants.organization()
    client = engine.client
    channel = await client.post(
        "/api/v1/channels",
        json={
            "display_phone_number": "+14155550142",
            "phone_number_id": PHONE_ID,
            "business_account_id": WABA,
            "access_token": "EAAGtest-token",
        },
        headers=tenant.headers,
    )
    channel_id = channel.json()["id"]
    good = await client.post(TEMPLATES, json=template_body(channel_id), headers=tenant.headers)
    bad = await client.post(
        TEMPLATES,
        json=template_body(
            channel_id,
            name="gappy",
            components=[
                {"type": "BODY", "text": "{{1}} then {{3}}", "example": {"body_text": [["a", "b"]]}}
            ],
        ),
        headers=tenant.headers,
    )
    assert (good.json()["status"], bad.json()["status"]) == ("PENDING", "PENDING")

    async def fetched(template_id: str) -> dict[str, Any]:
        response = await client.get(f"{TEMPLATES}/{template_id}", headers=tenant.headers)
        body: dict[str, Any] = response.json()
        return body

    async def settled() -> bool:
        approved = await fetched(good.json()["id"])
        rejected = await fetched(bad.json()["id"])
        return (approved["status"], approved["quality_score"], rejected["status"]) == (
            "APPROVED",
            "GREEN",
            "REJECTED",
        )

    await eventually(settled)
    assert (await fetched(good.json()["id"]))["platform_template_id"]
    assert "variables_out_of_order" in (await fetched(bad.json()["id"]))["rejected_reason"]

    # An inbound message (as the platform posts it), a reply, and the simulator's statuses.
    inbound = payloads.inbound_text(
        WABA, PHONE_ID, "+14155550142", "wamid.engine", "+14155550100", "hi"
    )
    raw = orjson.dumps(inbound)
    posted = await client.post(
        "/webhooks/whatsapp",
        content=raw,
        headers={
            payloads.SIGNATURE_HEADER: payloads.sign(
                engine.settings.whatsapp_app_secret_value(), raw
            )
        },
    )
    assert posted.status_code == 200
    tickets = (await client.get("/api/v1/inbox/tickets", headers=tenant.headers)).json()["data"]
    ticket_id = tickets[0]["id"]
    sent = await client.post(
        f"/api/v1/inbox/tickets/{ticket_id}/messages",
        json={"text": "Hello!"},
        headers=tenant.headers,
    )
    assert sent.status_code == 201, sent.text

    async def read() -> bool:
        listed = await client.get(
            f"/api/v1/inbox/tickets/{ticket_id}/messages", headers=tenant.headers
        )
        outbound = [m for m in listed.json()["data"] if m["direction"] == "outbound"]
        return outbound[0]["status"] == "read" and outbound[0]["delivered_at"] is not None

    await eventually(read)
