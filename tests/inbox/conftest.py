"""Helpers for ticket tests: contacts to open tickets for, and the events tickets record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.events.models import Event
from tests.conftest import Tenant

TICKETS = "/api/v1/inbox/tickets"
TICKET_EVENTS = (
    "ticket.created",
    "ticket.assigned",
    "ticket.resolved",
    "conversation.started",
    "conversation.closed",
)


def org_headers(tenant: Tenant) -> dict[str, str]:
    """The credential plus the organization_id header ticket creation requires."""
    return {**tenant.headers, "organization_id": tenant.organization_id}


@dataclass
class Inbox:
    client: httpx.AsyncClient
    sessionmaker: async_sessionmaker[AsyncSession]

    async def contact(self, tenant: Tenant, name: str = "Ada Lovelace", **fields: Any) -> Any:
        body = {"phone_number": "+14155550100", "name": name, **fields}
        response = await self.client.post("/api/v1/contacts", json=body, headers=tenant.headers)
        assert response.status_code == 200, response.text
        return response.json()

    async def open(self, tenant: Tenant, contact_id: str, expected: int = 201) -> Any:
        response = await self.client.post(
            TICKETS, json={"contact_id": contact_id}, headers=org_headers(tenant)
        )
        assert response.status_code == expected, response.text
        return response.json()

    async def ticket(self, tenant: Tenant, name: str = "Ada Lovelace") -> Any:
        """A new open ticket for a new contact."""
        contact = await self.contact(tenant, name)
        return await self.open(tenant, contact["id"])

    async def events(self, tenant: Tenant) -> list[tuple[str, dict[str, Any]]]:
        """(type, data) of the organization's ticket and conversation events, oldest first."""
        async with self.sessionmaker() as session:
            rows = await session.execute(
                select(Event.type, Event.data)
                .where(
                    Event.organization_id == tenant.organization_id,
                    Event.type.in_(TICKET_EVENTS),
                )
                .order_by(Event.created_at, Event.id)
            )
            return [(row.type, row.data) for row in rows]


@pytest.fixture
def inbox(client: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession]) -> Inbox:
    return Inbox(client, sessionmaker)
