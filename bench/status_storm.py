"""Status storms: one organization's storm of statuses about unknown messages, against another
organization's job latency, through the real job engine.

Migrates a fresh database (SQLite file by default, or `--database-url` naming an empty
PostgreSQL database), creates org A and org B with a test-mode channel each, starts ONE
in-process Dramatiq worker (`--threads`) beside the API app (ASGI, in process), then:

  idle    org B submits message templates one after another for `--idle-seconds`; latency =
          from the POST until the template reads APPROVED (the submit job on the platform
          simulator, then the job of its review callback)
  attack  org A posts `--bodies` signed webhook bodies of `--statuses` statuses each, every
          one about an id nobody holds (the issue's storm: one such body made 30,000 retry
          jobs), while org B goes on submitting templates for `--attack-seconds`: through
          the storm's requests and the retries that follow them (`--continuous`: org A
          keeps posting storm bodies back to back the whole time)

It prints org B's p50/p95/max latency in each phase, their ratio (the target: under attack
below 2x idle), the API time of each storm body, the outbox jobs the storm left (by queue)
and how many statuses wait parked, and ends with a one-line JSON summary. It never asserts on
time. Run: ``.venv/bin/python bench/status_storm.py [--bodies 3] [--attack-seconds 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy import func, select

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from app.auth.service import create_api_key  # noqa: E402
from app.config import Settings  # noqa: E402
from app.conversations.models import ParkedStatus  # noqa: E402
from app.db.engine import create_engine, create_sessionmaker  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.integrations.whatsapp import payloads  # noqa: E402
from app.kit import outbox  # noqa: E402
from app.kit.outbox_models import OutboxJob  # noqa: E402
from app.main import create_app  # noqa: E402
from app.organizations.service import create_organization  # noqa: E402
from workers.broker import InProcessWorker, install_job_engine  # noqa: E402

SECRET = "bench-secret-key-for-hmac-and-jwt-0123456789"
APP_SECRET = "bench-meta-app-secret"
WABA = "102290129340398"
NUMBER_A, NUMBER_B = "100000000000001", "100000000000002"
BODY = [
    {"type": "BODY", "text": "Hi {{1}}, your order shipped.", "example": {"body_text": [["A"]]}}
]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def figures(latencies: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(latencies), 1),
        "p95_ms": round(percentile(latencies, 0.95), 1),
        "max_ms": round(max(latencies), 1),
    }


async def seed(settings: Settings) -> tuple[str, str]:
    engine = create_engine(settings.database_url, pool_size=2)
    keys = []
    async with create_sessionmaker(engine)() as session:
        for name in ("Org A", "Org B"):
            organization = await create_organization(session, name)
            created = await create_api_key(
                session, organization.id, name="bench", scopes=["full_access"], secret_key=SECRET
            )
            keys.append(created.secret)
        await session.commit()
    await engine.dispose()
    return keys[0], keys[1]


async def outbox_state(settings: Settings) -> dict[str, Any]:
    engine = create_engine(settings.database_url, pool_size=1)
    try:
        async with create_sessionmaker(engine)() as session:
            queues = dict(
                (
                    await session.execute(
                        select(OutboxJob.queue, func.count()).group_by(OutboxJob.queue)
                    )
                ).all()
            )
            parked = await session.scalar(select(func.count()).select_from(ParkedStatus))
    finally:
        await engine.dispose()
    return {"jobs_by_queue": queues, "parked_statuses": int(parked or 0)}


def storm_body(count: int, round_: int) -> bytes:
    statuses = [{"id": f"storm-{round_}-{n}", "status": "read"} for n in range(count)]
    return orjson.dumps(payloads.messages_change(WABA, NUMBER_A, "+14155550100", statuses=statuses))


class Bench:
    def __init__(self, client: httpx.AsyncClient, key_a: str, key_b: str) -> None:
        self.client = client
        self.headers_a = {"Authorization": f"Bearer {key_a}"}
        self.headers_b = {"Authorization": f"Bearer {key_b}"}
        self.channel_b = ""
        self.submitted = 0
        self.storm_ms: list[float] = []

    async def channels(self) -> None:
        for number, headers in ((NUMBER_A, self.headers_a), (NUMBER_B, self.headers_b)):
            response = await self.client.post(
                "/api/v1/channels",
                json={
                    "display_phone_number": "+14155550100",
                    "phone_number_id": number,
                    "business_account_id": WABA,
                    "access_token": "EAAGbench",
                },
                headers=headers,
            )
            assert response.status_code == 201, response.text
            if number == NUMBER_B:
                self.channel_b = response.json()["id"]

    async def approval(self) -> float:
        """One template of org B, from the POST until it reads APPROVED (ms)."""
        self.submitted += 1
        started = time.perf_counter()
        created = await self.client.post(
            "/api/v1/templates",
            json={
                "channel_id": self.channel_b,
                "name": f"order_shipped_{self.submitted}",
                "language": "en_US",
                "category": "UTILITY",
                "components": BODY,
            },
            headers=self.headers_b,
        )
        assert created.status_code == 201, created.text
        url = f"/api/v1/templates/{created.json()['id']}"
        while True:
            found = (await self.client.get(url, headers=self.headers_b)).json()
            if found["status"] == "APPROVED":
                return (time.perf_counter() - started) * 1000
            if time.perf_counter() - started > 300:
                raise RuntimeError(f"template never approved: {found}")
            await asyncio.sleep(0.01)

    async def approvals_for(self, seconds: float) -> list[float]:
        latencies: list[float] = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            latencies.append(await self.approval())
        return latencies

    async def storm(self, statuses: int, bodies: int, stop: asyncio.Event) -> None:
        round_ = 0
        while not stop.is_set() and round_ < bodies:
            body = storm_body(statuses, round_)
            round_ += 1
            started = time.perf_counter()
            response = await self.client.post(
                "/webhooks/whatsapp",
                content=body,
                headers={
                    "Content-Type": "application/json",
                    payloads.SIGNATURE_HEADER: payloads.sign(APP_SECRET, body),
                },
            )
            assert response.status_code == 200, response.text
            self.storm_ms.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0)


async def run(args: argparse.Namespace, database_url: str, var_dir: Path) -> dict[str, Any]:
    settings = Settings(
        database_url=database_url,
        secret_key=SECRET,
        redis_url=None,
        whatsapp_app_secret=APP_SECRET,
        rate_limit_per_key="1000000/s",
        rate_limit_per_org="1000000/s",
        access_log=False,
        log_level="warning",
        var_dir=var_dir,
        storage_url=f"file://{var_dir / 'objects'}",
        worker_threads=args.threads,
        outbox_sweep_seconds=0.2,
    )
    key_a, key_b = await seed(settings)
    broker, _runtime = install_job_engine(settings)
    worker = InProcessWorker(broker, threads=args.threads)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://sb", timeout=300
        ) as client:
            bench = Bench(client, key_a, key_b)
            await bench.channels()
            worker.start()
            await bench.approvals_for(2.0)  # warm-up, excluded
            idle = await bench.approvals_for(args.idle_seconds)
            stop = asyncio.Event()
            bodies = sys.maxsize if args.continuous else args.bodies
            storming = asyncio.create_task(bench.storm(args.statuses, bodies, stop))
            attacked = await bench.approvals_for(args.attack_seconds)
            stop.set()
            await storming
            state = await outbox_state(settings)
        worker.stop()
    outbox.set_dispatcher(None)
    broker.close()
    idle_figures, attack_figures = figures(idle), figures(attacked)
    return {
        "backend": database_url.split(":", 1)[0],
        "worker_threads": args.threads,
        "idle_templates": len(idle),
        "attack_templates": len(attacked),
        "continuous": args.continuous,
        "statuses_per_body": args.statuses,
        "storm_bodies": len(bench.storm_ms),
        "storm_body_ms_p50": round(statistics.median(bench.storm_ms), 1),
        "storm_body_ms_max": round(max(bench.storm_ms), 1),
        "idle": idle_figures,
        "attack": attack_figures,
        "ratio_p50": round(attack_figures["p50_ms"] / idle_figures["p50_ms"], 2),
        "ratio_p95": round(attack_figures["p95_ms"] / idle_figures["p95_ms"], 2),
        **state,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--statuses", type=int, default=10_000)
    parser.add_argument("--bodies", type=int, default=3)
    parser.add_argument("--attack-seconds", type=float, default=20.0)
    parser.add_argument("--continuous", action="store_true")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--database-url", help="an empty PostgreSQL database (default: SQLite)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        var_dir = Path(directory)
        url = args.database_url or f"sqlite+aiosqlite:///{var_dir / 'bench.db'}"
        upgrade(url)
        result = asyncio.run(run(args, url, var_dir))
    for phase in ("idle", "attack"):
        numbers = result[phase]
        print(
            f"org B template approval, {phase:6}: p50 {numbers['p50_ms']} ms, "
            f"p95 {numbers['p95_ms']} ms, max {numbers['max_ms']} ms"
        )
    print(f"attack/idle: p50 x{result['ratio_p50']}, p95 x{result['ratio_p95']} (target < 2)")
    print(
        f"storm: {result['storm_bodies']} bodies of {result['statuses_per_body']} statuses, "
        f"API p50 {result['storm_body_ms_p50']} ms, max {result['storm_body_ms_max']} ms; "
        f"outbox jobs by queue {result['jobs_by_queue']}, parked {result['parked_statuses']}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
