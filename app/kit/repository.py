"""Organization-scoped data access shared by every domain repository.

Every statement a domain issues goes through `scoped()`, so no query can forget the tenant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Generic, TypeVar

from sqlalchemy import ColumnElement, ScalarSelect, Select, func, select, tuple_
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.counters import ResourceCounter
from app.kit.errors import InvalidInput
from app.kit.ids import normalize_id
from app.kit.pagination import CursorPage, CursorParams

ModelT = TypeVar("ModelT")
TOTAL_LABEL = "total_count_"


class OrgScopedRepository(Generic[ModelT]):
    """Base of every domain repository: one organization, one session, one model."""

    model: ClassVar[Any]
    # True when the table has counter triggers (app/db/counters.py): O(1) unfiltered totals.
    counted: ClassVar[bool] = False
    # Columns a read selects: plain rows (no ORM identity map) keep hot reads cheap, and they
    # answer attribute access like the ORM objects writes return, so one serializer fits both.
    list_columns: ClassVar[Sequence[Any]]

    def __init__(self, session: AsyncSession, organization_id: str) -> None:
        self.session = session
        self.organization_id = organization_id

    @property
    def dialect_name(self) -> str:
        return self.session.get_bind().dialect.name

    def _org_condition(self) -> ColumnElement[bool]:
        return self.model.organization_id == self.organization_id  # type: ignore[no-any-return]

    def scoped(self, statement: Select[Any]) -> Select[Any]:
        return statement.where(self._org_condition())

    async def get(self, object_id: str) -> ModelT | None:
        """The entity by id, only when it belongs to this organization."""
        canonical = normalize_id(object_id)
        if canonical is None:
            return None
        result = await self.session.execute(
            self.scoped(select(self.model).where(self.model.id == canonical))
        )
        return result.scalar_one_or_none()  # type: ignore[no-any-return]

    async def get_row(self, object_id: str) -> Row[Any] | None:
        canonical = normalize_id(object_id)
        if canonical is None:
            return None
        result = await self.session.execute(
            self.scoped(select(*self.list_columns).where(self.model.id == canonical))
        )
        row: Row[Any] | None = result.one_or_none()
        return row

    def _total(self, conditions: tuple[ColumnElement[bool], ...]) -> ScalarSelect[Any]:
        """Matching rows: the trigger-kept counter when unfiltered, else a count(*)."""
        if not conditions and self.counted:
            counter = select(ResourceCounter.count).where(
                ResourceCounter.organization_id == self.organization_id,
                ResourceCounter.resource == self.model.__tablename__,
            )
            return select(func.coalesce(counter.scalar_subquery(), 0)).scalar_subquery()
        return (
            self.scoped(select(func.count()).select_from(self.model))
            .where(*conditions)
            .scalar_subquery()
        )

    async def count(self, *conditions: ColumnElement[bool]) -> int:
        return int((await self.session.execute(select(self._total(conditions)))).scalar_one())

    async def _anchor(self, object_id: str, parameter: str) -> tuple[Any, str]:
        canonical = normalize_id(object_id)
        row = None
        if canonical is not None:
            result = await self.session.execute(
                self.scoped(
                    select(self.model.created_at, self.model.id).where(self.model.id == canonical)
                )
            )
            row = result.one_or_none()
        if row is None:
            raise InvalidInput(f"{parameter}: no such object: '{object_id}'", field=parameter)
        return row[0], row[1]

    async def cursor_page(
        self, params: CursorParams, *conditions: ColumnElement[bool]
    ) -> CursorPage[Row[Any]]:
        """Newest first, ties broken by id, so every row appears exactly once across pages."""
        key = tuple_(self.model.created_at, self.model.id)
        # The total rides along as an uncorrelated subquery (computed once): one round trip.
        total_column = self._total(conditions).label(TOTAL_LABEL)
        statement = self.scoped(select(*self.list_columns, total_column)).where(*conditions)
        newest_first = (self.model.created_at.desc(), self.model.id.desc())
        oldest_first = (self.model.created_at.asc(), self.model.id.asc())
        fetch = params.limit + 1
        if params.ending_before:
            anchor = await self._anchor(params.ending_before, "ending_before")
            statement = statement.where(key > anchor).order_by(*oldest_first).limit(fetch)
            rows = list((await self.session.execute(statement)).all())
            has_more = len(rows) > params.limit
            items = list(reversed(rows[: params.limit]))
            has_previous = True
        else:
            if params.starting_after:
                anchor = await self._anchor(params.starting_after, "starting_after")
                statement = statement.where(key < anchor)
            statement = statement.order_by(*newest_first).limit(fetch)
            rows = list((await self.session.execute(statement)).all())
            has_more = len(rows) > params.limit
            items = rows[: params.limit]
            has_previous = params.starting_after is not None
        if rows:
            total = int(rows[0]._mapping[TOTAL_LABEL])
        elif params.starting_after or params.ending_before:
            total = await self.count(*conditions)
        else:
            total = 0  # nothing matched at all
        return CursorPage(items, has_more, total, has_previous)
