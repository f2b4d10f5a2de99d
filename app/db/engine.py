"""Engine and session factory for SQLite (embedded) and PostgreSQL (production)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.pool import NullPool

from app.core.jsonutil import dumps_str, loads


def sqlite_file(url: str) -> str | None:
    """The file a SQLite URL names (a path or a `file:` URI); None for a database in memory
    and for any other backend."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database:
        return None
    if database == ":memory:" or "mode=memory" in url:
        return None
    return database


def _install_sqlite_pragmas(engine: AsyncEngine) -> None:
    """WAL + foreign keys, and driver-level transactions off so SAVEPOINT works."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=5000")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        # Writers ask for IMMEDIATE (execution option `sqlite_begin`): taking the write lock up
        # front avoids SQLITE_BUSY when a read transaction later upgrades; readers stay DEFERRED.
        mode = connection.get_execution_options().get("sqlite_begin", "DEFERRED")
        if mode not in {"DEFERRED", "IMMEDIATE"}:
            raise ValueError(f"unsupported sqlite_begin mode {mode!r}")
        connection.exec_driver_sql(f"BEGIN {mode}")


def create_engine(url: str, *, pool_size: int = 10, null_pool: bool = False) -> AsyncEngine:
    """An async engine with the right pool and per-backend settings."""
    kwargs: dict[str, Any] = {
        "json_serializer": dumps_str,
        "json_deserializer": loads,
    }
    backend = make_url(url).get_backend_name()
    if null_pool:
        kwargs["poolclass"] = NullPool
    elif backend == "postgresql":
        # No overflow: connections opened past the pool are closed on return, and under
        # sustained load that churn (a server process fork each) dominated request cost.
        kwargs.update(pool_size=pool_size, max_overflow=0, pool_timeout=30)
    if backend == "sqlite":
        kwargs["connect_args"] = {"timeout": 30}
        database = sqlite_file(url)
        if database is not None and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        if not null_pool and database is not None:
            # aiosqlite gives every connection a thread of its own: past SQLAlchemy's default
            # 5 pooled connections each session opened a thread and the file (and closed them
            # on return). Twenty live calls searching knowledge at once spent most of a turn
            # there (docs/benchmarks.md); the pool now keeps as many as PostgreSQL's.
            kwargs.update(pool_size=pool_size, max_overflow=pool_size)
    engine = create_async_engine(url, **kwargs)
    if backend == "sqlite":
        _install_sqlite_pragmas(engine)
    return engine


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
