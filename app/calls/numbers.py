"""Agent ↔ phone number assignments: which agent answers the incoming calls of a number."""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.agents.repository import AgentRepository
from app.agents.service import INVALID_ID_MESSAGE
from app.auth.subject import Subject
from app.calls.models import AgentPhoneNumber
from app.calls.repository import PhoneNumberRepository, assignment_for_number
from app.calls.schemas import PhoneNumberAssign
from app.kit.errors import Conflict, InvalidInput, LiveModeForbidden, NotFound
from app.kit.ids import normalize_id
from app.kit.pagination import CursorPage, CursorParams
from app.kit.phone import to_e164

NUMBER_IN_USE = "Phone number is already in use"


async def assign_phone_number(
    session: AsyncSession, subject: Subject, data: PhoneNumberAssign
) -> AgentPhoneNumber:
    """Route the number's incoming calls to the agent; a number of this organization already
    assigned moves to the new agent. A number another organization holds is a conflict."""
    agent_id = normalize_id(data.agent_id.strip())
    if agent_id is None:
        raise InvalidInput(INVALID_ID_MESSAGE, field="agent_id")
    if await AgentRepository(session, subject).get_row(agent_id) is None:
        raise NotFound("Agent")
    phone_number = to_e164(data.phone_number, "phone_number")
    existing = await assignment_for_number(session, phone_number)
    if existing is not None:
        if existing.organization_id != subject.organization_id:
            raise Conflict(NUMBER_IN_USE, field="phone_number")
        if existing.livemode and not subject.livemode:
            raise LiveModeForbidden(PhoneNumberRepository.resource)
        existing.agent_id = agent_id
        await session.flush()
        return existing
    assignment = AgentPhoneNumber(
        organization_id=subject.organization_id,
        agent_id=agent_id,
        phone_number=phone_number,
        livemode=subject.livemode,
    )
    try:
        async with session.begin_nested():  # a concurrent assignment of the number won
            PhoneNumberRepository(session, subject).add(assignment)
            await session.flush()
    except IntegrityError as exc:
        raise Conflict(NUMBER_IN_USE, field="phone_number") from exc
    return assignment


async def list_phone_numbers(
    session: AsyncSession, subject: Subject, params: CursorParams
) -> CursorPage[Any]:
    return await PhoneNumberRepository(session, subject).cursor_page(params)


async def unassign_phone_number(session: AsyncSession, subject: Subject, assignment_id: str) -> str:
    repository = PhoneNumberRepository(session, subject)
    assignment = await repository.get_or_404(assignment_id)
    removed = assignment.id
    await repository.delete(assignment)
    await session.flush()
    return removed
