"""Call logs are recorded through the service (placing calls arrives with the voice issue)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.calls.schemas import CallLogRecord, call_log_to_public
from app.calls.service import record_call_log
from app.core.jsonutil import dumps, loads
from tests.conftest import Tenant

# A fixed origin keeps the newest-first order of the recorded calls explicit in each test.
T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Owner:
    organization_id: str
    livemode: bool = False


class CallLogFactory:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self.sessionmaker = sessionmaker

    async def record(
        self, tenant: Tenant, *, minutes: int = 0, livemode: bool = False, **fields: Any
    ) -> dict[str, Any]:
        """Records one call started `minutes` after T0; returns its REST shape (as JSON)."""
        values: dict[str, Any] = {
            "call_id": f"CA{uuid.uuid4().hex}",
            "from_number": "+14155550100",
            "to_number": "+14155550199",
            "direction": "outbound",
            "status": "completed",
            "started_at": T0 + timedelta(minutes=minutes),
            **fields,
        }
        async with self.sessionmaker() as session:
            call_log = await record_call_log(
                session, Owner(tenant.organization_id, livemode), CallLogRecord(**values)
            )
            await session.commit()
        return loads(dumps(call_log_to_public(call_log)))  # type: ignore[no-any-return]


@pytest.fixture
def calls(sessionmaker: async_sessionmaker[AsyncSession]) -> CallLogFactory:
    return CallLogFactory(sessionmaker)
