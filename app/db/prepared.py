"""Hot statements built once per shape and compiled once per dialect.

Building a SELECT, computing its cache key and running it through the ORM session costs
several times the query itself (measured: ~4x the CPU of the raw driver for a 20-row page).
A `PreparedStatement` (a read, or a write with or without RETURNING) is built once and
compiled once. In the sessions the service opens on PostgreSQL (`Resources.session`) it runs
on the asyncpg driver, on the session's own connection (same transaction when one is open) or
on a read-only request's `DriverPool`, as a driver-prepared statement with SQLAlchemy's own
bind and result processors applied, so values match what the ORM returns. A read-only session
on a SQLite file sends its reads to the `SqliteReadPool` the same way. Anywhere else (a write
session on SQLite, a session the service did not mark, SWITCHBOARD_PREPARED_ON_DRIVER=false)
the cached statement runs through the session like any ORM query.

A prepared statement outlives the request that built it, so it may carry no values: every
bound parameter is named and valueless (`bindparam("org_id")`), its value given at each
execution. A value captured at build time (`Contact.organization_id == org`) would be frozen
into the statement and served to every later caller, so construction refuses it. Constants
of the statement's shape (a status, a flag) are written with `constant(...)`, which renders
them into the SQL text.
"""

from __future__ import annotations

import re
from collections import namedtuple
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from threading import Lock
from typing import Any, Protocol

