"""Every query on contacts, scoped to one organization."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from sqlalchemy import (
    ColumnElement,
    Integer,
    ScalarSelect,
    Select,
    String,
    and_,
    bindparam,
    exists,
    func,
    or_,
    select,
    tuple_,
    type_coerce,
)
from sqlalchemy.dialects.postgresql import JSONB

from app.contacts.models import Contact
from app.db.base import UTCDateTime
from app.db.counters import counted_total
from app.db.prepared import constant
from app.kit.repository import TOTAL_LABEL, Filter, OrgScopedRepository


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class ContactRepository(OrgScopedRepository[Contact]):
    model = Contact
    resource = "Contact"
    counted = True
    list_columns: ClassVar = (
        Contact.id,
        Contact.organization_id,
        Contact.phone_number,
        Contact.name,
        Contact.tags,
        Contact.notes,
        Contact.custom_fields,
        Contact.created_at,
        Contact.updated_at,
    )

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
            else:
                filters.append(Filter("search", _matches_search, {"pattern": pattern}))
        return filters

    def _page_statement(self, direction: str, filters: Sequence[Filter]) -> Select[Any]:
        if self.dialect_name != "postgresql" or not any(
            f.name.startswith("search") for f in filters
        ):
            return super()._page_statement(direction, filters)
        # A search reads its matches once (an index scan, materialized) for both the exact
        # total and the page, the newest matches joined back to their rows. Left to itself
        # the planner would scan the matches once for the total and walk the whole list in
        # date order, filtering, for the page: slow when matches are rare.
        matches = (
            select(Contact.id, Contact.created_at)
            .where(self._org_bound(), *(f.build() for f in filters))
            .cte("matches")
            .prefix_with("MATERIALIZED")
        )
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
        return super()._total(filters)


def _has_tag_postgresql() -> ColumnElement[bool]:
    # jsonb containment (@>) of a one-element array.
    return type_coerce(Contact.tags, JSONB).contains(bindparam("tag_list", type_=JSONB()))


def _has_tag_sqlite() -> ColumnElement[bool]:
    # The tags JSON array, opened with json_each.
    tags: Any = func.json_each(Contact.tags).table_valued("value")
    return exists(select(constant(1)).select_from(tags).where(tags.c.value == bindparam("tag")))


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
