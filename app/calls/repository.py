"""Every query on call logs, scoped to one organization."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    Select,
    String,
    bindparam,
    func,
    or_,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

from app.calls.models import BROWSER_CALL_ID_PREFIX, AgentPhoneNumber, CallLog
from app.calls.schemas import CALL_LOG, PHONE_NUMBER
from app.core.ids import normalize_id
from app.kit.pagination import NumberedPage, PageParams
from app.kit.repository import TOTAL_LABEL, Filter, OrgScopedRepository


def like_pattern(text: str) -> str:
    """`%text%` with the LIKE wildcards of `text` taken literally (escape character `\\`)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


# Newest call first; the id breaks ties so every row lands on exactly one page.
_NEWEST_FIRST = (CallLog.started_at.desc(), CallLog.id.desc())


class CallLogRepository(OrgScopedRepository[CallLog]):
    model = CallLog
    resource = "Call log"
    counted = True
    moded = True
    list_columns: ClassVar = CALL_LOG.columns()

    @staticmethod
    def filters(*, direction: str | None, status: str | None, search: str | None) -> list[Filter]:
        filters: list[Filter] = []
        if direction:
            filters.append(Filter("direction", _has_direction, {"direction": direction}))
        if status:
            filters.append(Filter("status", _has_status, {"status": status}))
        if search:
            filters.append(Filter("search", _matches_search, {"pattern": like_pattern(search)}))
        return filters

    def _numbered_statement(self, filters: Sequence[Filter]) -> Select[Any]:
        # The total rides along as an uncorrelated subquery (computed once): one round trip.
        return (
            select(*self.list_columns, self._total(filters).label(TOTAL_LABEL))
            .where(self._org_bound(), *(f.build() for f in filters))
            .order_by(*_NEWEST_FIRST)
            .limit(bindparam("fetch", type_=Integer()))
            .offset(bindparam("skip", type_=BigInteger()))
        )

    async def numbered_page(self, params: PageParams, *filters: Filter) -> NumberedPage[Any]:
        """One page of the newest-first list, with the total of all matching rows."""
        read = self._prepared(
            ("numbered", *(f.name for f in filters)),
            lambda: self._numbered_statement(filters),
        )
        bound = self._bound(
            {**self._filter_params(filters), "fetch": params.size, "skip": params.offset}
        )
        rows = await read.all(self.session, bound)
        if rows:
            total = int(getattr(rows[0], TOTAL_LABEL))
        elif params.page > 1:
            total = await self.count(*filters)  # past the last page: the total still counts
        else:
            total = 0
        return NumberedPage(rows, total, params)

    async def recent_for_contacts(self, contact_ids: Sequence[str], limit: int) -> list[Any]:
        """Up to `limit` newest calls of each contact, in one statement whatever the count."""
        if not contact_ids:
            return []
        if self.dialect_name == "postgresql":
            statement = self._recent_lateral(contact_ids, limit)
        else:
            statement = self._recent_ranked(contact_ids, limit)
        return list((await self._execute(statement)).all())

    def _recent_lateral(self, contact_ids: Sequence[str], limit: int) -> Select[Any]:
        # Per contact, an index walk of (contact_id, started_at, id) that stops after `limit`.
        wanted = (
            func.unnest(bindparam("contact_ids", list(contact_ids), type_=ARRAY(String())))
            .table_valued("contact_id")
            .render_derived(name="wanted")
        )
        newest = (
            select(*self.list_columns)
            .where(self._org_bound(), CallLog.contact_id == wanted.c.contact_id)
            .order_by(*_NEWEST_FIRST)
            .limit(limit)
            .lateral("newest")
        )
        return (
            select(newest)
            .select_from(wanted.join(newest, true()))
            .order_by(newest.c.contact_id, newest.c.started_at.desc(), newest.c.id.desc())
        )

    def _recent_ranked(self, contact_ids: Sequence[str], limit: int) -> Select[Any]:
        # SQLite has no LATERAL: number each contact's calls newest first, keep the first ones.
        rank = (
            func.row_number()
            .over(partition_by=CallLog.contact_id, order_by=_NEWEST_FIRST)
            .label("rank_")
        )
        ranked = (
            select(*self.list_columns, rank)
            .where(self._org_bound(), CallLog.contact_id.in_(list(contact_ids)))
            .subquery("ranked")
        )
        columns = [ranked.c[column.key] for column in self.list_columns]
        return (
            select(*columns)
            .where(ranked.c.rank_ <= limit)
            .order_by(ranked.c.contact_id, ranked.c.started_at.desc(), ranked.c.id.desc())
        )