from sqlalchemy import (
    Column,
    ColumnElement,
    Integer,
    Select,
    String,
    TextualSelect,
    bindparam,
    false,
    insert,
    inspect,
    literal_column,
    null,
    true,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapper, make_transient_to_detached
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.elements import _anonymous_label

# Shapes come from code (repository x variant x filter names), never from input, so the
# cache stays small; the cap only guards against a programming error.
_MAX_SHAPES = 4096


# Session.info keys: the read pool a read-only request's prepared statements go to, and the
# mark of a session whose prepared statements run on its own asyncpg connection.
READ_POOL = "switchboard.read_pool"
ON_DRIVER = "switchboard.prepared_on_driver"
# The mark's value for a read-only session: its driver statements need no transaction (each
# reads the last committed state, as the read pool's do), so none is opened for them.
READS_ONLY = "reads-only"


class ReadPool(Protocol):
    """Where a read-only session's prepared reads run: `DriverPool` (PostgreSQL) or
    `SqliteReadPool`."""

    dialect: Dialect

    def attach(self, session: AsyncSession) -> None: ...

    async def fetch(self, sql: str, arguments: list[Any]) -> list[Any]: ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    # Bound value names in placeholder order ($1, $2, ...); a name may repeat.
    positions: tuple[str, ...]
    bind_processors: dict[str, Callable[[Any], Any]]
    # Values a dialect renders into every statement of a shape (SQLite's `OFFSET 0`).
    dialect_constants: dict[str, Any]
    row_type: type[tuple[Any, ...]]
    result_processors: tuple[tuple[int, Callable[[Any], Any]], ...]

    def arguments(self, params: dict[str, Any]) -> list[Any]:
        values = []
        for name in self.positions:
            try:
                value = params[name]
            except KeyError:
                if name not in self.dialect_constants:
                    raise KeyError(f"prepared statement parameter {name!r} was not given") from None
                value = self.dialect_constants[name]
            processor = self.bind_processors.get(name)
            values.append(processor(value) if processor is not None else value)
        return values

    def row(self, record: Sequence[Any]) -> tuple[Any, ...]:
        values = list(record)
        for index, processor in self.result_processors:
            values[index] = processor(values[index])
        return tuple.__new__(self.row_type, values)

    def rows(self, records: Sequence[Sequence[Any]]) -> list[Any]:
        if self.result_processors:
            return [self.row(record) for record in records]
        # Hot (every listed row on PostgreSQL, where the driver decodes every type): build
        # the named tuples straight from the records, as namedtuple._make does minus a frame.
        new, row_type = tuple.__new__, self.row_type
        return [new(row_type, record) for record in records]


class PreparedStatement:
    """One SELECT, or INSERT/UPDATE/DELETE with or without RETURNING; rows answer attribute
    access by column key on every path."""

    def __init__(self, statement: Select[*tuple[Any, ...]] | TextualSelect | UpdateBase) -> None:
        # Checked at construction, on the production dialect, whichever one runs it later
        # (SQLite's own upsert syntax on SQLite's).
        check = _SQLITE_DIALECT if isinstance(statement, sqlite.Insert) else _CHECK_DIALECT
        _refuse_values(statement.compile(dialect=check))
        self.statement = statement
        self._compiled: dict[str, _Compiled] = {}

    def compiled(self, dialect: Dialect) -> _Compiled:
        found = self._compiled.get(dialect.name)
        if found is None:
            found = self._compiled[dialect.name] = self._compile(dialect)
        return found

    def _compile(self, dialect: Dialect) -> _Compiled:
        compiled: Any = self.statement.compile(dialect=dialect)
        # bind_names maps each bound parameter to the name its placeholder was rendered with.
        bind_names: dict[Any, str] = compiled.bind_names
        # The statement itself carries no value (refused at construction): a valued parameter
        # here is one the dialect adds to every statement.
        constants = {
            name: bind.effective_value for bind, name in bind_names.items() if not bind.required
        }
        if any(bind.expanding for bind in bind_names):
            raise ValueError(
                "expanding (IN list) parameters are not supported in PreparedStatement"
            )
        if compiled.insert_prefetch or compiled.update_prefetch:
            # Python-side column defaults (onupdate=utcnow...) run in SQLAlchemy's execution,
            # which the driver path skips: such columns must be given explicitly.
            missing = [c.key for c in (*compiled.insert_prefetch, *compiled.update_prefetch)]
            raise ValueError(f"give these columns explicitly in a PreparedStatement: {missing}")
        processors = {}
        for bind, name in bind_names.items():
            processor = bind.type._cached_bind_processor(dialect)
            if processor is not None:
                processors[name] = processor
        columns = list(
            self.statement.selected_columns
            if isinstance(self.statement, Select | TextualSelect)
            else self.statement.exported_columns
        )
        keys = [str(column.key) for column in columns]
        result_processors = []
        for index, column in enumerate(columns):
            processor = column.type._cached_result_processor(dialect, None)
            if processor is not None:
                result_processors.append((index, processor))
        return _Compiled(
            sql=str(compiled),
            positions=tuple(compiled.positiontup or ()),
            bind_processors=processors,
            dialect_constants=constants,
            row_type=namedtuple("PreparedRow", keys),
            result_processors=tuple(result_processors),
        )

    async def all(self, session: AsyncSession, params: dict[str, Any]) -> list[Any]:
        info = session.info
        read_pool: ReadPool | None = info.get(READ_POOL)
        if read_pool is not None:
            compiled = self.compiled(read_pool.dialect)
            return compiled.rows(await read_pool.fetch(compiled.sql, compiled.arguments(params)))
        driver = await _driver_of(session)
        if driver is not None:
            compiled = self.compiled(driver.dialect)
            rows = await driver.connection.fetch(compiled.sql, *compiled.arguments(params))
            return compiled.rows(rows)
        result = await session.execute(self.statement, self.own_params(session, params))
        return list(result.all())

    async def first(self, session: AsyncSession, params: dict[str, Any]) -> Any | None:
        rows = await self.all(session, params)
        return rows[0] if rows else None

    async def execute(self, session: AsyncSession, params: dict[str, Any]) -> int:
        """A write without RETURNING, in the session's transaction (on its asyncpg connection
        where `all` would run there); the number of rows it changed."""
        driver = await _driver_of(session)
        if driver is not None:
            compiled = self.compiled(driver.dialect)
            status: str = await driver.connection.execute(compiled.sql, *compiled.arguments(params))
            # The command tag: "UPDATE 1", "DELETE 0", "INSERT 0 1".
            tail = status.rsplit(" ", 1)[-1]
            return int(tail) if tail.isdigit() else 0
        result = await session.execute(self.statement, self.own_params(session, params))
        return int(getattr(result, "rowcount", 0))

    async def execute_many(self, session: AsyncSession, rows: Sequence[dict[str, Any]]) -> None:
        """A write without RETURNING, once per row of `rows`, in the session's transaction:
        one pipelined `executemany` on its asyncpg connection where `all` would run there."""
        if not rows:
            return
        driver = await _driver_of(session)
        if driver is not None:
            compiled = self.compiled(driver.dialect)
            await driver.connection.executemany(
                compiled.sql, [compiled.arguments(row) for row in rows]
            )
            return
        await session.execute(self.statement, [self.own_params(session, row) for row in rows])

    def own_params(self, session: AsyncSession, params: dict[str, Any]) -> dict[str, Any]:
        # Only the statement's own names: SQLAlchemy turns any other key that names a column
        # into an extra SET/VALUES entry of an UPDATE/INSERT.
        names = self.compiled(session.get_bind().dialect).positions
        return {name: value for name, value in params.items() if name in names}


@dataclass(frozen=True, slots=True)
class _Driver:
    connection: Any
    dialect: Dialect
    # The session's transaction the connection was found in: a session keeps one connection
    # until its transaction ends, so the next statement of the same one reuses it.
    transaction: Any


_DRIVER = "switchboard.prepared_driver"


async def _driver_of(session: AsyncSession) -> _Driver | None:
    """The asyncpg connection of a session marked to run prepared statements on it (in its
    transaction), or None."""
    info = session.info
    mark = info.get(ON_DRIVER)
    if not mark:
        return None
    transaction = session.sync_session.get_transaction()
    driver: _Driver | None = info.get(_DRIVER)
    if transaction is None or driver is None or driver.transaction is not transaction:
        # Found once per transaction: each look-up is two greenlet switches into the ORM.
        connection = await session.connection()
        if connection.dialect.driver != "asyncpg":
            return None
        raw = await connection.get_raw_connection()
        if mark != READS_ONLY:
            await _begun(raw.dbapi_connection)
        driver = _Driver(
            raw.driver_connection, connection.dialect, session.sync_session.get_transaction()
        )
        info[_DRIVER] = driver
    if session.autoflush and (session.new or session.dirty or session.deleted):
        # As the ORM would before a query: the statement sees the session's pending writes.
        await session.flush()
    return driver


async def _begun(adapter: Any) -> None:
    """Open the connection's database transaction now. SQLAlchemy's asyncpg adapter sends
    BEGIN lazily, with its own first statement: a statement sent on the driver before any
    went through SQLAlchemy ran outside the session's transaction (a `FOR UPDATE` lock let
    go at once, a write committed whatever the session did next)."""
    if adapter._transaction is not None:
        return
    async with adapter._execute_mutex:
        if adapter._transaction is None:
            await adapter._start_transaction()  # nothing in autocommit mode


_CHECK_DIALECT = asyncpg_dialect.dialect()  # type: ignore[no-untyped-call]
_SQLITE_DIALECT = sqlite.dialect()
_PLAIN_TEXT = re.compile(r"^[A-Za-z0-9_.:@#/+ -]*$")


class ValueInPreparedStatement(ValueError):
    """A prepared statement was built with a value bound into it."""


def _refuse_values(compiled: Any) -> None:
    for bind in compiled.bind_names:
        anonymous = isinstance(bind.key, _anonymous_label)
        if anonymous or not bind.required or bind.callable is not None:
            shown = bind.key if not anonymous else f"an unnamed parameter ({bind.value!r})"
            raise ValueInPreparedStatement(
                f"prepared statements take no values at build time, got {shown}: use "
                "bindparam(name) and pass the value at execution, or constant() for a "
                "constant of the statement's shape"
            )


def constant(value: str | int | bool | None) -> ColumnElement[Any]:
    """A constant of a prepared statement (`status == constant(PENDING)`), rendered into its
    SQL text. Only plain text and integers: anything else is a value and goes in a bindparam."""
    if value is None:
        return null()
    if isinstance(value, bool):
        return true() if value else false()
    if isinstance(value, int):
        return literal_column(str(int(value)), Integer())
    if not _PLAIN_TEXT.match(value):
        raise ValueError(f"not a plain text constant: {value!r}")
    return literal_column(f"'{value}'", String())


_shapes: dict[Hashable, PreparedStatement] = {}
_shapes_lock = Lock()


def prepared(
    shape: Hashable, build: Callable[[], Select[Any] | TextualSelect | UpdateBase]
) -> PreparedStatement:
    """The statement of `shape`, built by `build` the first time it is asked for."""
    found = _shapes.get(shape)
    if found is not None:
        return found
    with _shapes_lock:
        found = _shapes.get(shape)
        if found is None:
            if len(_shapes) >= _MAX_SHAPES:
                raise RuntimeError("too many prepared statement shapes: is a key built from input?")
            found = _shapes[shape] = PreparedStatement(build())
        return found


class _DefaultContext:
    """What a Python-side column default reads of the row being inserted (SQLAlchemy's
    execution context offers the same `get_current_parameters`)."""

    __slots__ = ("values",)

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def get_current_parameters(self) -> dict[str, Any]:
        return self.values


@dataclass(frozen=True, slots=True)
class _ObjectInsert:
    statement: PreparedStatement
    # Each column of the table with the mapped attribute that holds its value.
    columns: tuple[tuple[Column[Any], str], ...]


_object_inserts: dict[Mapper[Any], _ObjectInsert] = {}


def _object_insert(mapper: Mapper[Any]) -> _ObjectInsert:
    found = _object_inserts.get(mapper)
    if found is None:
        table: Any = mapper.local_table
        columns = tuple(
            (column, mapper.get_property_by_column(column).key) for column in table.columns
        )
        statement = PreparedStatement(
            insert(table).values({column.name: bindparam(column.name) for column, _ in columns})
        )
        found = _object_inserts[mapper] = _ObjectInsert(statement, columns)
    return found


async def insert_object(session: AsyncSession, instance: object) -> None:
    """Write a new mapped object with one prepared INSERT instead of a flush: the unit of
    work cost about twice the statement's own CPU for one object (~430 against ~240 µs,
    docs/benchmarks.md). Python-side column defaults are filled in table order, as a flush
    fills them; every column's value is set on the object, which then joins the session as
    persistent (a later change flushes as an UPDATE). A column with only a server-side
    default must be given; relationships are not written."""
    state: Any = inspect(instance)
    if not state.transient:
        raise ValueError("insert_object writes a new object only (it is already in a session)")
    plan = _object_insert(state.mapper)
    given = state.dict
    values: dict[str, Any] = {}
    for column, key in plan.columns:
        if key in given:
            value = given[key]
        elif column.default is not None and column.default.is_scalar:
            value = column.default.arg  # type: ignore[attr-defined]
        elif column.default is not None and column.default.is_callable:
            value = column.default.arg(_DefaultContext(values))  # type: ignore[attr-defined]
        elif column.default is None and column.server_default is None:
            value = None
        else:
            raise ValueError(f"insert_object: give {key} (its default is computed by SQL)")
        values[column.name] = value
        if key not in given:
            setattr(instance, key, value)
    await plan.statement.execute(session, values)
    make_transient_to_detached(instance)
    session.add(instance)
