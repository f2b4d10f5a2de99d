"""Every query on campaigns and their recipient ledger. Requests go through the
organization-scoped repository; the dispatch job (which holds a campaign id written by a
scoped request) and platform status callbacks use the module functions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, cast

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
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
from sqlalchemy.types import String, Text

from app.campaigns.models import (
    AudienceType,
    Campaign,
    CampaignRecipient,
    CampaignStatus,
    RecipientStatus,
)
from app.campaigns.schemas import CAMPAIGN, RECIPIENT
from app.contacts.models import Contact
from app.db import lists
from app.kit.pagination import NumberedPage, PageParams
from app.kit.repository import OrgScopedRepository

# What a progress snapshot reads (campaignProgress re-reads it while the campaign runs).
PROGRESS_COLUMNS = (
    Campaign.id,
    Campaign.status,
    Campaign.total_contacts_count,
    Campaign.sent_count,
    Campaign.delivered_count,
    Campaign.read_count,
    Campaign.failed_count,
    Campaign.started_at,
    Campaign.completed_at,
)


class CampaignRepository(OrgScopedRepository[Campaign]):
    model = Campaign
    resource = "Campaign"
    moded = True
    # The shape's columns, then the rest of the row (progress snapshots read its times).
    list_columns: ClassVar = CAMPAIGN.columns(
        Campaign.livemode, Campaign.started_at, Campaign.completed_at
    )

    async def numbered_page(self, params: PageParams, *, status: str | None) -> NumberedPage[Any]:
        conditions: list[ColumnElement[bool]] = [self._org_bound()]
        if status is not None:
            conditions.append(Campaign.status == status)
        total = await self._execute(select(func.count()).select_from(Campaign).where(*conditions))
        rows = await self._execute(
            select(*self.list_columns)
            .where(*conditions)
            .order_by(Campaign.created_at.desc(), Campaign.id.desc())
            .limit(params.size)
            .offset(params.offset)
        )
        return NumberedPage(list(rows.all()), int(total.scalar() or 0), params)

    async def first_on_channel(self, channel_id: str, statuses: Sequence[str]) -> Any | None:
        """The oldest campaign (name, status) of the channel in one of `statuses`."""
        rows = await self._execute(
            self.scoped(select(Campaign.name, Campaign.status))
            .where(Campaign.chat_phone_number_id == channel_id, Campaign.status.in_(statuses))
            .order_by(Campaign.created_at)
            .limit(1)
        )
        return rows.first()

    async def progress_row(self, campaign_id: str) -> Any | None:
        """The campaign's status and counters by primary key (None once it is gone)."""
        rows = await self._execute(
            self.scoped(select(*PROGRESS_COLUMNS)).where(Campaign.id == campaign_id)
        )
        return rows.first()

    async def contacts_outside(self, contact_ids: Sequence[str]) -> list[str]:
        """The ids of `contact_ids` that are not contacts of this organization."""
        found = await self._execute(
            self.scoped(select(Contact.id), Contact).where(Contact.id.in_(contact_ids))
        )
        present = set(found.scalars().all())
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
        ).where(*self._audience(campaign))
        # In contact id order: the ledger's indexes (all led by the campaign and ordered by
        # contact id) then grow at their right edge instead of splitting pages everywhere.
        source = source.order_by(Contact.id)
        # The table's Core insert: given parameters (the tenant's), an ORM insert would take
        # them for rows to insert.
        result = await self._execute(
            insert(cast(Table, CampaignRecipient.__table__)).from_select(
                ["campaign_id", "contact_id", "phone_number", "name", "custom_fields", "status"],
                source,
            )
        )
        return int(result.rowcount or 0)  # type: ignore[attr-defined]

    def _audience(self, campaign: Campaign) -> list[ColumnElement[bool]]:
        """The contacts of the campaign's audience, as conditions on Contact."""
        conditions = [
            self._org_bound(Contact),
            # Contacts who opted out of marketing are never recipients (docs/api.md, "Consent").
            Contact.marketing_opt_out_at.is_(None),
        ]
        if campaign.audience_type == AudienceType.TAGS:
            conditions.append(self._has_any_tag(list(campaign.audience_tags or [])))
        elif campaign.audience_type == AudienceType.MANUAL:
            conditions.append(Contact.id.in_(list(campaign.audience_contact_ids or [])))
        return conditions

    async def audience_prefixes(self, campaign: Campaign, length: int) -> list[tuple[str, int]]:
        """How many contacts of the audience as it stands have numbers starting with each
        `length`-character prefix (a launch would resolve these)."""
        prefix = func.substr(Contact.phone_number, 1, length)
        rows = await self._execute(
            select(prefix, func.count()).where(*self._audience(campaign)).group_by(prefix)
        )
        return [(str(value or ""), int(count)) for value, count in rows.all()]

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


