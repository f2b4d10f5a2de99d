"""Every query on contacts, scoped to one organization."""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import ColumnElement, exists, func, or_, select, type_coerce
from sqlalchemy.dialects.postgresql import JSONB

from app.contacts.models import Contact
from app.kit.repository import OrgScopedRepository


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

    def filters(self, *, tag: str | None, search: str | None) -> list[ColumnElement[bool]]:
        conditions: list[ColumnElement[bool]] = []
        if tag:
            conditions.append(self._has_tag(tag))
        if search:
            pattern = _like_pattern(search)
            conditions.append(
                or_(
                    Contact.name.ilike(pattern, escape="\\"),
                    Contact.phone_number.like(pattern, escape="\\"),
                )
            )
        return conditions

    def _has_tag(self, tag: str) -> ColumnElement[bool]:
        if self.dialect_name == "postgresql":
            return type_coerce(Contact.tags, JSONB).contains([tag])
        # SQLite: the tags JSON array, opened with json_each.
        tags: Any = func.json_each(Contact.tags).table_valued("value")
        return exists(select(1).select_from(tags).where(tags.c.value == tag))
