"""Relay-style connection arguments mapped onto the cursor pages services return."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, Protocol, TypeVar

import strawberry
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.graphql.errors import as_graphql_error
from app.kit.errors import DomainError, InvalidInput
from app.kit.pagination import MAX_LIMIT, CursorPage, CursorParams, NumberedPage


@strawberry.type
class PageInfo:
    has_next_page: bool
    has_previous_page: bool
    start_cursor: str | None
    end_cursor: str | None


NodeT = TypeVar("NodeT")


@strawberry.type
class Edge(Generic[NodeT]):
    cursor: str
    node: NodeT


@strawberry.type
class Connection(Generic[NodeT]):
    """A page of nodes; named `<Node>Connection` (and `<Node>Edge`) in the schema."""

    nodes: list[NodeT]
    page_info: PageInfo
    total_count: int

    @strawberry.field
    def edges(self) -> list[Edge[NodeT]]:
        return [Edge(cursor=node.id, node=node) for node in self.nodes]  # type: ignore[attr-defined]


# Cursor errors name GraphQL's arguments, not REST's query parameters.
_NAMES = {"after_name": "after", "before_name": "before"}


def cursor_params(
    first: int | None, after: str | None, last: int | None, before: str | None
) -> CursorParams:
    """first/after walk towards older records; last/before towards newer ones."""
    if first is not None and last is not None:
        raise InvalidInput("use either first or last, not both", field="first")
    if last is not None or before is not None:
        if before is None:
            raise InvalidInput("last requires before", field="last")
        return CursorParams(limit=_bounded(last, "last"), ending_before=before, **_NAMES)
    return CursorParams(limit=_bounded(first, "first"), starting_after=after, **_NAMES)


def _bounded(value: int | None, name: str) -> int:
    if value is None:
        return 20
    if not 1 <= value <= MAX_LIMIT:
        raise InvalidInput(f"{name} must be between 1 and {MAX_LIMIT}", field=name)
    return value


def page_info(page: CursorPage[Any], ids: list[str], backwards: bool) -> PageInfo:
    return PageInfo(
        has_next_page=page.has_previous if backwards else page.has_more,
        has_previous_page=page.has_more if backwards else page.has_previous,
        start_cursor=ids[0] if ids else None,
        end_cursor=ids[-1] if ids else None,
    )


class _ReadContext(Protocol):
    def db(self) -> AbstractAsyncContextManager[AsyncSession]: ...

    def require_subject(self) -> Subject: ...


ListPage = Callable[[AsyncSession, Subject, CursorParams], Awaitable[CursorPage[Any]]]
ConnectionArguments = tuple[int | None, str | None, int | None, str | None]


async def connection(
    context: _ReadContext,
    arguments: ConnectionArguments,
    list_page: ListPage,
    as_node: Callable[[Any], NodeT],
) -> Connection[NodeT]:
    """The connection of one list field: `arguments` are its (first, after, last, before),
    `list_page` the service call that reads the page, `as_node` turns a row into a node."""
    first, after, last, before = arguments
    try:
        params = cursor_params(first, after, last, before)
        async with context.db() as session:
            page = await list_page(session, context.require_subject(), params)
    except DomainError as exc:
        raise as_graphql_error(exc) from exc
    nodes = [as_node(row) for row in page.items]
    return Connection(
        nodes=nodes,
        page_info=page_info(page, [node.id for node in nodes], before is not None),  # type: ignore[attr-defined]
        total_count=page.total_count,
    )


PageT = TypeVar("PageT")


def numbered_page(
    page_type: Callable[..., PageT], found: NumberedPage[Any], as_node: Callable[[Any], Any]
) -> PageT:
    """A page-numbered GraphQL page (`items total page limit hasMore`, REST's envelope A)."""
    return page_type(
        items=[as_node(row) for row in found.items],
        total=found.total,
        page=found.params.page,
        limit=found.params.size,
        has_more=found.has_more,
    )
