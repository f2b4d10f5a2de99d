"""Every query on inbox tickets, and on the contact briefs they embed, scoped to one
organization. Ticket reads join their contact, so a ticket or a page of them is one statement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, Select, bindparam, select
from sqlalchemy.engine.result import result_tuple

from app.contacts.models import Contact
from app.core.ids import normalize_id
from app.db.prepared import constant
from app.inbox.models import Ticket, TicketStatus
from app.inbox.schemas import BRIEF_COLUMNS, TICKET
from app.kit.repository import Filter, OrgScopedRepository


def joined_row(ticket: Ticket, brief: Any) -> Any:
    """A ticket entity just written and its contact's brief (a row with the brief's columns)
    as the row a read of `list_columns` gives: what every ticket operation returns."""
    return _make_row(
        tuple(
            getattr(brief, key) if key in _BRIEF_KEYS else getattr(ticket, key) for key in _ROW_KEYS
        )
    )


def _with_contact(statement: Select[Any]) -> Select[Any]:
    return statement.join_from(Ticket, Contact, Contact.id == Ticket.contact_id)


def _status_is() -> ColumnElement[bool]:
    return Ticket.status == bindparam("status")


class TicketRepository(OrgScopedRepository[Ticket]):
    model = Ticket
    resource = "Ticket"
    moded = True
    list_columns: ClassVar = TICKET.columns()  # the ticket's and its contact's brief

    def filters(self, *, status: str | None) -> list[Filter]:
        return [Filter("status", _status_is, {"status": status})] if status else []

    def _page_statement(self, direction: str, filters: Sequence[Filter]) -> Select[Any]:
        return _with_contact(super()._page_statement(direction, filters))

    async def get_row(self, object_id: str) -> Any | None:
        """The ticket with its contact's brief columns, only in this organization."""
        return await self._row_by_id(
            object_id, "get_row", lambda: _with_contact(select(*self.list_columns))
        )

    async def get_row_for_update_with(
        self, object_id: str, name: str, extend: Callable[[Select[Any]], Select[Any]]
    ) -> tuple[Any, tuple[Any, ...]] | None:
        """`get_row` with the ticket's row locked as `get_for_update` locks it and, in the
        same statement, what `extend` adds under the shape `name` (another domain's row of
        the ticket, joined and locked with it: an AI reply's state), for a caller that reads
        the ticket under the lock and changes other rows only: the ticket's row and the
        added values."""
        width = len(self.list_columns)
        row = await self._row_by_id(
            object_id,
            name,
            lambda: extend(_with_contact(select(*self.list_columns)).with_for_update(of=Ticket)),
        )
        if row is None:
            return None
        values = tuple(row)
        return _make_row(values[:width]), values[width:]

    async def get_for_update(self, object_id: str) -> Any | None:
        """(Ticket entity, brief columns) of a ticket about to change, its row locked on
        PostgreSQL so concurrent moves of one ticket run one after the other."""
        canonical = normalize_id(object_id)
        if canonical is None:
            return None
        statement = _with_contact(
            select(Ticket, Ticket.contact_id, *BRIEF_COLUMNS).where(
                self._org_bound(), Ticket.id == canonical
            )
        ).with_for_update(of=Ticket)
        found = (await self._execute(statement)).first()
        if found is None:
            await self._refuse_if_live(canonical)
        return found

    async def find_open(self, contact_id: str, livemode: bool) -> Any | None:
        """The contact's open ticket in that mode (at most one: a partial unique index)."""
        read = self._prepared(
            ("find_open",),
            lambda: _with_contact(
                select(*self.list_columns).where(
                    self._org_bound(),
                    Ticket.contact_id == bindparam("contact_id"),
                    Ticket.livemode == bindparam("livemode"),
                    Ticket.status == constant(TicketStatus.OPEN.value),
                )
            ),
        )
        return await read.first(
            self.session, self._bound({"contact_id": contact_id, "livemode": livemode})
        )

    async def open_for_contacts(self, contact_ids: Sequence[str]) -> list[Any]:
        """The open tickets of these contacts, in one statement (GraphQL `openTicket`); a
        contact with one in each mode has its live one last."""
        if not contact_ids:
            return []
        statement = _with_contact(
            select(*self.list_columns).where(
                self._org_bound(),
                Ticket.contact_id.in_(list(contact_ids)),
                Ticket.status == TicketStatus.OPEN.value,
            )
        ).order_by(Ticket.livemode)  # a live viewer's contact may have one of each: live last
        return list((await self._execute(statement)).all())

    async def contact_brief(self, contact_id: str) -> Any | None:
        """A contact of this organization, in the brief's columns, or None."""
        canonical = normalize_id(contact_id)
        if canonical is None:
            return None
        read = self._prepared(
            ("contact_brief",),
            lambda: select(Contact.id.label("contact_id"), *BRIEF_COLUMNS).where(
                self._org_bound(Contact), Contact.id == bindparam("contact_id")
            ),
        )
        return await read.first(self.session, self._bound({"contact_id": canonical}))


_ROW_KEYS = tuple(column.key for column in TicketRepository.list_columns)
_BRIEF_KEYS = frozenset(column.key for column in BRIEF_COLUMNS)
_make_row = result_tuple(_ROW_KEYS)
