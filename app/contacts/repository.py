"""Every query on contacts, scoped to one organization.

Search (`search`: a case-insensitive substring of the name, or a substring of the phone number)
reads an index on both backends: trigram and pattern indexes on PostgreSQL (migration 0009), the
trigram FTS5 table `contacts_fts` on SQLite (migration 0016_sqlite_contact_search). The index
only narrows the candidates; every candidate is checked against the same LIKE condition on both
backends, so the index never changes which contacts match.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from sqlalchemy import (
    CTE,
    ColumnElement,
    Integer,
    ScalarSelect,
    Select,
    String,
    and_,
    bindparam,
    column,
    exists,
    func,
    literal_column,
    or_,
    select,
    table,
    text,
    tuple_,
    type_coerce,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB

from app.contacts.models import Contact
from app.contacts.schemas import CONTACT
from app.core.clock import utcnow
from app.db.base import UTCDateTime
from app.db.counters import counted_total
from app.db.prepared import PreparedStatement, constant
from app.kit.pagination import CursorPage, CursorParams
from app.kit.repository import TOTAL_LABEL, Filter, OrgScopedRepository

# SQLite's trigram index of contact names and phone numbers (external content, by rowid).
FTS_TABLE = table("contacts_fts", column("rowid"))
# Trigrams need three characters: shorter searches scan the organization's contacts.
FTS_MIN_CHARACTERS = 3
# A search whose text occurs in more rows than this (all organizations) scans instead: each
# index hit costs a row lookup, a scan reads the organization's rows in order and stops at the
# page (measured at 100k contacts: 10k hits about as costly as the scan).
FTS_MAX_HITS = 10_000
_FTS_HITS = PreparedStatement(
    text(
        "SELECT count(*) AS hits FROM (SELECT 1 FROM contacts_fts"
        " WHERE contacts_fts MATCH :fts_query LIMIT :cap)"
    ).columns(column("hits", Integer))
)


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class ContactRepository(OrgScopedRepository[Contact]):
    model = Contact
    resource = "Contact"
    counted = True
    list_columns: ClassVar = CONTACT.columns()

    async def rows_by_ids(self, contact_ids: Sequence[str]) -> dict[str, Any]:
        """The organization's contacts among `contact_ids` (list_columns), by id; ids of other
        organizations' or deleted contacts are absent."""
        if not contact_ids:
            return {}
        rows = await self._execute(
            self.scoped(select(*self.list_columns)).where(
                Contact.id.in_(list(dict.fromkeys(contact_ids)))
            )
        )
        return {row.id: row for row in rows.all()}

    async def by_phone_number(self, phone_number: str) -> Contact | None:
        """The organization's contact for an E.164 number (the oldest, should there be
        several; numbers need not be unique): who a call or an inbound message is with."""
        result = await self._execute(
            self.scoped(select(Contact))
            .where(Contact.phone_number == phone_number)
            .order_by(Contact.created_at, Contact.id)
            .limit(1)
        )
        return result.scalar_one_or_none()

    async def by_platform_user_id(self, user_id: str) -> Contact | None:
        """The organization's contact WhatsApp knows by this business-scoped user id."""
        result = await self._execute(
            self.scoped(select(Contact))
            .where(Contact.platform_user_id == user_id)
            .order_by(Contact.created_at, Contact.id)
            .limit(1)
        )
        return result.scalar_one_or_none()

    async def all_by_phone_number(self, phone_number: str) -> list[Contact]:
        """Every contact of the organization with that E.164 number (numbers need not be
        unique): consent the platform reports for a number holds for each of them."""
        result = await self._execute(
            self.scoped(select(Contact))
            .where(Contact.phone_number == phone_number)
            .order_by(Contact.created_at, Contact.id)
        )
        return list(result.scalars().all())

    async def refuses_calls(self, phone_number: str) -> bool:
        """Whether any contact of the organization with that number asked not to be called."""
        found = await self._execute(
            self.scoped(select(Contact.id))
            .where(Contact.phone_number == phone_number, Contact.do_not_call.is_(True))
            .limit(1)
        )
        return found.first() is not None

    async def add_tag(self, tag: str, contact_ids: Any, *, max_tags: int) -> list[Any]:
        """Append `tag` to the organization's contacts among `contact_ids` (a SELECT of ids)
        that lack it and have fewer than `max_tags` tags, in one UPDATE; answers their rows
        (list_columns) as they are now."""
        if self.dialect_name == "postgresql":
            tags = type_coerce(Contact.tags, JSONB)
            one = func.jsonb_build_array(bindparam("tag", type_=String()))
            appended: Any = tags.op("||")(one)
            lacking = ~tags.contains(one)
            room = func.jsonb_array_length(tags) < max_tags
        else:
            appended = func.json_insert(Contact.tags, "$[#]", bindparam("tag", type_=String()))
            lacking = ~_has_tag_sqlite()
            room = func.json_array_length(Contact.tags) < max_tags
        statement = (
            update(Contact)
            .where(self._org_bound(), Contact.id.in_(contact_ids), lacking, room)
            .values(tags=appended, updated_at=utcnow())
            .returning(*self.list_columns)
            .execution_options(synchronize_session=False)
        )
        result = await self._execute(statement, {"tag": tag})
        return list(result.all())

    async def count_with_tag_among(self, tag: str, contact_ids: Any) -> int:
        """How many of the organization's contacts among `contact_ids` carry `tag`."""
        has_tag = _has_tag_postgresql() if self.dialect_name == "postgresql" else _has_tag_sqlite()
        found = await self._execute(
            select(func.count())
            .select_from(Contact)
            .where(self._org_bound(), Contact.id.in_(contact_ids), has_tag),
            {"tag": tag, "tag_list": [tag]},
        )
        return int(found.scalar_one())

    async def export_batch(
        self, filters: Sequence[Filter], after: tuple[Any, str] | None, limit: int
    ) -> list[Any]:
        """Up to `limit` contacts matching `filters` (the list's), newest first, after the
        (created_at, id) `after`: one batch of the CSV export, read without a total."""
        params: dict[str, Any] = {}
        for found in filters:
            params.update(found.params)
        conditions = [found.build() for found in filters if found.name != "search_fts"]
        if any(found.name == "search_fts" for found in filters):
            conditions.append(_matches_search())  # the same rule, without the index
        statement = select(*self.list_columns).where(self._org_bound(), *conditions)
        if after is not None:
            anchor = tuple_(
                bindparam("after_created_at", type_=UTCDateTime()), bindparam("after_id")
            )
            statement = statement.where(tuple_(Contact.created_at, Contact.id) < anchor)
            params.update(after_created_at=after[0], after_id=after[1])
        statement = statement.order_by(Contact.created_at.desc(), Contact.id.desc()).limit(limit)
        result = await self._execute(statement, params)
        return list(result.all())

    def filters(self, *, tag: str | None, search: str | None) -> list[Filter]:
        filters: list[Filter] = []
        if tag:
            if self.dialect_name == "postgresql":
                filters.append(Filter("tag", _has_tag_postgresql, {"tag_list": [tag], "tag": tag}))
            else:
                filters.append(Filter("tag", _has_tag_sqlite, {"tag": tag}))
        if search:
            pattern = _like_pattern(search)
            if self.dialect_name == "postgresql" and search.startswith("+"):
                # Stored numbers are E.164, where '+' comes first only: such a search matches
                # a number only as its prefix, found by a B-tree range. (Trigrams every number
                # shares, a country and area code, make the trigram scan slow.)
                bounds = {"phone_from": search, "phone_below": _next_prefix(search)}
                filters.append(
                    Filter("search_e164", _matches_search_e164, {"pattern": pattern, **bounds})
                )
            elif self.dialect_name == "sqlite" and len(search) >= FTS_MIN_CHARACTERS:
                params = {"pattern": pattern, "fts_query": _fts_phrase(search)}
                filters.append(Filter("search_fts", _matches_search, params))
            else:
                filters.append(Filter("search", _matches_search, {"pattern": pattern}))
        return filters

    async def cursor_page(self, params: CursorParams, *filters: Filter) -> CursorPage[Any]:
        return await super().cursor_page(params, *await self._by_hits(filters))

    async def count(self, *filters: Filter) -> int:
        return await super().count(*await self._by_hits(filters))

    async def _by_hits(self, filters: Sequence[Filter]) -> Sequence[Filter]:
        """The filters, with a SQLite index search whose text is too common (FTS_MAX_HITS)
        turned into a scan: one look at the index, bounded by the limit."""
        index_search = next((f for f in filters if f.name == "search_fts"), None)
        if index_search is None:
            return filters
        counted = await _FTS_HITS.first(
            self.session,
            {"fts_query": index_search.params["fts_query"], "cap": FTS_MAX_HITS + 1},
        )
        if (counted.hits if counted is not None else 0) <= FTS_MAX_HITS:
            return filters
        scan = Filter("search", _matches_search, {"pattern": index_search.params["pattern"]})
        return [scan if f is index_search else f for f in filters]

    def _matches(self, filters: Sequence[Filter]) -> CTE | None:
        """A search's matches (id, created_at), read once for both the total and the page."""
        builds = [f.build() for f in filters]
        if self.dialect_name == "postgresql" and any(f.name.startswith("search") for f in filters):
            # An index scan, materialized. Left to itself the planner would scan the matches
            # once for the total and walk the whole list in date order, filtering, for the
            # page: slow when matches are rare.
            return (
                select(Contact.id, Contact.created_at)
                .where(self._org_bound(), *builds)
                .cte("matches")
                .prefix_with("MATERIALIZED")
            )
        if any(f.name == "search_fts" for f in filters):
            # The index's candidates first (materialized), then their rows by rowid. Given the
            # join, SQLite's planner prefers walking the organization's rows and probing the
            # index for each.
            hits = (
                select(FTS_TABLE.c.rowid.label("contact_rowid"))
                .where(literal_column("contacts_fts").op("MATCH")(bindparam("fts_query")))
                .cte("hits")
                .prefix_with("MATERIALIZED")
            )
            return (
                select(Contact.id, Contact.created_at)
                .select_from(hits)
                .join(Contact, literal_column("contacts.rowid") == hits.c.contact_rowid)
                .where(self._org_bound(), *builds)
                .cte("matches")
            )
        return None

    def _page_statement(self, direction: str, filters: Sequence[Filter]) -> Select[Any]:
        matches = self._matches(filters)
        if matches is None:
            return super()._page_statement(direction, filters)
        # The newest matches joined back to their rows.
        total = select(func.count()).select_from(matches).scalar_subquery()
        key = tuple_(matches.c.created_at, matches.c.id)
        anchor = tuple_(bindparam("anchor_created_at", type_=UTCDateTime()), bindparam("anchor_id"))
        newest = select(matches.c.id)
        if direction == "before":
            newest = newest.where(key > anchor)
            order = (Contact.created_at.asc(), Contact.id.asc())
            newest = newest.order_by(matches.c.created_at.asc(), matches.c.id.asc())
        else:
            if direction == "after":
                newest = newest.where(key < anchor)
            order = (Contact.created_at.desc(), Contact.id.desc())
            newest = newest.order_by(matches.c.created_at.desc(), matches.c.id.desc())
        page = newest.limit(bindparam("fetch", type_=Integer())).subquery("page")
        return (
            select(*self.list_columns, total.label(TOTAL_LABEL))
            .join_from(Contact, page, page.c.id == Contact.id)
            .order_by(*order)
        )

    def _total(self, filters: Sequence[Filter]) -> ScalarSelect[Any]:
        # A tag alone on PostgreSQL: the per-tag count the triggers keep (app/db/counters.py),
        # exact and independent of how many contacts carry the tag.
        if self.dialect_name == "postgresql" and [f.name for f in filters] == ["tag"]:
            return counted_total(Contact.__tablename__, bindparam("tag", type_=String()))
        if any(f.name == "search_fts" for f in filters):
            matches = self._matches(filters)
            assert matches is not None
            return select(func.count()).select_from(matches).scalar_subquery()
        return super()._total(filters)


