"""Settings with a known app secret and verify token, the templates tests' job drain, and a
worker path for the jobs that settle themselves."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import orjson
import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import Settings
from app.core.clock import utcnow
from app.db.runner import SessionRunner, StatementRunner
from app.integrations.whatsapp import payloads
from app.kit.outbox_models import OutboxJob
from app.resources import Resources
from tests.conftest import Tenant, make_settings
from tests.integrations.whatsapp.fake_graph import FakeGraph
from tests.templates.conftest import Jobs, create_channel
from workers.jobs import collect_tasks
from workers.runtime import run_job

APP_SECRET = "meta-app-secret-for-tests"
PHONE_ID = "106540352242922"
VERIFY_TOKEN = "verify-me-please"
T = TypeVar("T")


@pytest.fixture
def settings(database_url: str, tmp_path: Path, platform: FakeGraph) -> Settings:
    return make_settings(
        database_url,
        tmp_path,
        whatsapp_app_secret=APP_SECRET,
        whatsapp_verify_token=VERIFY_TOKEN,
        graph_api_url=platform.base_url,
    )


@pytest.fixture
def jobs(resources: Resources, sessionmaker: async_sessionmaker[AsyncSession]) -> Jobs:
    return Jobs(resources, sessionmaker)


@pytest.fixture
async def channel(client: httpx.AsyncClient, acme: Tenant) -> dict[str, Any]:
    """Acme's test-mode channel for the number the webhooks of these tests name."""
    return await create_channel(client, acme, PHONE_ID)


class JobWorker:
    """Runs an outbox job the way a worker does (workers/runtime.py `run_job`: the claim,
    the body, its settlement), inside the test's transaction; a job not due yet runs at once
    (the test skips the wait)."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.settings = resources.settings
        self.tasks = collect_tasks()

    @asynccontextmanager
    async def statements(self, *, transaction: bool = True) -> AsyncIterator[StatementRunner]:
        async with self.resources.session(writes=True) as session:
            yield SessionRunner(session)
            await session.commit()

    def shared(self, factory: Callable[[Settings], T]) -> T:
        return factory(self.settings)

    def hand_over(self, refs: Any) -> None:
        """Committed jobs stay in the outbox, where the test finds them."""

    async def run(self, job_id: str) -> None:
        async with self.resources.session(writes=True) as session:
            actor = await session.scalar(select(OutboxJob.actor).where(OutboxJob.id == job_id))
            assert actor is not None, f"no job {job_id}"
            await session.execute(
                update(OutboxJob).where(OutboxJob.id == job_id).values(available_at=utcnow())
            )
            await session.commit()
        await run_job(self, job_id, self.tasks[actor].body)  # type: ignore[arg-type]


@pytest.fixture
def worker(resources: Resources) -> JobWorker:
    return JobWorker(resources)


async def post_signed(
    client: httpx.AsyncClient, payload: dict[str, Any], secret: str = APP_SECRET
) -> httpx.Response:
    """A platform webhook body POSTed as Meta posts it: JSON signed with the app secret."""
    body = orjson.dumps(payload)
    return await client.post(
        "/webhooks/whatsapp",
        content=body,
        headers={
            "Content-Type": "application/json",
            payloads.SIGNATURE_HEADER: payloads.sign(secret, body),
        },
    )
