"""Alembic, driven from code: the migrations ship inside the package."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Apply migrations. Safe to call from inside a running event loop (runs in a thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        command.upgrade(alembic_config(database_url), revision)
        return
    import threading

    errors: list[BaseException] = []

    def run() -> None:
        try:
            command.upgrade(alembic_config(database_url), revision)
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
