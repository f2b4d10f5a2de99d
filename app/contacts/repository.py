"""Every query on contacts, scoped to one organization."""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import ColumnElement, String, bindparam, exists, func, or_, select, type_coerce
from sqlalchemy.dialects.postgresql import JSONB

from app.contacts.models import Contact
from app.kit.repository import Filter, OrgScopedRepository


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class ContactRepository(OrgScopedRepository[Contact]):
    model = Contact
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

    def add(self, contact: Contact) -> None:
        self.session.add(contact)

    async def delete(self, contact: Contact) -> None:
        await self.session.delete(contact)

    def filters(self, *, tag: str | None, search: str | None) -> list[Filter]:
        filters: list[Filter] = []
        if tag:
            if self.dialect_name == "postgresql":
                filters.append(Filter("tag", _has_tag_postgresql, {"tag_list": [tag]}))
            else:
                filters.append(Filter("tag", _has_tag_sqlite, {"tag": tag}))
        if search:
            filters.append(Filter("search", _matches_search, {"pattern": _like_pattern(search)}))
        return filters


def _has_tag_postgresql() -> ColumnElement[bool]:
    # jsonb containment (@>) of a one-element array.
    return type_coerce(Contact.tags, JSONB).contains(bindparam("tag_list", type_=JSONB()))


def _has_tag_sqlite() -> ColumnElement[bool]:
    # The tags JSON array, opened with json_each.
    tags: Any = func.json_each(Contact.tags).table_valued("value")
    return exists(select(1).select_from(tags).where(tags.c.value == bindparam("tag")))


def _matches_search() -> ColumnElement[bool]:
    pattern = bindparam("pattern", type_=String())
    return or_(
        Contact.name.ilike(pattern, escape="\\"),
        Contact.phone_number.like(pattern, escape="\\"),
    )