def _has_direction() -> ColumnElement[bool]:
    return CallLog.direction == bindparam("direction")


def _has_status() -> ColumnElement[bool]:
    return CallLog.status == bindparam("status")


def _matches_search() -> ColumnElement[bool]:
    # ILIKE on PostgreSQL (served by the pg_trgm index); lower() LIKE lower() on SQLite.
    pattern = bindparam("pattern", type_=String())
    return (
        CallLog.call_id.ilike(pattern, escape="\\")
        | CallLog.from_number.ilike(pattern, escape="\\")
        | CallLog.to_number.ilike(pattern, escape="\\")
    )


async def call_log_for_carrier(session: AsyncSession, call_log_id: str) -> CallLog | None:
    """The call log a carrier callback or a call job names, locked for the update that
    follows (PostgreSQL; SQLite writers hold the database lock already).

    Not scoped to an organization on purpose: these callers have no credential, only the
    signed (or job-recorded) id; the organization is read from the row.
    """
    canonical = normalize_id(call_log_id)
    if canonical is None:
        return None
    statement = select(CallLog).where(CallLog.id == canonical).with_for_update()
    return (await session.scalars(statement)).one_or_none()


class PhoneNumberRepository(OrgScopedRepository[AgentPhoneNumber]):
    model = AgentPhoneNumber
    resource = "Phone number"
    moded = True

    async def by_number(self, phone_number: str) -> AgentPhoneNumber | None:
        """The assignment of an E.164 number, when this organization holds it."""
        result = await self._execute(
            self.scoped(select(AgentPhoneNumber)).where(
                AgentPhoneNumber.phone_number == phone_number
            )
        )
        return result.scalar_one_or_none()

    list_columns: ClassVar = PHONE_NUMBER.columns()


async def assignment_for_number(
    session: AsyncSession, phone_number: str, *, livemode: bool
) -> AgentPhoneNumber | None:
    """Who answers `phone_number` in that mode, whichever organization it is (the carrier's
    incoming-call webhook knows only the number called)."""
    statement = select(AgentPhoneNumber).where(
        AgentPhoneNumber.phone_number == phone_number, AgentPhoneNumber.livemode == livemode
    )
    return (await session.scalars(statement)).one_or_none()


async def live_calls_under_way(session: AsyncSession, organization_id: str) -> int:
    """The organization's calls holding the voice engine: live calls and browser sessions
    (of either mode) still under way, counted after taking its row lock (PostgreSQL; SQLite
    writers are serialized already), so two dispatches of one organization on any replicas
    count one after the other."""
    from app.organizations.models import Organization  # the lock only; no other use

    await session.execute(
        select(Organization.id).where(Organization.id == organization_id).with_for_update()
    )
    statement = select(func.count()).where(
        CallLog.organization_id == organization_id,
        or_(
            CallLog.livemode == true(),
            CallLog.call_id.startswith(BROWSER_CALL_ID_PREFIX, autoescape=True),
        ),
        CallLog.status == "in-progress",
    )
    return int((await session.execute(statement)).scalar_one())


async def stale_streams(session: AsyncSession, older_than: Any, limit: int) -> list[str]:
    """Calls under way whose media heartbeat stopped before `older_than`: their process died."""
    statement = (
        select(CallLog.id)
        .where(
            CallLog.media_heartbeat_at.is_not(None),
            CallLog.media_heartbeat_at < older_than,
            CallLog.status == "in-progress",
        )
        .limit(limit)
    )
    return list((await session.scalars(statement)).all())


async def call_log_by_call_id(session: AsyncSession, call_id: str) -> CallLog | None:
    """A call by the carrier's SID (inbound calls, whose callbacks carry no log id)."""
    statement = select(CallLog).where(CallLog.call_id == call_id).with_for_update()
    return (await session.scalars(statement)).first()
