"""What the knowledge benches share: an app on a fresh database with one organization."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.db.engine import create_engine, create_sessionmaker  # noqa: E402
from app.main import create_app  # noqa: E402
from app.resources import Resources  # noqa: E402
from tests.conftest import Tenant, TenantFactory, fresh_database, make_settings  # noqa: E402


@dataclass
class BenchApp:
    settings: Settings
    client: httpx.AsyncClient
    resources: Resources
    tenant: Tenant
    tenants: TenantFactory


def fresh(backend: str, directory: Path) -> Any:
    """A fresh migrated database (a context manager yielding its URL); enter it outside any
    event loop (migrations run their own)."""
    return fresh_database(backend, directory, "sb_kbbench")


@asynccontextmanager
async def bench_app(url: str, directory: Path, **overrides: Any) -> AsyncIterator[BenchApp]:
    """The app (in process, over httpx) on the database at `url`, rate limits off."""
    with ExitStack():
        overrides.setdefault("knowledge_upload_rate_limit", "100000/m")
        settings = make_settings(url, directory, **overrides)
        engine = create_engine(url, pool_size=2)
        tenants = TenantFactory(create_sessionmaker(engine))
        app = create_app(settings)
        try:
            async with app.router.lifespan_context(app):
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(
                    transport=transport, base_url="http://bench", timeout=120
                ) as client:
                    tenant = await tenants.organization("bench")
                    yield BenchApp(settings, client, app.state.resources, tenant, tenants)
        finally:
            await engine.dispose()
