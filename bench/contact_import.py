"""Contact import throughput and memory on PostgreSQL, through the import job's own code.

Recreates the PostgreSQL database `switchboard_imports`, migrates it, then per size
(`--sizes`, 100,000 and 1,000,000 rows by default) writes a CSV (name, phone_number, tags,
notes, one `cf.` column; about 1 % of rows refused: bad numbers; about 2 % repeating an
earlier number, skipped) and imports it in a fresh child process: the file is put in the
object store as an upload is, and the job body (app/contact_imports/tasks.py `run_import`)
runs until the import completes. rows/s is rows read over the job's wall time; peak RSS is the
child's maximum resident set (getrusage), so it includes the interpreter and the app. CPU per
row is the child's CPU time (all its threads) and, apart, that of the PostgreSQL backends of
its connections (read from /proc at the end, the server on this machine), each over the rows
read: on a shared machine these move far less than the wall time does.

It prints the figures, the machine's load (it may be shared: distrust a loaded run) and a
one-line JSON summary; it never asserts on speed. Counts that do not add up exit with 1.
Run: ``.venv/bin/python bench/contact_import.py [--sizes 100000,1000000] [--sqlite]
[--database NAME]`` (``--sqlite``: a fresh SQLite file instead, the embedded mode's figure;
``--database``: the PostgreSQL database to recreate, so that runs sharing a server each
have their own).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
sys.path.insert(0, str(REPO_DIR))
BENCH_DB = "switchboard_imports"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SWITCHBOARD = REPO_DIR / ".venv" / "bin" / "switchboard"
SECRET = "bench-secret-key-0123456789-0123456789"


def log(message: str) -> None:
    print(f"[imports] {message}", file=sys.stderr, flush=True)


def write_csv(path: Path, rows: int) -> tuple[int, int]:
    """The file; answers (refused rows, repeated numbers)."""
    rng = random.Random(rows)
    bad = repeated = 0
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write("name,phone_number,tags,notes,cf.plan\r\n")
        for n in range(rows):
            roll = rng.random()
            if roll < 0.01:
                phone, bad = "not-a-number", bad + 1
            elif roll < 0.03 and n > 0:
                phone, repeated = f"+1415{rng.randrange(n) % 10_000_000:07d}", repeated + 1
            else:
                phone = f"+1415{n % 10_000_000:07d}"
            handle.write(f"Person {n},{phone},vip|s{n % 7},note {n},plan-{n % 3}\r\n")
    return bad, repeated


async def child(database_url: str, csv_path: str, storage: str) -> None:
    from app.config import Settings
    from app.contact_imports.models import ContactImport
    from app.contact_imports.service import import_store
    from app.contact_imports.tasks import run_import
    from app.core.ids import new_id
    from app.db.engine import create_engine, create_sessionmaker
    from app.kit.ratelimit import MemoryRateLimiter
    from app.organizations.service import create_organization
    from app.resources import Resources

    settings = Settings(
        database_url=database_url, storage_url=f"file://{storage}", secret_key=SECRET
    )
    engine = create_engine(settings.database_url, pool_size=4)
    sessionmaker = create_sessionmaker(engine)
    resources = Resources(
        settings=settings,
        sessionmaker=sessionmaker,
        rate_limiter=MemoryRateLimiter(),
        secret_key=SECRET,
        dialect_name=engine.dialect.name,
        engine=engine,
    )
    async with sessionmaker() as session:
        organization = await create_organization(session, "Bench")
        await session.commit()
    import_id = new_id()
    key = f"contact-imports/{organization.id}/{import_id}/contacts.csv"
    with open(csv_path, "rb") as handle:  # noqa: ASYNC230 (setup, before measuring)
        size = await import_store(settings).put(key, handle, "text/csv")
    async with sessionmaker() as session:
        session.add(
            ContactImport(
                id=import_id,
                organization_id=organization.id,
                status="queued",
                file_name="bench.csv",
                object_key=key,
                size_bytes=size,
                on_duplicate="skip",
                rows_read=0,
                created_count=0,
                updated_count=0,
                skipped_count=0,
                failed_count=0,
                committed_offset=0,
            )
        )
        await session.commit()
    started = time.perf_counter()
    cpu_started = time.process_time()
    runs = 0
    while await run_import(resources, import_id, seconds=20.0) is not None:
        runs += 1
    elapsed = time.perf_counter() - started
    worker_cpu = time.process_time() - cpu_started
    server_cpu = await backends_cpu(sessionmaker) if engine.dialect.name == "postgresql" else None
    async with sessionmaker() as session:
        job = await session.get(ContactImport, import_id)
        assert job is not None
        result = {
            "status": job.status,
            "rows_read": job.rows_read,
            "created": job.created_count,
            "skipped": job.skipped_count,
            "failed": job.failed_count,
            "seconds": round(elapsed, 2),
            "runs": runs + 1,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "worker_cpu_us_per_row": round(worker_cpu * 1e6 / max(job.rows_read, 1), 1),
            "postgres_cpu_us_per_row": None
            if server_cpu is None
            else round(server_cpu * 1e6 / max(job.rows_read, 1), 1),
            "loadavg": os.getloadavg(),
        }
    await engine.dispose()
    print(json.dumps(result), flush=True)


async def backends_cpu(sessionmaker: Any) -> float:
    """CPU seconds of this database's PostgreSQL processes so far (the pool's connections
    stay open for the whole import; the server runs on this machine)."""
    from sqlalchemy import text

    async with sessionmaker() as session:
        pids = (
            await session.execute(
                text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
            )
        ).scalars()
        return sum(process_cpu(pid) for pid in pids)


def process_cpu(pid: int) -> float:
    """CPU seconds (user and system) of a process of this machine; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


