"""App factories for `switchboard serve` (uvicorn imports them by name)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette

from app.config import get_settings
from app.main import create_app
from workers.broker import InProcessWorker, install_job_engine


def create_embedded_app() -> Starlette:
    """`switchboard serve` without Redis: the API plus worker threads in the same process."""
    settings = get_settings()
    broker, _runtime = install_job_engine(settings)
    worker = InProcessWorker(broker, threads=settings.worker_threads)

    @asynccontextmanager
    async def with_worker() -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:
            worker.stop()

    return create_app(settings, background=with_worker)


def create_api_app() -> Starlette:
    """`switchboard serve` with Redis, or `--no-worker`: no job runs in this process.

    With Redis, committed jobs go to the broker at once; without it (`--no-worker` and no
    Redis) they wait in the outbox for the sweep of a process that runs a worker.
    """
    settings = get_settings()
    if settings.redis_url:
        install_job_engine(settings)
    return create_app(settings)
