"""Every query on message templates. Requests go through the organization-scoped repository;
platform callbacks (which name a business account, not an organization) through
`templates_for_platform_id`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.kit.pagination import NumberedPage, PageParams
from app.kit.repository import OrgScopedRepository
from app.templates.models import MessageTemplate, TemplateStatus
from app.templates.schemas import TEMPLATE

_DUPLICATE_MARKERS = ("uq_message_templates_organization_id", "message_templates.name")


class TemplateRepository(OrgScopedRepository[MessageTemplate]):
    model = MessageTemplate
    resource = "Template"
    moded = True
    list_columns: ClassVar = TEMPLATE.columns(
        MessageTemplate.livemode, MessageTemplate.platform_event_times
    )

    async def numbered_page(self, params: PageParams) -> NumberedPage[Any]:
        total = await self._execute(
            select(func.count()).select_from(MessageTemplate).where(self._org_bound())
        )
        rows = await self._execute(
            select(*self.list_columns)
            .where(self._org_bound())
            .order_by(MessageTemplate.created_at.desc(), MessageTemplate.id.desc())
            .limit(params.size)
            .offset(params.offset)
        )
        return NumberedPage(list(rows.all()), int(total.scalar() or 0), params)

    async def approved(
        self, business_account_id: str, name: str, language: str | None
    ) -> MessageTemplate | None:
        """An APPROVED template of the business account by name (and language, if given;
        without one, any of the name's languages)."""
        statement = self.scoped(select(MessageTemplate)).where(
            MessageTemplate.business_account_id == business_account_id,
            MessageTemplate.name == name,
            MessageTemplate.status == TemplateStatus.APPROVED.value,
        )
        if language:
            statement = statement.where(MessageTemplate.language == language)
        return (await self._execute(statement)).scalars().first()

    async def for_account(self, business_account_id: str) -> list[MessageTemplate]:
        rows = await self._execute(
            self.scoped(select(MessageTemplate)).where(
                MessageTemplate.business_account_id == business_account_id
            )
        )
        return list(rows.scalars().all())

    @staticmethod
    def is_duplicate(exc: IntegrityError) -> bool:
        message = str(exc.orig)
        return any(marker in message for marker in _DUPLICATE_MARKERS)


async def template_by_id(session: AsyncSession, template_id: str) -> MessageTemplate | None:
    """For the submission job, which holds only an id (written by a scoped request)."""
    return await session.get(MessageTemplate, template_id)


async def templates_for_platform_id(
    session: AsyncSession,
    business_account_id: str,
    platform_template_id: str,
    name: str,
    language: str,
) -> Sequence[MessageTemplate]:
    """The templates a platform callback is about, in every organization that holds them:
    by the platform's id, else (not yet stored) by name and language."""
    rows = await session.scalars(
        select(MessageTemplate).where(
            MessageTemplate.business_account_id == business_account_id,
            MessageTemplate.platform_template_id == platform_template_id,
        )
    )
    found = list(rows.all())
    if found or not name:
        return found
    rows = await session.scalars(
        select(MessageTemplate).where(
            MessageTemplate.business_account_id == business_account_id,
            MessageTemplate.name == name,
            MessageTemplate.language == language,
        )
    )
    return list(rows.all())