async def recreate_database(admin_dsn: str, name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument(
        "--sqlite",
        action="store_true",
        help="import into a fresh SQLite file instead (the embedded mode's figure)",
    )
    parser.add_argument("--database", default=BENCH_DB, help="PostgreSQL database to recreate")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(*args.child))
        return 0
    summary: dict[str, dict[str, float | None]] = {}
    failed = False
    with tempfile.TemporaryDirectory(prefix="switchboard-imports-") as scratch:
        if args.sqlite:
            url = f"sqlite+aiosqlite:///{scratch}/imports.db"
        else:
            dsn = f"{args.database_url.rsplit('/', 1)[0]}/{args.database}"
            url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
            asyncio.run(recreate_database(args.database_url, args.database))
        env = {**os.environ, "DATABASE_URL": url, "SWITCHBOARD_SECRET_KEY": SECRET}
        subprocess.run([str(SWITCHBOARD), "migrate"], env=env, check=True, capture_output=True)
        for size in (int(part) for part in args.sizes.split(",")):
            path = Path(scratch) / f"contacts-{size}.csv"
            bad, repeated = write_csv(path, size)
            log(f"{size:,} rows: {path.stat().st_size / 1e6:.1f} MB, {bad} bad, {repeated} repeats")
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    url,
                    str(path),
                    str(Path(scratch) / "objects"),
                ],
                check=True,
                capture_output=True,
                text=True,
                env=env,
            )
            result = json.loads(out.stdout.strip().splitlines()[-1])
            rate = result["rows_read"] / result["seconds"]
            log(
                f"{size:,} rows: {result['seconds']} s, {rate:,.0f} rows/s, peak RSS "
                f"{result['peak_rss_mb']} MB ({result['created']:,} created, "
                f"{result['skipped']:,} skipped, {result['failed']:,} refused, "
                f"{result['runs']} runs); CPU per row: worker "
                f"{result['worker_cpu_us_per_row']} µs, PostgreSQL "
                f"{result['postgres_cpu_us_per_row']} µs; load average {result['loadavg']}"
            )
            ok = result["status"] == "completed" and result["rows_read"] == size
            ok = ok and result["failed"] == bad
            ok = ok and result["created"] + result["skipped"] + result["failed"] == size
            failed = failed or not ok
            summary[str(size)] = {
                "rows_per_s": round(rate),
                "peak_rss_mb": result["peak_rss_mb"],
                "worker_cpu_us_per_row": result["worker_cpu_us_per_row"],
                "postgres_cpu_us_per_row": result["postgres_cpu_us_per_row"],
            }
            path.unlink()
    log(f"load average: {os.getloadavg()}, cpus: {os.cpu_count()}")
    database = "sqlite" if args.sqlite else "postgresql"
    print(json.dumps({"contact_import": summary, "database": database}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
