"""Webhook fan-out throughput and latency, through the real job engine.

Seeds a fresh PostgreSQL database with one organization and `--subscriptions` webhook
subscriptions pointing at a receiver on loopback, starts ONE `switchboard worker` process on
Redis, then emits `--events` events through `app.events.service.emit` (the same call the API
makes, committed one per transaction so the outbox relay hands each to Redis after commit).

Three phases:
  paced   events are emitted at `--rate` per second; latency = receipt time - commit time
  burst   all events at once; throughput = deliveries / time from first commit to last receipt
  dead    one more subscription points at a receiver that accepts and never answers (every
          attempt times out, retries and the circuit breaker engage); `--dead-events` events
          at `--rate`: the latency of the healthy endpoints' deliveries beside it

It prints deliveries/s, p50/p99 latency and a JSON summary line; it never asserts on time.
Run: ``.venv/bin/python bench/webhook_fanout.py [--events 2000] [--rate 50]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
sys.path.insert(0, str(REPO_DIR))

from app.config import Settings  # noqa: E402
from app.db.engine import create_engine, create_sessionmaker  # noqa: E402
from app.events.service import emit  # noqa: E402
from app.kit import outbox  # noqa: E402
from app.organizations.service import create_organization  # noqa: E402
from app.webhooks.models import WebhookSubscription  # noqa: E402
from app.webhooks.signing import generate_secret  # noqa: E402
from workers.broker import build_broker  # noqa: E402

SWITCHBOARD = Path(sys.executable).parent / "switchboard"
BENCH_DB = "switchboard_fanout"
HOST = "127.0.0.1"


def log(message: str) -> None:
    print(f"[fanout] {message}", file=sys.stderr, flush=True)


@dataclass
class Receipts:
    """Receipt time of every (event, delivery) the receiver saw."""

    times: dict[str, list[float]] = field(default_factory=dict)
    deliveries: set[str] = field(default_factory=set)
    duplicates: int = 0
    count: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def record(self, event_id: str, delivery_id: str) -> None:
        now = time.perf_counter()
        if delivery_id in self.deliveries:
            self.duplicates += 1
            return
        self.deliveries.add(delivery_id)
        self.times.setdefault(event_id, []).append(now)
        self.count += 1
        self.changed.set()


async def serve_receiver(receipts: Receipts) -> asyncio.AbstractServer:
    """A minimal HTTP/1.1 server: reads each POST, answers 200, records the event id."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                headers: dict[str, str] = {}
                for line in head.decode("latin-1").split("\r\n")[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                event_id = orjson.loads(body)["id"]
                receipts.record(event_id, headers.get("webhook-id", ""))
                keep_alive = headers.get("connection", "").lower() != "close"
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                    + (b"" if keep_alive else b"Connection: close\r\n")
                    + b"\r\nok"
                )
                await writer.drain()
                if not keep_alive:
                    break
        except (asyncio.IncompleteReadError, ConnectionResetError, asyncio.CancelledError):
            pass  # the worker hung up, or the bench is shutting the receiver down
        finally:
            writer.close()

    return await asyncio.start_server(handle, HOST, 0, backlog=1024)


async def serve_silence() -> asyncio.AbstractServer:
    """A dead receiver: accepts connections, reads what comes, never answers."""

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.read(65536):
                pass
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(hold, HOST, 0, backlog=1024)


async def recreate_database(admin_dsn: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{BENCH_DB}"')
    finally:
        await conn.close()


@dataclass(frozen=True)
class Owner:
    organization_id: str
    livemode: bool = False


async def emit_events(
    sessionmaker: Any, owner: Owner, count: int, rate: float | None, committed: dict[str, float]
) -> None:
    """One event per transaction; the relay enqueues each on Redis after its commit."""
    started = time.perf_counter()
    for index in range(count):
        if rate:
            delay = started + index / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        async with sessionmaker() as session:
            event = await emit(
                session, owner, "lead.created", {"id": f"bench-{index}", "index": index}
            )
            await session.commit()
        committed[event.id] = time.perf_counter()


@dataclass
class Phase:
    name: str
    events: int
    deliveries: int
    seconds: float
    latencies_ms: list[float]
    duplicates: int

    @property
    def rate(self) -> float:
        return self.deliveries / self.seconds if self.seconds else 0.0

    def quantile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_phase(
    name: str,
    sessionmaker: Any,
    owner: Owner,
    events: int,
    subscriptions: int,
    rate: float | None,
    receipts: Receipts,
    seconds: float,
) -> Phase:
    receipts.times.clear()
    receipts.deliveries.clear()
    receipts.count = 0
    receipts.duplicates = 0
    committed: dict[str, float] = {}
    expected = events * subscriptions
    pace = f" at {rate}/s" if rate else ""
    log(f"{name}: {events} events x {subscriptions} subscriptions{pace}")
    first = time.perf_counter()
    producer = asyncio.create_task(emit_events(sessionmaker, owner, events, rate, committed))
    deadline = time.monotonic() + seconds
    while receipts.count < expected and time.monotonic() < deadline:
        receipts.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(receipts.changed.wait(), 1.0)
    await producer
    last = max((t for times in receipts.times.values() for t in times), default=first)
    latencies = [
        (received - committed[event_id]) * 1000
        for event_id, times in receipts.times.items()
        if event_id in committed
        for received in times
    ]
    if receipts.count < expected:
        log(f"{name}: only {receipts.count} of {expected} deliveries arrived in {seconds:.0f} s")
    return Phase(name, events, receipts.count, last - first, latencies, receipts.duplicates)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--subscriptions", type=int, default=10)
    parser.add_argument("--rate", type=float, default=50.0, help="events/s of the paced phase")
    parser.add_argument(
        "--dead-events", type=int, default=500, help="events of the dead-endpoint phase"
    )
    parser.add_argument("--threads", type=int, default=8, help="worker threads")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per phase")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
    )
    return parser.parse_args()


