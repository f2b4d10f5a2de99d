"""Every query on campaigns and their recipient ledger. Requests go through the
organization-scoped repository; the dispatch job (which holds a campaign id written by a
scoped request) and platform status callbacks use the module functions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    ColumnElement,
    and_,
    case,
    exists,
    func,
    insert,
    literal,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.types import String

from app.campaigns.models import (
    AudienceType,
    Campaign,
    CampaignRecipient,
    RecipientStatus,
)
from app.contacts.models import Contact
from app.kit.pagination import NumberedPage, PageParams
from app.kit.repository import OrgScopedRepository

# Ledger statuses that count as "handed to the platform".
_SENT_OR_LATER = (
    RecipientStatus.SENT.value,
    RecipientStatus.DELIVERED.value,
    RecipientStatus.READ.value,
)
_DELIVERED_OR_LATER = (RecipientStatus.DELIVERED.value, RecipientStatus.READ.value)
_SETTLED = (*_SENT_OR_LATER, RecipientStatus.FAILED.value)


class CampaignRepository(OrgScopedRepository[Campaign]):
    model = Campaign
    resource = "Campaign"
    list_columns: ClassVar = tuple(Campaign.__table__.columns)

    async def numbered_page(
        self, params: PageParams, *, status: str | None, test_mode_only: bool
    ) -> NumberedPage[Any]:
        conditions: list[ColumnElement[bool]] = [Campaign.organization_id == self.organization_id]
        if status is not None:
            conditions.append(Campaign.status == status)
        if test_mode_only:
            conditions.append(Campaign.livemode.is_(False))
        total = await self.session.scalar(
            select(func.count()).select_from(Campaign).where(*conditions)
        )
        rows = await self.session.execute(
            select(*self.list_columns)
            .where(*conditions)
            .order_by(Campaign.created_at.desc(), Campaign.id.desc())
            .limit(params.size)
            .offset(params.offset)
        )
        return NumberedPage(list(rows.all()), int(total or 0), params)

    async def contacts_outside(self, contact_ids: Sequence[str]) -> list[str]:
        """The ids of `contact_ids` that are not contacts of this organization."""
        found = await self.session.scalars(
            select(Contact.id).where(
                Contact.organization_id == self.organization_id, Contact.id.in_(contact_ids)
            )
        )
        present = set(found.all())
        return [contact_id for contact_id in contact_ids if contact_id not in present]

    async def resolve_audience(self, campaign: Campaign) -> int:
        """Write the campaign's ledger: one pending row per contact of its audience, in one
        INSERT … SELECT (the contacts never travel through Python). Answers the row count."""
        source = select(
            literal(campaign.id, String()).label("campaign_id"),
            Contact.id,
            Contact.phone_number,
            Contact.name,
            Contact.custom_fields,
            literal(RecipientStatus.PENDING.value, String()).label("status"),
        ).where(Contact.organization_id == self.organization_id)
        if campaign.audience_type == AudienceType.TAGS:
            source = source.where(self._has_any_tag(list(campaign.audience_tags or [])))
        elif campaign.audience_type == AudienceType.MANUAL:
            source = source.where(Contact.id.in_(list(campaign.audience_contact_ids or [])))
        result = await self.session.execute(
            insert(CampaignRecipient).from_select(
                ["campaign_id", "contact_id", "phone_number", "name", "custom_fields", "status"],
                source,
            )
        )
        return int(result.rowcount or 0)  # type: ignore[attr-defined]

    def _has_any_tag(self, tags: list[str]) -> ColumnElement[bool]:
        if self.dialect_name == "postgresql":
            # jsonb ?| text[]: any of the tags is an element of the array.
            has_any: ColumnElement[bool] = type_coerce(Contact.tags, JSONB).has_any(
                literal(tags, ARRAY(String()))
            )
            return has_any
        each: Any = func.json_each(Contact.tags).table_valued("value")
        return exists(select(1).select_from(each).where(each.c.value.in_(tags)))


async def campaign_by_id(session: AsyncSession, campaign_id: str) -> Campaign | None:
    """For the dispatch job, which holds only an id (written by a scoped request)."""
    return await session.get(Campaign, campaign_id, populate_existing=True)


async def pending_batch(session: AsyncSession, campaign_id: str, size: int) -> list[str]:
    """The next `size` pending recipients (contact ids) of the campaign, in contact order."""
    rows = await session.scalars(
        select(CampaignRecipient.contact_id)
        .where(
            CampaignRecipient.campaign_id == campaign_id,
            CampaignRecipient.status == RecipientStatus.PENDING.value,
        )
        .order_by(CampaignRecipient.contact_id)
        .limit(size)
    )
    return list(rows.all())


async def claim(
    session: AsyncSession, campaign_id: str, contact_ids: Sequence[str], now: datetime
) -> list[Any]:
    """pending → claimed for those of `contact_ids` still pending, in one UPDATE … RETURNING;
    answers the rows this call claimed. A concurrent run that claimed first leaves them out,
    so no recipient is sent twice."""
    recipient = CampaignRecipient
    result = await session.execute(
        update(recipient)
        .where(
            recipient.campaign_id == campaign_id,
            recipient.contact_id.in_(contact_ids),
            recipient.status == RecipientStatus.PENDING.value,
        )
        .values(status=RecipientStatus.CLAIMED.value, claimed_at=now)
        .returning(
            recipient.contact_id, recipient.phone_number, recipient.name, recipient.custom_fields
        )
        .execution_options(synchronize_session=False)
    )
    return sorted(result.all(), key=lambda row: row.contact_id)


async def refresh_counters(session: AsyncSession, campaign_id: str) -> None:
    """Set the campaign's counters from its ledger, in one statement: they cannot drift."""
    recipient = CampaignRecipient

    def counted(statuses: Sequence[str]) -> Any:
        return (
            select(func.count())
            .where(recipient.campaign_id == campaign_id, recipient.status.in_(statuses))
            .scalar_subquery()
        )

    # The campaign row's lock orders concurrent callbacks: the UPDATE after it counts with
    # a snapshot that includes every ledger change committed before the lock was granted.
    await session.execute(select(Campaign.id).where(Campaign.id == campaign_id).with_for_update())
    await session.execute(
        update(Campaign)
        .where(Campaign.id == campaign_id)
        .values(
            sent_count=counted(_SENT_OR_LATER),
            delivered_count=counted(_DELIVERED_OR_LATER),
            read_count=counted((RecipientStatus.READ.value,)),
            failed_count=counted((RecipientStatus.FAILED.value,)),
        )
        .execution_options(synchronize_session=False)
    )


