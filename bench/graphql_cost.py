"""Time to refuse the fragment fan-out document of issue 10, without credentials, in-process.

`{ ...G0 }` with `fragment Gi on Query { viewer { organizationId } ...Gi+1 ...Gi+1 }` asks for
2^n selections from a body linear in n. Before the cost pass (app/graphql/cost.py) n = 20 took
7.2 s and n = 30 never finished; each figure below is the wall time of one POST /graphql through
the ASGI app (no network), first with a fresh document (renamed fragments: no cache hit), then
the same document again (cached with its errors). It prints figures only and a one-line JSON
summary; it asserts nothing about time.

Run: ``.venv/bin/python bench/graphql_cost.py [--repeat 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from app.config import Settings
from app.kit.collector import tune_for_serving
from app.kit.ratelimit import MemoryRateLimiter
from app.main import create_app
from app.resources import Resources

SECRET = "bench-secret-" + "x" * 40


def fan_out(n: int, prefix: str) -> str:
    fragments = " ".join(
        f"fragment {prefix}{i} on Query {{ viewer {{ organizationId }} "
        f"...{prefix}{i + 1} ...{prefix}{i + 1} }}"
        for i in range(n)
    )
    return f"{{ ...{prefix}0 }} {fragments}"


async def run(repeat: int) -> dict[str, dict[str, float]]:
    directory = Path(tempfile.mkdtemp())
    url = f"sqlite+aiosqlite:///{directory}/bench.db"  # never opened: refused before any read
    settings = Settings(
        database_url=url,
        secret_key=SECRET,
        var_dir=directory,
        access_log=False,
        redis_url=None,
        rate_limit_per_address="1000000/s",
    )
    resources = Resources(
        settings=settings,
        sessionmaker=async_sessionmaker(create_async_engine(url)),
        rate_limiter=MemoryRateLimiter(),
        secret_key=SECRET,
        dialect_name="sqlite",
    )
    transport = httpx.ASGITransport(app=create_app(resources=resources))
    tune_for_serving()  # as `switchboard serve` does once started
    figures: dict[str, dict[str, float]] = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        for n in (17, 20, 30):
            fresh, cached = [], []
            for attempt in range(repeat):
                query = fan_out(n, f"R{attempt}x")
                for times in (fresh, cached):
                    started = time.perf_counter()
                    response = await client.post("/graphql", json={"query": query})
                    times.append((time.perf_counter() - started) * 1000)
                    errors = response.json()["errors"]
                    assert errors[0]["extensions"]["code"] == "query_too_complex", errors
            figures[f"n={n}"] = {
                "bytes": len(fan_out(n, "G")),
                "fresh_p50_ms": round(statistics.median(fresh), 2),
                "fresh_max_ms": round(max(fresh), 2),
                "cached_p50_ms": round(statistics.median(cached), 2),
            }
            print(
                f"n={n:>2} ({figures[f'n={n}']['bytes']:>5} B): refused in "
                f"{figures[f'n={n}']['fresh_p50_ms']} ms p50, "
                f"{figures[f'n={n}']['fresh_max_ms']} ms max (fresh document); "
                f"{figures[f'n={n}']['cached_p50_ms']} ms p50 cached"
            )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20, help="documents per size")
    args = parser.parse_args()
    figures = asyncio.run(run(args.repeat))
    print(json.dumps({"bench": "graphql_cost", **figures}))


if __name__ == "__main__":
    main()