async def campaign_status(session: AsyncSession, campaign_id: str) -> str | None:
    """The campaign's status alone: the dispatch run's cheap check for a pause or cancel."""
    status: str | None = await session.scalar(
        select(Campaign.status).where(Campaign.id == campaign_id)
    )
    return status


def _dialect(session: AsyncSession) -> str:
    return session.get_bind().dialect.name


# What a claim hands the sender, and what a settle hands the events.
_CLAIMED_COLUMNS = (
    CampaignRecipient.contact_id,
    CampaignRecipient.phone_number,
    CampaignRecipient.name,
    CampaignRecipient.custom_fields,
)
_SETTLED_COLUMNS = RECIPIENT.rest_columns()


async def claim_pending(
    session: AsyncSession, campaign_id: str, limit: int, now: datetime, after: str | None = None
) -> list[Any]:
    """pending → claimed for up to `limit` recipients, in one UPDATE … RETURNING, and only
    while the campaign is `sending` (a pause or cancel committed before it claims nothing).
    On PostgreSQL concurrent runs skip each other's rows (FOR UPDATE SKIP LOCKED); a row is
    claimed by one run only, so no recipient is sent twice.

    `after` (the last contact id this run claimed) starts the index scan past the rows the
    run already moved, whose dead `pending` index entries would otherwise be walked again by
    every claim until a vacuum."""
    recipient = CampaignRecipient
    pending = (
        select(recipient.contact_id)
        .where(
            recipient.campaign_id == campaign_id,
            recipient.status == RecipientStatus.PENDING.value,
            exists().where(
                Campaign.id == campaign_id, Campaign.status == CampaignStatus.SENDING.value
            ),
        )
        .order_by(recipient.contact_id)
        .limit(limit)
    )
    if after is not None:
        pending = pending.where(recipient.contact_id > after)
    claim = (
        update(recipient)
        .values(status=RecipientStatus.CLAIMED.value, claimed_at=now)
        .where(recipient.campaign_id == campaign_id)
    )
    if _dialect(session) == "postgresql":
        # A materialized CTE: an IN (subquery … LIMIT) may be evaluated more than once by
        # the planner and claim more than `limit` rows. The rows it picked are locked and
        # still pending, so the UPDATE finds each by its primary key alone (with the status
        # in its WHERE too, the statistics of a just-launched ledger lead the planner to scan
        # every pending row once per picked row).
        picked = (
            pending.with_for_update(skip_locked=True, of=recipient)
            .cte("picked")
            .prefix_with("MATERIALIZED")
        )
        claim = claim.where(recipient.contact_id == picked.c.contact_id)
    else:
        claim = claim.where(
            recipient.contact_id.in_(pending.scalar_subquery()),
            recipient.status == RecipientStatus.PENDING.value,
        )
    result = await session.execute(
        claim.returning(*_CLAIMED_COLUMNS).execution_options(synchronize_session=False)
    )
    return list(result.all())


@dataclass(frozen=True, slots=True)
class Outcome:
    """The platform's answer for one claimed recipient: a message id, or the failure."""

    contact_id: str
    platform_message_id: str | None
    error: str | None
    # The platform's error code for a refusal (131049 defers rather than fails).
    error_code: int | None = None


