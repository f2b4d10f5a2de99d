"""record_call_log: what the telephony side may write, and what it is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.calls.schemas import CallLogRecord
from app.calls.service import record_call_log
from app.kit.errors import InvalidInput, NotFound
from tests.calls.conftest import T0, CallLogFactory, Owner
from tests.conftest import Tenant, TenantFactory

BASIC: dict[str, Any] = {
    "call_id": "CA1",
    "from_number": "+14155550100",
    "to_number": "+14155550199",
    "direction": "inbound",
    "status": "completed",
}


async def record(
    sessionmaker: async_sessionmaker[AsyncSession], tenant: Tenant, **fields: Any
) -> None:
    async with sessionmaker() as session:
        await record_call_log(
            session, Owner(tenant.organization_id), CallLogRecord(**{**BASIC, **fields})
        )
        await session.commit()


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"from_number": "12"}, "from_number", "Invalid phone number format or length"),
        ({"to_number": "not a number"}, "to_number", "Invalid phone number format or length"),
        ({"agent_id": "agent-7"}, "agent_id", "agent_id must be a UUID"),
        (
            {"chat_phone_number_id": "x"},
            "chat_phone_number_id",
            "chat_phone_number_id must be a UUID",
        ),
        ({"contact_id": "x"}, "contact_id", "contact_id must be a UUID"),
        (
            {"started_at": T0, "ended_at": T0 - timedelta(seconds=1)},
            "ended_at",
            "ended_at cannot be before started_at",
        ),
    ],
)
async def test_invalid_values_are_refused(
    sessionmaker: async_sessionmaker[AsyncSession],
    acme: Tenant,
    fields: dict[str, Any],
    field: str,
    message: str,
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await record(sessionmaker, acme, **fields)
    assert (caught.value.field, caught.value.message) == (field, message)


@pytest.mark.parametrize(
    "fields",
    [
        {"direction": "sideways"},
        {"status": "ringing"},
        {"duration_seconds": -1},
        {"cost": -0.5},
        {"call_id": ""},
        {"started_at": datetime(2026, 1, 1)},  # naive
        {"transcript": [{"speaker": "robot", "text": "hi", "timestamp": 0}]},
        {"transcript": [{"speaker": "agent", "text": "hi", "timestamp": -1}]},
        {"transcript": [{"speaker": "agent", "text": "hi"}]},
        {"unknown_field": 1},
    ],
)
def test_record_shape_is_validated(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        CallLogRecord(**{**BASIC, **fields})


async def test_contact_of_another_organization_is_not_found(
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    acme: Tenant,
    globex: Tenant,
) -> None:
    response = await client.post(
        "/api/v1/contacts",
        json={"phone_number": "+14155550100", "name": "Globex person"},
        headers=globex.headers,
    )
    with pytest.raises(NotFound):
        await record(sessionmaker, acme, contact_id=response.json()["id"])


async def test_times_are_stored_in_utc_and_mode_follows_the_owner(
    client: httpx.AsyncClient, acme: Tenant, calls: CallLogFactory, tenants: TenantFactory
) -> None:
    paris = timezone(timedelta(hours=1))
    recorded = await calls.record(
        acme,
        livemode=True,
        started_at=datetime(2026, 11, 1, 10, 0, tzinfo=paris),
        ended_at=datetime(2026, 11, 1, 10, 2, tzinfo=paris),
    )
    assert recorded["started_at"] == "2026-11-01T09:00:00Z"
    assert recorded["ended_at"] == "2026-11-01T09:02:00Z"
    assert recorded["livemode"] is True
    live = await tenants.key(acme, ["calls:read"], livemode=True)
    fetched = await client.get(f"/api/v1/call-logs/{recorded['id']}", headers=live.headers)
    assert fetched.json() == recorded


async def test_started_at_defaults_to_now(acme: Tenant, calls: CallLogFactory) -> None:
    before = datetime.now(UTC)
    recorded = await calls.record(acme, started_at=None)
    started = datetime.fromisoformat(recorded["started_at"].replace("Z", "+00:00"))
    assert before - timedelta(seconds=1) <= started <= datetime.now(UTC)
