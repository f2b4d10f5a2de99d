"""Read-only REST requests on a SQLite file, with and without the SQLite read pool.

Migrates a new SQLite file, creates one organization with --contacts contacts (through the
REST API), then serves the app in-process (lifespan included, ASGI client, no HTTP server) and
lists ``GET /api/v1/contacts?limit=20`` with --concurrency requests in flight, --requests
in all, per round. Rounds alternate the read pool on (`SWITCHBOARD_PREPARED_ON_DRIVER=true`,
the default: prepared reads on the pool's own connections, app/db/sqlite_reads.py) and off
(through an ORM session). Prints req/s and the process's CPU per request for every round, then
a one-line JSON summary of the medians. It reports figures only; it never asserts on time.

Run: ``.venv/bin/python bench/sqlite_reads.py [--rounds 2] [--requests 1200]``.
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

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import bench_settings, on_fresh_database, seed_organization

from app.main import create_app


async def one_round(
    url: str, var_dir: Path, key: str, read_pool: bool, args: argparse.Namespace
) -> dict[str, float]:
    settings = bench_settings(
        url,
        var_dir,
        threads=1,
        prepared_on_driver=read_pool,
        rate_limit_per_key="1000000/s",
        rate_limit_per_org="1000000/s",
    )
    app = create_app(settings)
    headers = {"Authorization": f"Bearer {key}"}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sb") as client:

            async def lister(count: int) -> None:
                for _ in range(count):
                    response = await client.get("/api/v1/contacts?limit=20", headers=headers)
                    assert response.status_code == 200, response.text

            await lister(50)  # warm-up: plans, statements, connections
            each = args.requests // args.concurrency
            began, cpu = time.perf_counter(), time.process_time()
            await asyncio.gather(*(lister(each) for _ in range(args.concurrency)))
            elapsed, used = time.perf_counter() - began, time.process_time() - cpu
    done = each * args.concurrency
    return {"req_per_s": done / elapsed, "cpu_us_per_request": used * 1e6 / done}


async def run(url: str, var_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    settings = bench_settings(url, var_dir, threads=1)
    key = await seed_organization(settings)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sb") as client:
            for index in range(args.contacts):
                response = await client.post(
                    "/api/v1/contacts",
                    json={"phone_number": f"+1415{index:07d}", "name": f"Person {index}"},
                    headers={"Authorization": f"Bearer {key}"},
                )
                assert response.status_code == 200, response.text
    rounds: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for _ in range(args.rounds):
        for read_pool in (True, False):
            figures = await one_round(url, var_dir, key, read_pool, args)
            rounds[read_pool].append(figures)
            print(
                f"read pool {'on ' if read_pool else 'off'}: {figures['req_per_s']:.0f} req/s, "
                f"{figures['cpu_us_per_request']:.0f} µs of CPU per request"
            )

    def median(read_pool: bool, figure: str) -> float:
        return round(statistics.median(r[figure] for r in rounds[read_pool]), 1)

    return {
        "requests": args.requests,
        "concurrency": args.concurrency,
        "read_pool_req_per_s": median(True, "req_per_s"),
        "read_pool_cpu_us_per_request": median(True, "cpu_us_per_request"),
        "session_req_per_s": median(False, "req_per_s"),
        "session_cpu_us_per_request": median(False, "cpu_us_per_request"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--contacts", type=int, default=200)
    parser.add_argument("--requests", type=int, default=1200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(on_fresh_database(None, lambda url, var: run(url, var, args))))


if __name__ == "__main__":
    main()
