"""Relay-style connection arguments mapped onto the cursor pages services return."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import strawberry

from app.kit.errors import InvalidInput
from app.kit.pagination import MAX_LIMIT, CursorPage, CursorParams


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


def cursor_params(
    first: int | None, after: str | None, last: int | None, before: str | None
) -> CursorParams:
    """first/after walk towards older records; last/before towards newer ones."""
    if first is not None and last is not None:
        raise InvalidInput("use either first or last, not both", field="first")
    if last is not None or before is not None:
        if before is None:
            raise InvalidInput("last requires before", field="last")
        return CursorParams(limit=_bounded(last, "last"), ending_before=before)
    return CursorParams(limit=_bounded(first, "first"), starting_after=after)


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