async def unsettled_count(session: AsyncSession, campaign_id: str) -> int:
    """Recipients neither handed to the platform nor failed (pending or claimed)."""
    count = await session.scalar(
        select(func.count()).where(
            CampaignRecipient.campaign_id == campaign_id,
            CampaignRecipient.status.not_in(_SETTLED),
        )
    )
    return int(count or 0)


async def oldest_claim(session: AsyncSession, campaign_id: str) -> datetime | None:
    """When the longest-waiting claimed recipient was claimed (None: none is claimed)."""
    oldest: datetime | None = await session.scalar(
        select(func.min(CampaignRecipient.claimed_at)).where(
            CampaignRecipient.campaign_id == campaign_id,
            CampaignRecipient.status == RecipientStatus.CLAIMED.value,
        )
    )
    return oldest


async def fail_stale_claims(
    session: AsyncSession, campaign_id: str, claimed_before: datetime, reason: str, now: datetime
) -> list[str]:
    """claimed → failed for claims older than `claimed_before`; answers their contact ids."""
    result = await session.execute(
        update(CampaignRecipient)
        .where(
            CampaignRecipient.campaign_id == campaign_id,
            CampaignRecipient.status == RecipientStatus.CLAIMED.value,
            CampaignRecipient.claimed_at < claimed_before,
        )
        .values(status=RecipientStatus.FAILED.value, error=reason, failed_at=now)
        .returning(CampaignRecipient.contact_id)
        .execution_options(synchronize_session=False)
    )
    return [row.contact_id for row in result.all()]


async def recipient_by_message_id(
    session: AsyncSession, platform_message_id: str
) -> CampaignRecipient | None:
    return await session.scalar(
        select(CampaignRecipient).where(
            CampaignRecipient.platform_message_id == platform_message_id
        )
    )


# Forward-only status moves of a recipient after the send.
_RANK = case(
    {
        RecipientStatus.SENT.value: 1,
        RecipientStatus.DELIVERED.value: 2,
        RecipientStatus.READ.value: 3,
        RecipientStatus.FAILED.value: 4,
    },
    value=CampaignRecipient.status,
    else_=0,
)


def moves_forward(status: str) -> ColumnElement[bool]:
    ranks = {"sent": 1, "delivered": 2, "read": 3, "failed": 4}
    return and_(ranks[status] > _RANK, CampaignRecipient.status != RecipientStatus.FAILED.value)
