"""What the job-engine benchmarks share: a fresh database, an organization and its key, the app
and ONE in-process Dramatiq worker, and the percentile every figure is read with.

```python
def main() -> None:
    args = parser.parse_args()                      # with --database-url, --threads
    result = on_fresh_database(args.database_url, lambda url, var: run(args, url, var))

async def run(args, database_url, var_dir):
    settings = bench_settings(database_url, var_dir, threads=args.threads, ...overrides)
    key = await seed_organization(settings)
    async with running_app(settings) as (client, broker):
        worker = InProcessWorker(broker, threads=args.threads)   # started when the run says
        ...
```
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import dramatiq
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.auth.service import create_api_key
from app.config import Settings
from app.db.engine import create_engine, create_sessionmaker
from app.db.migrate import upgrade
from app.kit import outbox
from app.main import create_app
from app.organizations.service import create_organization
from workers.broker import install_job_engine

SECRET = "bench-secret-key-for-hmac-and-jwt-0123456789"
T = TypeVar("T")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def bench_settings(database_url: str, var_dir: Path, *, threads: int, **overrides: Any) -> Settings:
    """The settings of a benchmark run: no Redis, rate limits and access log out of the way."""
    values: dict[str, Any] = {
        "database_url": database_url,
        "secret_key": SECRET,
        "redis_url": None,
        "rate_limit_per_key": "1000000/s",
        "rate_limit_per_org": "1000000/s",
        "access_log": False,
        "log_level": "warning",
        "var_dir": var_dir,
        "storage_url": f"file://{var_dir / 'objects'}",
        "worker_threads": threads,
    }
    values.update(overrides)
    return Settings(**values)


async def seed_organization(settings: Settings, *, livemode: bool = False) -> str:
    """One organization and a `full_access` key (test mode unless `livemode`); returns it."""
    engine = create_engine(settings.database_url, pool_size=2)
    try:
        async with create_sessionmaker(engine)() as session:
            organization = await create_organization(session, "Bench")
            created = await create_api_key(
                session,
                organization.id,
                name="bench",
                scopes=["full_access"],
                secret_key=SECRET,
                livemode=livemode,
            )
            await session.commit()
    finally:
        await engine.dispose()
    return created.secret


@asynccontextmanager
async def running_app(
    settings: Settings,
) -> AsyncIterator[tuple[httpx.AsyncClient, dramatiq.Broker]]:
    """The app (lifespan included) behind an ASGI client, and the job engine's broker for the
    run's worker; the relay is switched off and the broker closed at the end."""
    broker, _runtime = install_job_engine(settings)
    app = create_app(settings)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://sb", timeout=300
            ) as client:
                yield client, broker
    finally:
        outbox.set_dispatcher(None)
        broker.close()


def on_fresh_database(database_url: str | None, run: Callable[[str, Path], Awaitable[T]]) -> T:
    """Migrate `database_url` (an empty PostgreSQL database) or a new SQLite file, then run."""
    with tempfile.TemporaryDirectory() as directory:
        var_dir = Path(directory)
        url = database_url or f"sqlite+aiosqlite:///{var_dir / 'bench.db'}"
        upgrade(url)
        return asyncio.run(run(url, var_dir))
