"""Fencing: a run that outlived its lease cannot settle a job another run has claimed since.

Every claim carries a fresh token; finish, reschedule and the delivery's success statement
present it, and a stale run's settlement raises `StaleRun` with every write of its transaction
rolled back. On SQLite (session statements) and PostgreSQL (driver statements, and the
delivery's single-statement success record).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import delete, select

from app.config import JOB_LEASE_MARGIN_SECONDS
from app.core.clock import utcnow
from app.events.models import Event
from app.jobs import JobContext
from app.kit import outbox
from app.kit.outbox_models import OutboxJob
from app.webhooks import delivery
from app.webhooks.models import WebhookDelivery, WebhookDeliveryAttempt, WebhookSubscription
from app.webhooks.sender import AttemptOutcome
from app.webhooks.signing import generate_secret
from tests.conftest import TenantFactory, fresh_database, make_settings
from workers.runtime import JobRuntime, run_job

TIMEOUT_SECONDS = 0.1
LEASE_SECONDS = TIMEOUT_SECONDS + JOB_LEASE_MARGIN_SECONDS  # the shortest lease accepted


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def committed_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with fresh_database(request.param, tmp_path_factory.mktemp("fencing"), "sb_fence") as url:
        yield url


@pytest.fixture(params=[True, False], ids=["driver", "sqlalchemy"])
async def runtime(
    committed_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[JobRuntime]:
    """A worker's runtime without the worker: no actor is known, so its sweep sends nothing.
    Its job statements run on the driver and, switched off, through SQLAlchemy sessions
    (SWITCHBOARD_PREPARED_ON_DRIVER; one runner either way on SQLite)."""
    settings = make_settings(
        committed_url,
        tmp_path,
        webhook_timeout_seconds=TIMEOUT_SECONDS,
        job_lease_seconds=LEASE_SECONDS,
        knowledge_extraction_seconds=TIMEOUT_SECONDS,
        outbox_sweep_seconds=60,
        prepared_on_driver=request.param,
    )
    runtime = JobRuntime(settings)
    outbox.set_dispatcher(None)
    await runtime.open()
    try:
        yield runtime
    finally:
        async with runtime.resources.session(writes=True) as session:
            await session.execute(delete(OutboxJob))
            await session.commit()
        await runtime.close()


async def schedule(runtime: JobRuntime, actor: str, *args: Any) -> str:
    async with runtime.resources.session(writes=True) as session:
        job_id = outbox.schedule(session, actor, *args)
        await session.commit()
    return job_id


async def claim(runtime: JobRuntime, job_id: str, lease: float) -> outbox.ClaimedJob | None:
    async with runtime.statements(transaction=False) as runner:
        return await outbox.claim(runner, job_id, lease_seconds=lease, max_starts=5)


async def job_row(runtime: JobRuntime, job_id: str) -> OutboxJob | None:
    async with runtime.resources.session(writes=False) as session:
        return await session.get(OutboxJob, job_id, populate_existing=True)


async def test_a_run_held_past_its_lease_cannot_settle_after_a_second_claim(
    runtime: JobRuntime,
) -> None:
    job_id = await schedule(runtime, "tests.held")
    release = asyncio.Event()
    started = asyncio.Event()
    runs: list[str] = []

    async def body(job: JobContext) -> None:
        runs.append(job.token)
        started.set()
        run = len(runs)
        if run == 1:
            await release.wait()  # held (a frozen process) past the lease
        async with job.runtime.resources.session(writes=True) as session:
            outbox.schedule(session, "tests.written_by", run)  # this run's own write
            await job.settle(session, None)
            await session.commit()
        return None

    first = asyncio.create_task(run_job(runtime, job_id, body))
    await started.wait()
    await run_job(runtime, job_id, body)
    assert len(runs) == 1  # within the lease a second run finds the job taken

    await asyncio.sleep(LEASE_SECONDS + 0.1)
    await run_job(runtime, job_id, body)  # the lease ran out: a second run claims and settles
    assert len(runs) == 2
    assert runs[0] != runs[1]
    release.set()
    await first  # the stale run settles last: refused, its write rolled back

    async with runtime.resources.session(writes=False) as session:
        written = (
            await session.scalars(
                select(OutboxJob.args).where(OutboxJob.actor == "tests.written_by")
            )
        ).all()
    assert written == [[2]]
    assert await job_row(runtime, job_id) is None  # finished by the second run


async def test_a_stale_token_neither_finishes_nor_reschedules(runtime: JobRuntime) -> None:
    job_id = await schedule(runtime, "tests.held")
    stale = await claim(runtime, job_id, lease=0.05)
    assert stale is not None
    await asyncio.sleep(0.1)
    fresh = await claim(runtime, job_id, lease=60)
    assert fresh is not None
    later = utcnow() + timedelta(hours=1)
    async with runtime.statements(transaction=False) as runner:
        with pytest.raises(outbox.StaleRun):
            await outbox.finish(runner, job_id, stale.token)
        with pytest.raises(outbox.StaleRun):
            await outbox.reschedule(runner, job_id, stale.token, later, error="late")
    row = await job_row(runtime, job_id)
    assert row is not None
    assert (row.claim_token, row.starts, row.last_error) == (fresh.token, 2, None)
    async with runtime.statements(transaction=False) as runner:
        await outbox.reschedule(runner, job_id, fresh.token, later)
    row = await job_row(runtime, job_id)
    assert row is not None
    assert row.available_at == later
    async with runtime.statements(transaction=False) as runner:
        with pytest.raises(outbox.StaleRun):  # a rescheduled job is held by nobody
            await outbox.finish(runner, job_id, fresh.token + "x")


async def test_a_stale_delivery_run_records_no_success(runtime: JobRuntime) -> None:
    sessionmaker = runtime.resources.sessionmaker
    tenant = await TenantFactory(sessionmaker).organization()
    async with sessionmaker() as session:
        subscription = WebhookSubscription(
            organization_id=tenant.organization_id,
            url="http://127.0.0.1:9/hook",
            secret=generate_secret(),
            events=["lead.created"],
            failing_since=utcnow(),
        )
        event = Event(
            id="evt_" + uuid.uuid4().hex,  # the database outlives one run of the test
            organization_id=tenant.organization_id,
            type="lead.created",
            data={"id": "x"},
        )
        session.add_all([subscription, event])
        await session.flush()
        created = delivery._new_delivery(event, subscription)
        session.add(created)
        job_id = outbox.schedule(session, delivery.DELIVER_ACTOR, created.id)
        await session.commit()
    async with runtime.statements(transaction=False) as runner:
        target = await delivery.load_target(runner, created.id)
    assert target is not None
    outcome = AttemptOutcome(200, 5, None, "ok", None)

    stale = await claim(runtime, job_id, lease=0.05)
    await asyncio.sleep(0.1)
    fresh = await claim(runtime, job_id, lease=60)
    assert stale is not None
    assert fresh is not None
    with pytest.raises(outbox.StaleRun):
        async with runtime.statements(transaction=False) as runner:
            await delivery.record_success_and_finish(runner, target, outcome, job_id, stale.token)

    async def state() -> tuple[Any, ...]:
        async with sessionmaker() as session:
            row = await session.get(WebhookDelivery, created.id)
            sub = await session.get(WebhookSubscription, subscription.id)
            attempts = (
                await session.scalars(
                    select(WebhookDeliveryAttempt.attempt).where(
                        WebhookDeliveryAttempt.delivery_id == created.id
                    )
                )
            ).all()
            assert row is not None
            assert sub is not None
            return row.status, list(attempts), sub.failing_since is None

    assert await state() == ("pending", [], False)  # nothing of the stale run was written
    assert await job_row(runtime, job_id) is not None
    async with runtime.statements(transaction=False) as runner:
        await delivery.record_success_and_finish(runner, target, outcome, job_id, fresh.token)
    assert await state() == ("succeeded", [1], True)
    assert await job_row(runtime, job_id) is None


def test_the_lease_must_outlast_an_attempt(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    quick = {"knowledge_extraction_seconds": 5}
    with pytest.raises(ValidationError, match="job_lease_seconds"):
        make_settings(url, tmp_path, webhook_timeout_seconds=10, job_lease_seconds=11, **quick)
    settings = make_settings(
        url, tmp_path, webhook_timeout_seconds=10, job_lease_seconds=12, **quick
    )
    assert settings.job_lease_seconds == 12


def test_the_default_lease_outlasts_the_default_attempt(tmp_path: Path) -> None:
    settings = make_settings(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", tmp_path)
    assert settings.job_lease_seconds >= settings.webhook_timeout_seconds + JOB_LEASE_MARGIN_SECONDS
    assert (
        settings.job_lease_seconds
        >= settings.knowledge_extraction_seconds + JOB_LEASE_MARGIN_SECONDS
    )


def test_the_lease_must_outlast_an_extraction(tmp_path: Path) -> None:
    """A lease shorter than the extraction limit parked slow documents in `indexing` forever
    (each run went stale before it could finish): refused at start-up, like the webhook
    timeout."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(ValidationError) as refused:
        make_settings(url, tmp_path, knowledge_extraction_seconds=90, job_lease_seconds=60)
    assert "job_lease_seconds (60) must be at least the extraction limit plus 2 s (92)" in str(
        refused.value
    )
    settings = make_settings(url, tmp_path, knowledge_extraction_seconds=90, job_lease_seconds=92)
    assert settings.job_lease_seconds == 92