def _has_tag_postgresql() -> ColumnElement[bool]:
    # jsonb containment (@>) of a one-element array.
    return type_coerce(Contact.tags, JSONB).contains(bindparam("tag_list", type_=JSONB()))


def _has_tag_sqlite() -> ColumnElement[bool]:
    # The tags JSON array, opened with json_each.
    tags: Any = func.json_each(Contact.tags).table_valued("value")
    return exists(select(constant(1)).select_from(tags).where(tags.c.value == bindparam("tag")))


def _fts_phrase(search: str) -> str:
    """The search as one FTS5 phrase: with the trigram tokenizer, rows holding it as a
    substring of a column, case folded (a superset of what the LIKE condition accepts)."""
    return '"' + search.replace('"', '""') + '"'


def _next_prefix(text: str) -> str:
    """The least string above every string that starts with `text` (code point order)."""
    return text[:-1] + chr(ord(text[-1]) + 1)


def _matches_search_e164() -> ColumnElement[bool]:
    phone = Contact.phone_number
    return or_(
        Contact.name.ilike(bindparam("pattern", type_=String()), escape="\\"),
        and_(
            # The pattern operators compare bytes, as the index's text_pattern_ops orders.
            phone.op("~>=~", is_comparison=True)(bindparam("phone_from", type_=String())),
            phone.op("~<~", is_comparison=True)(bindparam("phone_below", type_=String())),
        ),
    )


def _matches_search() -> ColumnElement[bool]:
    pattern = bindparam("pattern", type_=String())
    return or_(
        Contact.name.ilike(pattern, escape="\\"),
        Contact.phone_number.like(pattern, escape="\\"),
    )
