"""Agent ↔ phone number assignments: which agent answers the incoming calls of a number.

A number belongs to one organization in each mode (a unique key over number and mode
decides between concurrent assignments). A live assignment is verified with the carrier
first: the number must be one of the carrier account's incoming numbers (else 400). A
test-mode assignment never routes a live call (app/calls/telephony.py answers live calls from
live assignments only), so it never stands in a live one's way; like a test-mode channel, it is
refused for a number another organization holds live.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.agents.repository import AgentRepository
from app.agents.service import INVALID_ID_MESSAGE
from app.calls.models import AgentPhoneNumber
from app.calls.repository import PhoneNumberRepository, assignment_for_number
from app.calls.schemas import PhoneNumberAssign
from app.config import Settings
from app.core.ids import normalize_id
from app.integrations.telephony.base import CarrierError
from app.integrations.telephony.twilio import TwilioCarrier
from app.kit.errors import Conflict, DomainError, InvalidInput, LiveModeForbidden, NotFound
from app.kit.pagination import CursorPage, CursorParams
from app.kit.phone import to_e164

NUMBER_IN_USE = "Phone number is already in use"


class NumberNotVerified(InvalidInput):
    """The carrier account does not have the number (or no carrier is configured to ask)."""

    code = "phone_number_not_verified"


class CarrierFailure(DomainError):
    """The carrier could not answer the verification now."""

    code = "carrier_error"
    status = 502


async def assign_phone_number(
    session: AsyncSession, subject: Subject, data: PhoneNumberAssign, settings: Settings
) -> AgentPhoneNumber:
    """Route the number's incoming calls (in the subject's mode) to the agent; a number the
    organization already holds in that mode moves to the new agent. A number another
    organization holds is a conflict."""
    agent_id = normalize_id(data.agent_id.strip())
    if agent_id is None:
        raise InvalidInput(INVALID_ID_MESSAGE, field="agent_id")
    if await AgentRepository(session, subject).get_row(agent_id) is None:
        raise NotFound("Agent")
    phone_number = to_e164(data.phone_number, "phone_number")
    existing = await assignment_for_number(session, phone_number, livemode=subject.livemode)
    if existing is not None:
        if existing.organization_id != subject.organization_id:
            raise Conflict(NUMBER_IN_USE, field="phone_number")
        if existing.livemode and not subject.livemode:
            raise LiveModeForbidden(PhoneNumberRepository.resource)
        existing.agent_id = agent_id
        await session.flush()
        return existing
    if subject.livemode:
        await verify_with_carrier(settings, phone_number)
    else:
        live = await assignment_for_number(session, phone_number, livemode=True)
        if live is not None and live.organization_id != subject.organization_id:
            raise Conflict(NUMBER_IN_USE, field="phone_number")
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


async def verify_with_carrier(settings: Settings, phone_number: str) -> None:
    """The carrier account lists `phone_number` among its incoming numbers (Twilio's
    `GET /2010-04-01/Accounts/{Sid}/IncomingPhoneNumbers.json?PhoneNumber=…`)."""
    if not (settings.telephony_account_sid and settings.telephony_auth_token):
        raise NumberNotVerified(
            "No voice carrier is configured, so a live number cannot be verified",
            field="phone_number",
        )
    carrier = TwilioCarrier(
        settings.telephony_api_url,
        settings.telephony_account_sid,
        settings.telephony_auth_token,
        timeout=settings.telephony_timeout_seconds,
    )
    try:
        owned = await carrier.owns_number(phone_number)
    except CarrierError as exc:
        raise CarrierFailure(f"The voice carrier could not verify the number: {exc}") from exc
    finally:
        await carrier.aclose()
    if not owned:
        raise NumberNotVerified(
            f"{phone_number} is not one of the voice carrier account's numbers",
            field="phone_number",
        )


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
