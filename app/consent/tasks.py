"""The consent domain's job: the confirmation reply to an opt-out or opt-in keyword."""

from __future__ import annotations

from datetime import datetime

import structlog

from app.access.scopes import Scope
from app.access.subject import PrincipalType, Subject
from app.consent.service import CONFIRM_ACTOR, CONFIRM_QUEUE
from app.conversations import service as conversations
from app.conversations.schemas import MessageSend
from app.jobs import Task, with_resources
from app.kit.errors import DomainError
from app.resources import Resources

logger = structlog.get_logger("switchboard.consent")


async def send_confirmation(
    resources: Resources, organization_id: str, livemode: bool, ticket_id: str, text: str
) -> datetime | None:
    """Through the conversation's send path (its channel, its send budget): a platform
    refusal is stored as a failed message there; a conversation gone since is logged."""
    subject = Subject(
        organization_id=organization_id,
        principal_id=conversations.PLATFORM_PRINCIPAL,
        principal_type=PrincipalType.API_KEY,
        scopes=frozenset({Scope.FULL_ACCESS}),
        livemode=livemode,
    )
    async with resources.session(writes=True) as session:
        try:
            await conversations.send_message(
                session, subject, resources, ticket_id, MessageSend(text=text)
            )
        except DomainError as exc:
            logger.warning("consent confirmation not sent", ticket_id=ticket_id, reason=exc.message)
            return None
        await session.commit()
    return None


TASKS = (Task(CONFIRM_ACTOR, CONFIRM_QUEUE, with_resources(send_confirmation)),)
