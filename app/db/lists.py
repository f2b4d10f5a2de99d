"""`column IN (…)` for lists of any length: one array parameter on PostgreSQL (one prepared
statement whatever the length, no parameter per value), chunks of bound values elsewhere
(SQLite caps the parameters of a statement)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, any_, literal, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

T = TypeVar("T")
# Values per statement where each is a bound parameter of its own (SQLite has taken up to
# 32,766 since 3.32).
CHUNK = 5000


def _is_postgresql(session: AsyncSession) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def chunks(session: AsyncSession, values: Sequence[T]) -> Iterator[Sequence[T]]:
    """`values` in as few pieces as one statement each can take."""
    step = max(len(values), 1) if _is_postgresql(session) else CHUNK
    for start in range(0, len(values), step):
        yield values[start : start + step]


def one_of(session: AsyncSession, column: Any, values: Sequence[Any]) -> ColumnElement[bool]:
    """`column` equals one of `values` (a piece `chunks` gave)."""
    if _is_postgresql(session):
        return column == any_(literal(list(values), ARRAY(column.type)))  # type: ignore[no-any-return]
    return column.in_(list(values))  # type: ignore[no-any-return]


async def present(
    session: AsyncSession, column: Any, values: Sequence[Any], *conditions: Any
) -> set[Any]:
    """Which of `values` some row (meeting `conditions`) has in `column`."""
    found: set[Any] = set()
    for chunk in chunks(session, values):
        rows = await session.scalars(
            select(column).where(one_of(session, column, chunk), *conditions)
        )
        found.update(value for value in rows if value is not None)
    return found
