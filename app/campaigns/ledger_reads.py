"""Read-only queries on campaigns' recipient ledger, for dashboards and exports.

The dispatch path owns every write (app/campaigns/repository.py); these statements only read.
Ledger rows carry no organization: callers pass campaign ids they got from an
organization-scoped read of the campaign (app/campaigns/reports.py), never ids from a request.
The ledger is walked in contact id order, within one campaign, on its primary key
`(campaign_id, contact_id)` (or `(campaign_id, status, contact_id)` under a status filter), so
a page or an export batch is one index range whatever the campaign's size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, exists, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.campaigns.models import CampaignRecipient
from app.campaigns.schemas import RECIPIENT

# The recipient shape's columns (its GraphQL type and the CSV export read them).
RECIPIENT_COLUMNS = RECIPIENT.columns()


def _matching(campaign_id: Any, statuses: Sequence[str] | None) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = [CampaignRecipient.campaign_id == campaign_id]
    if statuses:
        conditions.append(CampaignRecipient.status.in_(list(statuses)))
    return conditions


def _after(after: str | None) -> list[ColumnElement[bool]]:
    return [] if after is None else [CampaignRecipient.contact_id > after]


async def recipient_rows(
    session: AsyncSession,
    campaign_ids: Sequence[str],
    statuses: Sequence[str] | None,
    after: str | None,
    fetch: int,
) -> dict[str, list[Any]]:
    """Up to `fetch` ledger rows of each campaign, in contact id order, after the contact
    id `after` (None: from the start); one statement for any number of campaigns."""
    if not campaign_ids:
        return {}
    statement: Select[Any] | Any
    if len(campaign_ids) == 1:
        statement = (
            select(*RECIPIENT_COLUMNS)
            .where(*_matching(campaign_ids[0], statuses), *_after(after))
            .order_by(CampaignRecipient.contact_id)
            .limit(fetch)
        )
    else:
        # Several campaigns of one response: number each campaign's rows, keep the first ones.
        rank = (
            func.row_number()
            .over(
                partition_by=CampaignRecipient.campaign_id,
                order_by=CampaignRecipient.contact_id,
            )
            .label("rank_")
        )
        conditions = [CampaignRecipient.campaign_id.in_(list(campaign_ids))]
        if statuses:
            conditions.append(CampaignRecipient.status.in_(list(statuses)))
        ranked = (
            select(*RECIPIENT_COLUMNS, rank).where(*conditions, *_after(after)).subquery("ranked")
        )
        statement = (
            select(*(ranked.c[column.key] for column in RECIPIENT_COLUMNS))
            .where(ranked.c.rank_ <= fetch)
            .order_by(ranked.c.campaign_id, ranked.c.contact_id)
        )
    by_campaign: dict[str, list[Any]] = {campaign_id: [] for campaign_id in campaign_ids}
    for row in (await session.execute(statement)).all():
        by_campaign[row.campaign_id].append(row)
    return by_campaign


async def recipient_counts(
    session: AsyncSession, campaign_ids: Sequence[str], statuses: Sequence[str] | None
) -> dict[str, int]:
    """Ledger rows of each campaign matching `statuses` (None: all)."""
    if not campaign_ids:
        return {}
    conditions = [CampaignRecipient.campaign_id.in_(list(campaign_ids))]
    if statuses:
        conditions.append(CampaignRecipient.status.in_(list(statuses)))
    rows = await session.execute(
        select(CampaignRecipient.campaign_id, func.count())
        .where(*conditions)
        .group_by(CampaignRecipient.campaign_id)
    )
    counts = {campaign_id: 0 for campaign_id in campaign_ids}
    counts.update({campaign_id: int(count) for campaign_id, count in rows.all()})
    return counts


async def cursor_checks(
    session: AsyncSession,
    campaign_ids: Sequence[str],
    statuses: Sequence[str] | None,
    after: str,
) -> dict[str, tuple[bool, bool]]:
    """For each campaign: whether `after` is one of its recipients (a cursor must name one),
    and whether a matching recipient comes before or at it (the page has a previous one).
    Two primary-key probes per campaign, in one statement."""
    probes = []
    for index, campaign_id in enumerate(campaign_ids):
        named = exists().where(
            CampaignRecipient.campaign_id == campaign_id, CampaignRecipient.contact_id == after
        )
        earlier = exists().where(
            *_matching(campaign_id, statuses), CampaignRecipient.contact_id <= after
        )
        probes += [named.label(f"named_{index}"), earlier.label(f"earlier_{index}")]
    row = (await session.execute(select(*probes))).one()
    return {
        campaign_id: (bool(row[2 * index]), bool(row[2 * index + 1]))
        for index, campaign_id in enumerate(campaign_ids)
    }


async def export_batch(
    session: AsyncSession, campaign_id: str, after: str | None, size: int
) -> list[Any]:
    """The next `size` ledger rows of one campaign after the contact id `after`."""
    rows = await session.execute(
        select(*RECIPIENT_COLUMNS)
        .where(CampaignRecipient.campaign_id == campaign_id, *_after(after))
        .order_by(CampaignRecipient.contact_id)
        .limit(size)
    )
    return list(rows.all())
