"""The outbox relays a transaction's jobs when the whole transaction commits: never at a
savepoint's release (a worker would look for a row not committed yet), and a savepoint's
rollback keeps the jobs scheduled before it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy import Table, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import create_engine, create_sessionmaker
from app.kit import outbox
from app.kit.outbox_models import OutboxJob


@dataclass
class Outbox:
    """An outbox table on its own SQLite file, and the job ids this process relayed."""

    engine: AsyncEngine
    relayed: list[str]


@pytest.fixture
async def relaying(tmp_path: Path) -> AsyncIterator[Outbox]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'outbox.db'}")
    async with engine.begin() as connection:
        await connection.run_sync(
            OutboxJob.metadata.create_all, tables=[cast(Table, OutboxJob.__table__)]
        )
    relayed: list[str] = []
    outbox.set_dispatcher(lambda refs: relayed.extend(ref.id for ref in refs))
    try:
        yield Outbox(engine, relayed)
    finally:
        outbox.set_dispatcher(None)
        await engine.dispose()


async def test_jobs_are_relayed_at_the_commit_of_the_transaction(relaying: Outbox) -> None:
    engine, relayed = relaying.engine, relaying.relayed
    async with create_sessionmaker(engine)() as session:
        first = outbox.schedule(session, "test.job", 1)
        async with session.begin_nested():
            second = outbox.schedule(session, "test.job", 2)
        assert relayed == []  # released, not committed
        with contextlib.suppress(ValueError):
            async with session.begin_nested():
                outbox.schedule(session, "test.job", 3)
                raise ValueError
        assert relayed == []
        await session.commit()
    assert {first, second} <= set(relayed)
    relayed.clear()
    async with create_sessionmaker(engine)() as session:
        outbox.schedule(session, "test.job", 4)
        async with session.begin_nested():
            outbox.schedule(session, "test.job", 5)
        await session.rollback()
        await session.commit()
    assert relayed == []  # rolled back whole: nothing to run


async def test_jobs_of_one_transaction_and_key_are_joined(relaying: Outbox) -> None:
    engine, relayed = relaying.engine, relaying.relayed
    async with create_sessionmaker(engine)() as session:
        first = outbox.schedule_joined(session, "test.fan", "org_a", "e1")
        await session.flush()  # a job already written still takes the later arguments
        assert outbox.schedule_joined(session, "test.fan", "org_a", "e2", "e3") == first
        other = outbox.schedule_joined(session, "test.fan", "org_b", "e4")
        with contextlib.suppress(ValueError):
            async with session.begin_nested():
                outbox.schedule_joined(session, "test.fan", "org_a", "e5")
                raise ValueError
        # After a savepoint's rollback nothing is joined that it may have taken back.
        after = outbox.schedule_joined(session, "test.fan", "org_a", "e6")
        full = [f"x{n}" for n in range(outbox.MAX_JOINED_ARGS)]
        split = outbox.schedule_joined(session, "test.fan", "org_a", *full)
        await session.commit()
        # A new transaction starts new jobs: the committed ones may be running already.
        later = outbox.schedule_joined(session, "test.fan", "org_a", "e7")
        await session.commit()
    async with create_sessionmaker(engine)() as session:
        args = {job.id: job.args for job in (await session.scalars(select(OutboxJob))).all()}
    assert args[first] == ["e1", "e2", "e3"]
    assert args[other] == ["e4"]
    assert args[after] == ["e6"]  # e5 went with its savepoint
    assert args[split] == full
    assert args[later] == ["e7"]
    assert len({first, other, after, split, later}) == 5
    assert set(relayed) == set(args)
