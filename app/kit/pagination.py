"""The three list envelopes of docs/api.md, and the inputs that drive them.

A: page/limit (campaigns, templates). B: page/page_size (call logs).
C: cursor (`starting_after` / `ending_before`), the general scheme for collections.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from app.kit.errors import InvalidInput

T = TypeVar("T")

MAX_LIMIT = 100


@dataclass(frozen=True, slots=True)
class CursorParams:
    limit: int = 20
    starting_after: str | None = None
    ending_before: str | None = None
    # How the surface names the two cursors, for errors: REST's query parameters by default,
    # GraphQL's `after`/`before` arguments.
    after_name: str = "starting_after"
    before_name: str = "ending_before"

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_LIMIT:
            raise InvalidInput(f"limit must be between 1 and {MAX_LIMIT}", field="limit")
        if self.starting_after and self.ending_before:
            raise InvalidInput(
                f"{self.after_name} and {self.before_name} cannot be used together",
                field=self.after_name,
            )


@dataclass(frozen=True, slots=True)
class CursorPage(Generic[T]):
    """One page of a cursor-paginated list, newest first."""

    items: Sequence[T]
    has_more: bool
    total_count: int
    # Whether there are items on the other side of the cursor (newer ones), for GraphQL.
    has_previous: bool = False


def envelope_c(items: list[dict[str, Any]], page: CursorPage[Any]) -> dict[str, Any]:
    return {
        "object": "list",
        "data": items,
        "has_more": page.has_more,
        "next_cursor": items[-1]["id"] if items else None,
        "total_count": page.total_count,
    }


@dataclass(frozen=True, slots=True)
class PageParams:
    """Page-number paging (envelopes A and B): page starts at 1."""

    page: int = 1
    size: int = 100

    def __post_init__(self) -> None:
        if self.page < 1:
            raise InvalidInput("page must be 1 or greater", field="page")
        if not 1 <= self.size <= MAX_LIMIT:
            raise InvalidInput(f"limit must be between 1 and {MAX_LIMIT}", field="limit")

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.size


@dataclass(frozen=True, slots=True)
class NumberedPage(Generic[T]):
    items: Sequence[T]
    total: int
    params: PageParams

    @property
    def has_more(self) -> bool:
        return self.params.offset + len(self.items) < self.total


def envelope_a(items: list[dict[str, Any]], page: NumberedPage[Any]) -> dict[str, Any]:
    return {
        "has_more": page.has_more,
        "total": page.total,
        "page": page.params.page,
        "limit": page.params.size,
        "items": items,
    }


def envelope_b(items: list[dict[str, Any]], page: NumberedPage[Any]) -> dict[str, Any]:
    return {
        "total": page.total,
        "page": page.params.page,
        "page_size": page.params.size,
        "items": items,
    }
