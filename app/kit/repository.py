"""Organization-scoped data access shared by every domain repository.

Every query a request makes for an organization goes through this tenant scope: a
repository's `scoped()`, or `_org_bound()` for a condition on another table the statement
reads or joins, so no query can forget the tenant; services build no tenant queries of their
own. The tenant condition has one form, `organization_id = :org_id` (`tenant_condition`),
whose value `_bound()` gives at execution (`_execute` for ORM statements): never a value
captured in the statement, which a prepared statement would keep for every later caller
(app/db/prepared.py refuses those).

Test mode is enforced here too. A repository is built for a viewer: a credential's `Subject`
(or anything with `organization_id` and `livemode`), or a bare organization id for the
service's own work (workers, platform callbacks), which sees every row. A repository whose rows
carry a mode (`moded`) adds `livemode = false` to the tenant condition for a test-mode viewer,
so its lists leave live rows out, and a live row asked for by id is refused with
`LiveModeForbidden` (403) rather than returned. Live credentials see both modes.

Reads on the hot paths (get by id, cursor pages, counts) are prepared once per statement shape:
a shape is the repository, the variant and the names of the filters applied; the values
(organization, cursor, filter arguments) are bound at execution.

Work that holds no organization but an id or a platform's key (a job re-reading the row a
scoped request wrote, a platform callback, login by e-mail, the simulated platform's own
tables) reads by that key: by primary key, or through the module functions beside each
repository named for their key (`campaign_by_id`, `channels_for_phone_number_id`). What it then
reads for that row's organization goes through the scope too (a dispatch run reads its
campaign's channel and template through their repositories). Two jobs' bulk statements, which
run thousands of times per organization they were given, name the organization as a bound
parameter of their own instead: a contact import's per-chunk lookups and inserts
(app/contact_imports/runner.py) and a webhook fan-out's prepared statements
(app/webhooks/delivery.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from sqlalchemy import (
    ColumnElement,
    Integer,
    ScalarSelect,
    Select,
    TextualSelect,
    and_,
    bindparam,
    func,
    not_,
    select,
    tuple_,
)
from sqlalchemy.engine import Result
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import Executable

from app.core.ids import normalize_id
from app.db.base import UTCDateTime
from app.db.counters import WHOLE, counted_total
from app.db.prepared import PreparedStatement, constant, prepared
from app.kit.errors import InvalidInput, LiveModeForbidden, NotFound
from app.kit.pagination import CursorPage, CursorParams

ModelT = TypeVar("ModelT")
SelectT = TypeVar("SelectT", bound=Select[*tuple[Any, ...]])
TOTAL_LABEL = "total_count_"
ORG = "org_id"


class Viewer(Protocol):
    """Whose rows a repository reads: one organization, in one mode (a `Subject` is one)."""

    @property
    def organization_id(self) -> str: ...

    @property
    def livemode(self) -> bool: ...


def tenant_condition(model: Any) -> ColumnElement[bool]:
    """`model.organization_id = :org_id`: the one form of the tenant condition, its value bound
    at execution (`OrgScopedRepository._bound`). Statements built at import time use it
    directly; repositories through `_org_bound` and `scoped`."""
    return model.organization_id == bindparam(ORG)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Filter:
    """One condition of a list query: `build` makes it with bindparam placeholders (run once
    per statement shape), `params` carries this request's values for them."""

    name: str
    build: Callable[[], ColumnElement[bool]]
    params: Mapping[str, Any] = field(default_factory=dict)


