"""Alembic, driven from code: the migrations ship inside the package."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Apply migrations (synchronous: env.py runs its own event loop)."""
    command.upgrade(alembic_config(database_url), revision)


def unmanaged_tables(connection: Connection) -> Callable[[str | None, str, Any], bool]:
    """An autogenerate `include_name` that leaves out what only migrations manage: SQLite's
    full-text tables (contacts_fts, knowledge_chunks_fts) and their shadow tables, which no
    model maps."""
    virtual: list[str] = []
    if connection.dialect.name == "sqlite":
        rows = connection.exec_driver_sql(
            "SELECT name FROM sqlite_master"
            " WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%'"
        )
        virtual = [row[0] for row in rows]

    def include_name(name: str | None, type_: str, _parent: Any) -> bool:
        return not (
            type_ == "table"
            and name is not None
            and any(name == table or name.startswith(f"{table}_") for table in virtual)
        )

    return include_name
