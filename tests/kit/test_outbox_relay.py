"""The outbox relays a transaction's jobs when the whole transaction commits: never at a
savepoint's release (a worker would look for a row not committed yet), and a savepoint's
rollback keeps the jobs scheduled before it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import cast

from sqlalchemy import Table

from app.db.engine import create_engine, create_sessionmaker
from app.kit import outbox
from app.kit.outbox_models import OutboxJob


async def test_jobs_are_relayed_at_the_commit_of_the_transaction(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'outbox.db'}")
    async with engine.begin() as connection:
        await connection.run_sync(
            OutboxJob.metadata.create_all, tables=[cast(Table, OutboxJob.__table__)]
        )
    relayed: list[str] = []
    outbox.set_dispatcher(lambda refs: relayed.extend(ref.id for ref in refs))
    try:
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
    finally:
        outbox.set_dispatcher(None)
        await engine.dispose()