class OrgScopedRepository(Generic[ModelT]):
    """Base of every domain repository: one organization, one session, one model."""

    model: ClassVar[Any]
    # How errors name one entity: `get_or_404` raises NotFound("<resource> not found").
    resource: ClassVar[str]
    # True when the table has counter triggers (app/db/counters.py): O(1) unfiltered totals.
    counted: ClassVar[bool] = False
    # Columns a read selects: plain rows (no ORM identity map) keep hot reads cheap, and they
    # answer attribute access like the ORM objects writes return, so one serializer fits both.
    list_columns: ClassVar[Sequence[Any]]
    # True when each row is live- or test-mode data (`_live_row` says which): a test-mode
    # viewer never sees or changes the live ones.
    moded: ClassVar[bool] = False

    def __init__(self, session: AsyncSession, viewer: Viewer | str) -> None:
        """`viewer`: a credential's Subject, or an organization id for the service's own
        work (every row of the organization, whatever its mode)."""
        self.session = session
        if isinstance(viewer, str):
            self.organization_id = viewer
            self.hides_live = False
        else:
            self.organization_id = viewer.organization_id
            self.hides_live = self.moded and not viewer.livemode

    @property
    def dialect_name(self) -> str:
        return self.session.get_bind().dialect.name

    def _org_bound(self, model: Any = None) -> ColumnElement[bool]:
        """The tenant condition on `model`: by default the repository's own rows (and, for a
        test-mode viewer of moded rows, test mode only), or another table the statement reads
        or joins. Its value comes from `_bound()` at execution."""
        if model is not None and model is not self.model:
            return tenant_condition(model)
        tenant = tenant_condition(self.model)
        if self.hides_live:
            return and_(tenant, not_(self._live_row()))
        return tenant

    def _live_row(self) -> ColumnElement[bool]:
        """Whether a row is live-mode data: its `livemode` column unless a repository says
        otherwise (rows that take the mode of what they belong to)."""
        return self.model.livemode  # type: ignore[no-any-return]

    async def _refuse_if_live(self, canonical_id: str) -> None:
        """After a test-mode viewer's miss: LiveModeForbidden when the id names a live row of
        the organization (a 403 naming the reason), else nothing (the caller answers 404)."""
        if not self.hides_live:
            return
        read = self._prepared(
            ("live_row",),
            lambda: select(self.model.id).where(
                tenant_condition(self.model),
                self.model.id == bindparam("object_id"),
            ),
        )
        if await read.first(self.session, self._bound({"object_id": canonical_id})) is not None:
            raise LiveModeForbidden(self.resource)

    def _bound(self, params: Mapping[str, Any] = {}) -> dict[str, Any]:
        return {ORG: self.organization_id, **params}

    def scoped(self, statement: SelectT, model: Any = None) -> SelectT:
        """`statement` limited to this organization (on `model`, as `_org_bound`); run it with
        `_execute`."""
        return statement.where(self._org_bound(model))

    async def _execute(
        self, statement: Executable, params: Mapping[str, Any] = {}
    ) -> Result[*tuple[Any, ...]]:
        """An ORM/Core statement with the tenant value (and `params`) bound."""
        return await self.session.execute(statement, self._bound(params))

    async def get(self, object_id: str) -> ModelT | None:
        """The entity by id, only when it belongs to this organization."""
        canonical = normalize_id(object_id)
        if canonical is None:
            return None
        result = await self._execute(
            self.scoped(select(self.model).where(self.model.id == canonical))
        )
        entity: ModelT | None = result.scalar_one_or_none()
        if entity is None:
            await self._refuse_if_live(canonical)
        return entity

    async def get_or_404(self, object_id: str) -> ModelT:
        """The entity by id in this organization, or NotFound."""
        entity = await self.get(object_id)
        if entity is None:
            raise NotFound(self.resource)
        return entity

    def add(self, entity: ModelT) -> None:
        self.session.add(entity)

    async def delete(self, entity: ModelT) -> None:
        await self.session.delete(entity)

    def _prepared(
        self, shape: tuple[Any, ...], build: Callable[[], Select[Any] | TextualSelect]
    ) -> PreparedStatement:
        # The mode is part of the shape: a test-mode viewer's statement filters on it.
        return prepared((type(self), self.dialect_name, self.hides_live, *shape), build)

    async def get_row(self, object_id: str) -> Any | None:
        """The row (list_columns, attribute access) by id, only in this organization."""
        return await self._row_by_id(object_id, "get_row", lambda: select(*self.list_columns))

    async def _row_by_id(
        self, object_id: str, name: str, build: Callable[[], Select[Any]]
    ) -> Any | None:
        """One row by id, only in this organization, of the prepared read `build` makes (its
        columns, joins, lock) under the shape `name`; None when there is none."""
        canonical = normalize_id(object_id)
        if canonical is None:
            return None
        read = self._prepared(
            (name,),
            lambda: build().where(self._org_bound(), self.model.id == bindparam("object_id")),
        )
        row = await read.first(self.session, self._bound({"object_id": canonical}))
        if row is None:
            await self._refuse_if_live(canonical)
        return row

    async def get_row_or_404(self, object_id: str) -> Any:
        """The row by id in this organization, or NotFound."""
        row = await self.get_row(object_id)
        if row is None:
            raise NotFound(self.resource)
        return row

    def _total(self, filters: Sequence[Filter]) -> ScalarSelect[Any]:
        """Matching rows: the trigger-kept counter when unfiltered (it counts both modes),
        else a count(*)."""
        if not filters and self.counted and not self.hides_live:
            return counted_total(self.model.__tablename__, constant(WHOLE))
        return (
            select(func.count())
            .select_from(self.model)
            .where(self._org_bound(), *(f.build() for f in filters))
            .scalar_subquery()
        )

    @staticmethod
    def _filter_params(filters: Sequence[Filter]) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for item in filters:
            params.update(item.params)
        return params

    async def count(self, *filters: Filter) -> int:
        read = self._prepared(
            ("count", *(f.name for f in filters)),
            lambda: select(self._total(filters).label("count")),
        )
        row = await read.first(self.session, self._bound(self._filter_params(filters)))
        return int(row[0]) if row is not None else 0

    async def _anchor(self, object_id: str, parameter: str) -> tuple[Any, str]:
        canonical = normalize_id(object_id)
        row = None
        if canonical is not None:
            read = self._prepared(
                ("anchor",),
                lambda: select(self.model.created_at, self.model.id).where(
                    self._org_bound(), self.model.id == bindparam("object_id")
                ),
            )
            row = await read.first(self.session, self._bound({"object_id": canonical}))
        if row is None:
            raise InvalidInput(f"{parameter}: no such object: '{object_id}'", field=parameter)
        return row[0], row[1]

    def _page_statement(self, direction: str, filters: Sequence[Filter]) -> Select[Any]:
        # The total rides along as an uncorrelated subquery (computed once): one round trip.
        total_column = self._total(filters).label(TOTAL_LABEL)
        statement = select(*self.list_columns, total_column).where(
            self._org_bound(), *(f.build() for f in filters)
        )
        key = tuple_(self.model.created_at, self.model.id)
        anchor = tuple_(bindparam("anchor_created_at", type_=UTCDateTime()), bindparam("anchor_id"))
        if direction == "before":
            statement = statement.where(key > anchor).order_by(
                self.model.created_at.asc(), self.model.id.asc()
            )
        else:
            if direction == "after":
                statement = statement.where(key < anchor)
            statement = statement.order_by(self.model.created_at.desc(), self.model.id.desc())
        return statement.limit(bindparam("fetch", type_=Integer()))

    async def cursor_page(self, params: CursorParams, *filters: Filter) -> CursorPage[Any]:
        """Newest first, ties broken by id, so every row appears exactly once across pages."""
        bound = self._bound({**self._filter_params(filters), "fetch": params.limit + 1})
        if params.ending_before:
            direction = "before"
            bound["anchor_created_at"], bound["anchor_id"] = await self._anchor(
                params.ending_before, params.before_name
            )
        elif params.starting_after:
            direction = "after"
            bound["anchor_created_at"], bound["anchor_id"] = await self._anchor(
                params.starting_after, params.after_name
            )
        else:
            direction = "first"
        read = self._prepared(
            ("page", direction, *(f.name for f in filters)),
            lambda: self._page_statement(direction, filters),
        )
        rows = await read.all(self.session, bound)
        has_more = len(rows) > params.limit
        if direction == "before":
            items = list(reversed(rows[: params.limit]))
            has_previous = True
        else:
            items = rows[: params.limit]
            has_previous = direction == "after"
        if rows:
            total = int(getattr(rows[0], TOTAL_LABEL))
        elif direction != "first":
            total = await self.count(*filters)
        else:
            total = 0  # nothing matched at all
        return CursorPage(items, has_more, total, has_previous)