async def settle_claims(
    session: AsyncSession, campaign_id: str, outcomes: Sequence[Outcome], now: datetime
) -> list[Any]:
    """claimed → sent (with the platform's message id) or → failed (with the reason) for
    every outcome, in one statement on PostgreSQL; answers the rows it moved (a row no
    longer claimed, e.g. failed by the stale-claim reconciliation, is left alone)."""
    if not outcomes:
        return []
    recipient = CampaignRecipient
    if _dialect(session) == "postgresql":
        given = (
            func.unnest(
                literal([o.contact_id for o in outcomes], ARRAY(String())),
                literal([o.platform_message_id for o in outcomes], ARRAY(String())),
                literal([o.error for o in outcomes], ARRAY(Text())),
            )
            .table_valued("contact_id", "message_id", "error")
            .render_derived(name="given")
        )
        succeeded = given.c.error.is_(None)
        result = await session.execute(
            update(recipient)
            .where(
                recipient.campaign_id == campaign_id,
                recipient.contact_id == given.c.contact_id,
                recipient.status == RecipientStatus.CLAIMED.value,
            )
            .values(
                status=case(
                    (succeeded, RecipientStatus.SENT.value), else_=RecipientStatus.FAILED.value
                ),
                platform_message_id=given.c.message_id,
                error=given.c.error,
                sent_at=case((succeeded, now), else_=None),
                failed_at=case((succeeded, None), else_=now),
            )
            .returning(*_SETTLED_COLUMNS)
            .execution_options(synchronize_session=False)
        )
        return list(result.all())
    settled: list[Any] = []
    for outcome in outcomes:
        values: dict[str, Any]
        if outcome.error is None:
            values = {
                "status": RecipientStatus.SENT.value,
                "platform_message_id": outcome.platform_message_id,
                "sent_at": now,
            }
        else:
            values = {
                "status": RecipientStatus.FAILED.value,
                "error": outcome.error,
                "failed_at": now,
            }
        result = await session.execute(
            update(recipient)
            .where(
                recipient.campaign_id == campaign_id,
                recipient.contact_id == outcome.contact_id,
                recipient.status == RecipientStatus.CLAIMED.value,
            )
            .values(**values)
            .returning(*_SETTLED_COLUMNS)
            .execution_options(synchronize_session=False)
        )
        settled.extend(result.all())
    return settled


