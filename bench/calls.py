"""Voice calls: API dispatch latency and simulated calls completed per second by one worker.

Migrates a fresh database (SQLite file by default, or `--database-url` naming an empty
PostgreSQL database), creates one organization, a test key and an agent with a knowledge
document, then:

  dispatch  `--calls` POST /api/v1/calls through the ASGI app (one at a time, no worker
            running); prints p50/p99/max latency
  simulate  starts ONE in-process Dramatiq worker (the real job path: place → simulate →
            status → call.completed; the document's indexing job runs first, a few ms)
            and times until every call has ended; prints calls/s

Each simulated call runs the full conversation (knowledge search per question, transcript,
summary, events). It prints figures and a JSON line; it never asserts on time.
Run: ``.venv/bin/python bench/calls.py [--calls 300] [--threads 4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from harness import (  # noqa: E402
    bench_settings,
    on_fresh_database,
    percentile,
    running_app,
    seed_organization,
)

from app.calls.models import CallLog  # noqa: E402
from app.config import Settings  # noqa: E402
from app.db.engine import create_engine, create_sessionmaker  # noqa: E402
from workers.broker import InProcessWorker  # noqa: E402

DOCUMENT = (
    "Our support line is open Monday to Friday from 8 am to 6 pm. "
    "Refunds are processed within five business days. We ship to every EU country."
)
SCRIPT = ["When is the support line open?", "How long do refunds take?", "Thanks, bye!"]


async def ended_count(settings: Settings) -> int:
    engine = create_engine(settings.database_url, pool_size=1)
    try:
        async with create_sessionmaker(engine)() as session:
            count = await session.scalar(
                select(func.count()).select_from(CallLog).where(CallLog.status != "in-progress")
            )
    finally:
        await engine.dispose()
    return int(count or 0)


async def run(args: argparse.Namespace, database_url: str, var_dir: Path) -> dict[str, Any]:
    settings = bench_settings(database_url, var_dir, threads=args.threads)
    key = await seed_organization(settings)
    headers = {"Authorization": f"Bearer {key}"}
    async with running_app(settings) as (client, broker):
        worker = InProcessWorker(broker, threads=args.threads)
        agent = await client.post(
            "/api/v1/agents",
            json={"name": "Ava", "agent_config": {"welcome_message": "Hi, this is Ava."}},
            headers=headers,
        )
        agent_id = agent.json()["id"]
        await client.post(
            "/api/v1/knowledge-base/upload",
            files={"file": ("support.txt", DOCUMENT.encode(), "text/plain")},
            headers=headers,
        )
        body = {
            "agent_id": agent_id,
            "to_number": "+14155550123",
            "metadata": {"script": SCRIPT},
        }
        for _ in range(20):  # warm-up, excluded
            await client.post("/api/v1/calls", json=body, headers=headers)
        latencies: list[float] = []
        for _ in range(args.calls):
            started = time.perf_counter()
            response = await client.post("/api/v1/calls", json=body, headers=headers)
            latencies.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 201, response.text
        total = args.calls + 20
        began = time.perf_counter()
        worker.start()
        # The worker runs in its own threads; polling the database is how we see it finish.
        while await ended_count(settings) < total:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - began
        worker.stop()
    return {
        "backend": database_url.split(":", 1)[0],
        "calls": total,
        "worker_threads": args.threads,
        "dispatch_ms_p50": round(statistics.median(latencies), 2),
        "dispatch_ms_p99": round(percentile(latencies, 0.99), 2),
        "dispatch_ms_max": round(max(latencies), 2),
        "simulated_calls_per_second": round(total / elapsed, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--database-url", help="an empty PostgreSQL database (default: SQLite)")
    args = parser.parse_args()
    result = on_fresh_database(args.database_url, lambda url, var: run(args, url, var))
    print(f"dispatch p50 {result['dispatch_ms_p50']} ms, p99 {result['dispatch_ms_p99']} ms")
    print(f"simulated calls/s (one worker): {result['simulated_calls_per_second']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
