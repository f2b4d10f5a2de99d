"""A worker's shutdown ends even when something it closes never would: a driver connection
its holder never gave back, a shared client whose close hangs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from app.db import runner as driver
from app.db.engine import create_engine
from app.db.runner import DriverPool
from tests.conftest import make_settings
from workers import runtime as job_runtime
from workers.runtime import JobRuntime


@pytest.fixture
def postgresql_url(migrated_databases: dict[str, str]) -> str:
    return migrated_databases["postgresql"]  # made outside the test's loop


@pytest.fixture
def sqlite_url(migrated_databases: dict[str, str]) -> str:
    return migrated_databases["sqlite"]


async def test_a_connection_never_given_back_does_not_hold_the_pool_closed(
    postgresql_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver, "CLOSE_SECONDS", 0.3)
    url = postgresql_url
    engine = create_engine(url, pool_size=1)
    pool = DriverPool(url, engine.dialect, 2)
    await pool.open()
    held = asyncio.Event()
    never = asyncio.Event()

    async def abandoned_job() -> None:
        async with pool.runner(transaction=True):  # a connection, in a transaction
            held.set()
            await never.wait()

    holder = asyncio.create_task(abandoned_job())
    try:
        await asyncio.wait_for(held.wait(), 5)
        began = time.monotonic()
        await asyncio.wait_for(pool.close(), 5)  # asyncpg alone would wait for ever
        assert time.monotonic() - began < 2
    finally:
        holder.cancel()
        await asyncio.gather(holder, return_exceptions=True)
        await engine.dispose()


class HangingClient:
    async def aclose(self) -> None:
        await asyncio.Event().wait()


class Client:
    def __init__(self) -> None:
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


def hanging(_settings: object) -> HangingClient:
    return HangingClient()


def client(_settings: object) -> Client:
    return Client()


async def test_a_shared_client_whose_close_hangs_does_not_hold_the_shutdown(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(job_runtime, "CLOSE_STEP_SECONDS", 0.3)
    runtime = JobRuntime(make_settings(sqlite_url, tmp_path))
    await runtime.open()
    runtime.shared(hanging)
    after_it = runtime.shared(client)
    began = time.monotonic()
    await asyncio.wait_for(runtime.close(), 5)
    assert time.monotonic() - began < 2
    assert after_it.closed  # the clients after the hanging one are still closed