async def release_claims(session: AsyncSession, campaign_id: str, contact_ids: list[str]) -> int:
    """claimed → pending for recipients a run claimed but did not send (throttled, or the
    run stopped first): the next run sends them."""
    if not contact_ids:
        return 0
    result = await session.execute(
        update(CampaignRecipient)
        .where(
            CampaignRecipient.campaign_id == campaign_id,
            CampaignRecipient.contact_id.in_(contact_ids),
            CampaignRecipient.status == RecipientStatus.CLAIMED.value,
        )
        .values(status=RecipientStatus.PENDING.value, claimed_at=None)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


# The counters each ledger status counts in: (sent, delivered, read, failed).
_COUNTED_IN: dict[str, tuple[int, int, int, int]] = {
    RecipientStatus.SENT.value: (1, 0, 0, 0),
    RecipientStatus.DELIVERED.value: (1, 1, 0, 0),
    RecipientStatus.READ.value: (1, 1, 1, 0),
    RecipientStatus.FAILED.value: (0, 0, 0, 1),
}
_UNCOUNTED = (0, 0, 0, 0)


def counter_delta(before: str, after: str) -> tuple[int, int, int, int]:
    """What one recipient's move from `before` to `after` changes in the four counters."""
    old = _COUNTED_IN.get(before, _UNCOUNTED)
    new = _COUNTED_IN.get(after, _UNCOUNTED)
    return (new[0] - old[0], new[1] - old[1], new[2] - old[2], new[3] - old[3])


@dataclass(frozen=True, slots=True)
class Counters:
    status: str
    total: int
    sent: int
    failed: int

    @property
    def settled(self) -> bool:
        """Every recipient is sent (or later) or failed."""
        return self.sent + self.failed >= self.total


async def add_to_counters(
    session: AsyncSession, campaign_id: str, delta: tuple[int, int, int, int]
) -> Counters | None:
    """Move the counters by `delta` in the caller's transaction, beside the ledger rows that
    moved: the UPDATE takes the campaign row's lock and adds to the latest committed values,
    so concurrent callbacks and settles never lose one another's changes."""
    sent, delivered, read, failed = delta
    row = (
        await session.execute(
            update(Campaign)
            .where(Campaign.id == campaign_id)
            .values(
                sent_count=Campaign.sent_count + sent,
                delivered_count=Campaign.delivered_count + delivered,
                read_count=Campaign.read_count + read,
                failed_count=Campaign.failed_count + failed,
            )
            .returning(
                Campaign.status,
                Campaign.total_contacts_count,
                Campaign.sent_count,
                Campaign.failed_count,
            )
            .execution_options(synchronize_session=False)
        )
    ).one_or_none()
    if row is None:
        return None
    return Counters(row[0], int(row[1]), int(row[2]), int(row[3]))


async def ledger_counters(session: AsyncSession, campaign_id: str) -> Counters | None:
    """The campaign's status and counters as stored (no count over the ledger)."""
    row = (
        await session.execute(
            select(
                Campaign.status,
                Campaign.total_contacts_count,
                Campaign.sent_count,
                Campaign.failed_count,
            ).where(Campaign.id == campaign_id)
        )
    ).one_or_none()
    if row is None:
        return None
    return Counters(row[0], int(row[1]), int(row[2]), int(row[3]))


async def mark_completed(session: AsyncSession, campaign_id: str, now: datetime) -> bool:
    """sending → completed, once: True for the call that made the move."""
    result = await session.execute(
        update(Campaign)
        .where(Campaign.id == campaign_id, Campaign.status == CampaignStatus.SENDING.value)
        .values(status=CampaignStatus.COMPLETED.value, completed_at=now)
        .returning(Campaign.id)
        .execution_options(synchronize_session=False)
    )
    return result.first() is not None


async def has_pending(session: AsyncSession, campaign_id: str) -> bool:
    found = await session.scalar(
        select(CampaignRecipient.contact_id)
        .where(
            CampaignRecipient.campaign_id == campaign_id,
            CampaignRecipient.status == RecipientStatus.PENDING.value,
        )
        .limit(1)
    )
    return found is not None


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
) -> list[Any]:
    """claimed → failed for claims older than `claimed_before`; answers the rows moved."""
    result = await session.execute(
        update(CampaignRecipient)
        .where(
            CampaignRecipient.campaign_id == campaign_id,
            CampaignRecipient.status == RecipientStatus.CLAIMED.value,
            CampaignRecipient.claimed_at < claimed_before,
        )
        .values(status=RecipientStatus.FAILED.value, error=reason, failed_at=now)
        .returning(*_SETTLED_COLUMNS)
        .execution_options(synchronize_session=False)
    )
    return list(result.all())


def _sent_through(channel_id: str) -> ColumnElement[bool]:
    # Recipients of the channel's campaigns: a status names a message of the number it
    # came for, never another channel's.
    return CampaignRecipient.campaign_id.in_(
        select(Campaign.id).where(Campaign.chat_phone_number_id == channel_id)
    )


async def recipient_by_message_id(
    session: AsyncSession, channel_id: str, platform_message_id: str
) -> CampaignRecipient | None:
    """The recipient of one of the channel's campaigns a status callback is about, locked
    until the transaction ends (on PostgreSQL), so two callbacks about one message move it
    one after the other."""
    statement = select(CampaignRecipient).where(
        CampaignRecipient.platform_message_id == platform_message_id,
        _sent_through(channel_id),
    )
    if _dialect(session) == "postgresql":
        statement = statement.with_for_update()
    return await session.scalar(statement.execution_options(populate_existing=True))


async def known_message_ids(
    session: AsyncSession, channel_id: str, platform_message_ids: Sequence[str]
) -> set[str]:
    """Which of these platform message ids name recipients of the channel's campaigns."""
    return await lists.present(
        session,
        CampaignRecipient.platform_message_id,
        platform_message_ids,
        _sent_through(channel_id),
    )


def recipients_with_status(campaign_id: str, statuses: Sequence[str]) -> Select[Any]:
    """The contact ids of the campaign's recipients in one of `statuses` (a subquery)."""
    return select(CampaignRecipient.contact_id).where(
        CampaignRecipient.campaign_id == campaign_id,
        CampaignRecipient.status.in_(list(statuses)),
    )


async def count_recipients_with_status(
    session: AsyncSession, campaign_id: str, statuses: Sequence[str]
) -> int:
    found = await session.scalar(
        select(func.count()).select_from(recipients_with_status(campaign_id, statuses).subquery())
    )
    return int(found or 0)