async def main_async(args: argparse.Namespace) -> int:
    admin_dsn = args.database_url
    base = admin_dsn.rsplit("/", 1)[0]
    dsn = f"{base}/{BENCH_DB}"
    sqlalchemy_url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
    await recreate_database(admin_dsn)
    env = dict(os.environ)
    env.update(
        DATABASE_URL=sqlalchemy_url,
        REDIS_URL=args.redis_url,
        SWITCHBOARD_ALLOW_PRIVATE_WEBHOOK_URLS="true",
        SWITCHBOARD_LOG_LEVEL="warning",
        SWITCHBOARD_SECRET_KEY="bench-secret-key-0123456789-0123456789",
    )
    await asyncio.to_thread(
        subprocess.run, [str(SWITCHBOARD), "migrate"], env=env, check=True, capture_output=True
    )

    settings = Settings(database_url=sqlalchemy_url, redis_url=args.redis_url)
    broker = build_broker(args.redis_url)
    broker.client.flushdb()  # type: ignore[attr-defined]
    import dramatiq

    for queue in ("events", "webhooks"):
        broker.declare_queue(queue)
    dramatiq.set_broker(broker)
    relay = outbox.BrokerRelay(broker, broker.client)  # type: ignore[attr-defined]
    outbox.set_dispatcher(relay.submit)

    engine = create_engine(settings.database_url, pool_size=4)
    sessionmaker = create_sessionmaker(engine)
    receipts = Receipts()
    server = await serve_receiver(receipts)
    port = server.sockets[0].getsockname()[1]
    dead_server = await serve_silence()
    dead_port = dead_server.sockets[0].getsockname()[1]
    async with sessionmaker() as session:
        organization = await create_organization(session, "fanout")
        for index in range(args.subscriptions):
            session.add(
                WebhookSubscription(
                    organization_id=organization.id,
                    url=f"http://{HOST}:{port}/hook/{index}",
                    secret=generate_secret(),
                    events=["lead.created"],
                    is_active=True,
                )
            )
        await session.commit()
    owner = Owner(organization.id)

    log_dir = Path(tempfile.mkdtemp(prefix="switchboard-fanout-"))
    worker_log = (log_dir / "worker.log").open("w")
    worker = subprocess.Popen(  # noqa: ASYNC220 (started once, before measuring)
        [str(SWITCHBOARD), "worker", "--processes", "1", "--threads", str(args.threads)],
        env=env,
        cwd=REPO_DIR,
        stdout=worker_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    phases: list[Phase] = []
    try:
        # Warm-up: the worker process boots and opens its connections.
        await run_phase("warm-up", sessionmaker, owner, 20, args.subscriptions, None, receipts, 60)
        phases.append(
            await run_phase(
                "paced",
                sessionmaker,
                owner,
                args.events,
                args.subscriptions,
                args.rate,
                receipts,
                args.timeout,
            )
        )
        phases.append(
            await run_phase(
                "burst",
                sessionmaker,
                owner,
                args.events,
                args.subscriptions,
                None,
                receipts,
                args.timeout,
            )
        )
        async with sessionmaker() as session:  # beside the healthy ones from now on
            session.add(
                WebhookSubscription(
                    organization_id=organization.id,
                    url=f"http://{HOST}:{dead_port}/dead",
                    secret=generate_secret(),
                    events=["lead.created"],
                    is_active=True,
                )
            )
            await session.commit()
        phases.append(
            await run_phase(
                "dead",
                sessionmaker,
                owner,
                args.dead_events,
                args.subscriptions,  # the receipts of the healthy endpoints
                args.rate,
                receipts,
                args.timeout,
            )
        )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
        server.close()
        dead_server.close()
        await engine.dispose()
        broker.close()
    print(
        f"{'phase':8} {'events':>7} {'deliveries':>10} {'seconds':>8} {'deliv/s':>8} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'dupes':>6}"
    )
    summary: dict[str, Any] = {"bench": "webhook_fanout", "subscriptions": args.subscriptions}
    for phase in phases:
        print(
            f"{phase.name:8} {phase.events:7d} {phase.deliveries:10d} {phase.seconds:8.2f} "
            f"{phase.rate:8.0f} {phase.quantile(0.5):8.1f} {phase.quantile(0.99):8.1f} "
            f"{phase.duplicates:6d}"
        )
        summary[phase.name] = {
            "events": phase.events,
            "deliveries": phase.deliveries,
            "deliveries_per_s": round(phase.rate, 1),
            "p50_ms": round(phase.quantile(0.5), 1),
            "p99_ms": round(phase.quantile(0.99), 1),
        }
    dead = summary.get("dead")
    if dead is not None:
        print(
            f"beside one dead endpoint, the healthy endpoints' p99: {dead['p99_ms']:.0f} ms"
            f" ({dead['deliveries']} deliveries)"
        )
    print(
        "targets: ≥ 500 deliveries/s (burst), p99 < 500 ms (paced), p99 < 2 s (dead:"
        " the healthy endpoints)"
    )
    print(json.dumps(summary))
    log(f"worker log: {log_dir / 'worker.log'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main_async(parse_args())))
