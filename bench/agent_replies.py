"""AI replies on WhatsApp: the engine's own cost per reply, and replies per second.

Migrates a fresh database (SQLite file by default, or `--database-url` naming an empty
PostgreSQL database), creates an organization, an agent whose model is a local
OpenAI-compatible server that answers at once (zero latency: a fixed chat completion), and a
channel answered by the agent, at Meta's highest send tier (1,000 messages/s). The channel is
live by default (`--channel live`): replies leave through the Graph API, here a local one that
answers at once, as in production; `--channel test` sends through the test-mode simulator,
whose status callbacks are jobs of the same worker. Both upstreams run in a process of their
own, so their CPU is not the worker's. The burst window is 0 so no reply waits for a quiet
moment. The send path's entry (`conversations.service.send_message`) is wrapped to note when
each reply is handed to it. Then:

  latency     `--latency` conversations one after the other: a signed webhook through the
              ASGI app, then the reply job on ONE in-process Dramatiq worker; the time from
              the webhook's 200 to the reply reaching the send path, p50/p99 (nothing else
              in flight: the engine's own cost, the model's zero-latency HTTP round trip and
              the job hand-off included)
  throughput  `--conversations` (1,000) webhooks of as many customers accepted with the worker
              stopped, then the worker started: conversations answered per second, sustained,
              i.e. until every reply is sent AND no outbox job is due (the fan-out of the
              webhooks' and the replies' events included); `handed_per_s` stops the clock at
              the last reply handed to the send path instead; CPU per reply (user and
              system) is the process's over the same time

Prints figures and a JSON line (peak RSS of the process included); never asserts on time.
Run: ``.venv/bin/python bench/agent_replies.py [--conversations 1000] [--threads 4]``.

`--callgrind`: for a run under ``valgrind --tool=callgrind --instr-atstart=no``, collection is
switched on (``callgrind_control -i on``) as the throughput phase's worker starts and off when
its work is done, and the sweep runs every 5 s (valgrind's slowdown would make the sweep's
per-second cost dominate): the instructions per reply, which a busy shared machine does not
change (docs/benchmarks.md). Otherwise the sweep runs at the worker's shipped interval.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy import func, select

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (
    bench_settings,
    on_fresh_database,
    percentile,
    running_app,
    seed_organization,
)

from app.config import Settings
from app.contacts.models import Contact
from app.conversations import service as conversations
from app.core.clock import utcnow
from app.db.engine import create_engine, create_sessionmaker
from app.inbox.models import Ticket
from app.integrations.whatsapp import payloads
from app.kit.outbox import PENDING
from app.kit.outbox_models import OutboxJob
from workers.broker import InProcessWorker

APP_SECRET = "bench-app-secret"
MESSAGES_PER_SECOND = 1000
PHONE_ID = "109999000000001"
WABA = "109999000000002"
SHIPPED_SWEEP_SECONDS = Settings.model_fields["outbox_sweep_seconds"].default
COMPLETION = orjson.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello! How can I help you today?"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 12, "total_tokens": 132},
    }
)

# When each reply reached the send path, by ticket id (written from the worker's thread).
handed: dict[str, float] = {}
_send_message = conversations.send_message


class HandedWatch:
    """Wakes the bench's own loop once enough replies have reached the send path (noted on
    the worker's thread), so the bench does not poll: its polling was CPU of the process
    measured."""

    def __init__(self) -> None:
        self._waiting: tuple[asyncio.AbstractEventLoop, asyncio.Event, int] | None = None

    async def wait_for(self, count: int) -> None:
        reached = asyncio.Event()
        self._waiting = (asyncio.get_running_loop(), reached, count)  # one assignment
        if len(handed) < count:  # after it: a reply noted before is counted here
            await reached.wait()
        self._waiting = None

    def noted(self) -> None:
        waiting = self._waiting
        if waiting is not None and len(handed) >= waiting[2]:
            waiting[0].call_soon_threadsafe(waiting[1].set)


watch = HandedWatch()


async def _noting_send_message(*args: Any, **kwargs: Any) -> Any:
    handed.setdefault(str(args[3]), time.perf_counter())
    watch.noted()
    return await _send_message(*args, **kwargs)


conversations.send_message = _noting_send_message  # type: ignore[assignment]


class ZeroLatencyUpstream:
    """The platforms a reply talks to, answering at once from a process of their own (their
    CPU is not the worker's): an OpenAI-compatible chat completions endpoint (one fixed
    answer) and, for a live channel, Meta's Graph API (the phone number a channel is verified
    with, and `POST /{phone-number-id}/messages`). Plain HTTP/1.1 keep-alive."""

    def __init__(self) -> None:
        self.url = ""
        # Spawned: a fork would inherit the running event loop of the bench.
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        ready, self._ready = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_serve_upstream, args=(self._ready, self._stop), daemon=True
        )
        self._answer = ready

    def start(self) -> str:
        self._process.start()
        port = self._answer.recv()
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    def counts(self) -> dict[str, int]:
        """Requests answered by kind, and connections opened."""
        return dict(httpx.get(f"{self.url}/__counts").json())

    def stop(self) -> None:
        self._stop.set()
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()


def _serve_upstream(ready: Any, stop: Any) -> None:
    counts = {"model": 0, "sends": 0, "graph_reads": 0, "connections": 0}

    def answer(method: bytes, path: bytes) -> bytes:
        if path.endswith(b"/chat/completions"):
            counts["model"] += 1
            return COMPLETION
        if method == b"POST" and path.endswith(b"/messages"):
            counts["sends"] += 1
            number = counts["sends"]
            return orjson.dumps(
                {
                    "messaging_product": "whatsapp",
                    "contacts": [{"input": "+1", "wa_id": "1"}],
                    "messages": [{"id": f"wamid.bench{number}"}],
                }
            )
        if path.startswith(b"/__counts"):
            return orjson.dumps(counts)
        counts["graph_reads"] += 1  # GET /{version}/{phone-number-id}: the channel's check
        return orjson.dumps(
            {
                "id": PHONE_ID,
                "display_phone_number": "+1 415-555-0142",
                "verified_name": "Bench",
                "quality_rating": "GREEN",
                "code_verification_status": "VERIFIED",
            }
        )

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counts["connections"] += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                method, path = lines[0].split(b" ")[:2]
                length = 0
                for line in lines[1:]:
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                body = answer(method, path.split(b"?", 1)[0])
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        ready.send(server.sockets[0].getsockname()[1])
        await asyncio.to_thread(stop.wait)
        server.close()

    asyncio.run(main())


def _collect_instructions(callgrind: bool, state: str) -> None:
    if callgrind:
        subprocess.run(
            ["callgrind_control", "-i", state, str(os.getpid())], check=True, capture_output=True
        )


def webhook(customer: int, message: int) -> bytes:
    return orjson.dumps(
        payloads.inbound_text(
            WABA,
            PHONE_ID,
            "+14155550142",
            f"wamid.bench{customer}.{message}",
            f"+1415{customer:07d}",
            "Hello, is anyone there?",
            profile_name="Bench",
        )
    )


async def post(client: httpx.AsyncClient, body: bytes) -> None:
    response = await client.post(
        "/webhooks/whatsapp",
        content=body,
        headers={
            "Content-Type": "application/json",
            payloads.SIGNATURE_HEADER: payloads.sign(APP_SECRET, body),
        },
    )
    assert response.status_code == 200, response.text


async def tickets_by_phone(settings: Settings) -> dict[str, str]:
    engine = create_engine(settings.database_url, pool_size=1)
    try:
        async with create_sessionmaker(engine)() as session:
            rows = await session.execute(
                select(Ticket.id, Contact.phone_number).join(
                    Contact, Contact.id == Ticket.contact_id
                )
            )
            return {phone: ticket_id for ticket_id, phone in rows.all()}
    finally:
        await engine.dispose()


@asynccontextmanager
async def outbox_watch(
    settings: Settings, *, later_too: bool = False
) -> AsyncIterator[Callable[[], Awaitable[int]]]:
    """How many pending outbox jobs are due (`later_too`: or due later), asked of the
    database. Parked jobs never run again: they are not waited for."""
    engine = create_engine(settings.database_url, pool_size=1)

    async def due() -> int:
        statement = select(func.count()).select_from(OutboxJob).where(OutboxJob.status == PENDING)
        if not later_too:
            statement = statement.where(OutboxJob.available_at <= utcnow())
        async with engine.connect() as connection:
            return int((await connection.execute(statement)).scalar_one())

    try:
        yield due
    finally:
        await engine.dispose()


async def run(args: argparse.Namespace, database_url: str, var_dir: Path) -> dict[str, Any]:
    upstream = ZeroLatencyUpstream()
    upstream_url = upstream.start()
    live = args.channel == "live"
    settings = bench_settings(
        database_url,
        var_dir,
        threads=args.threads,
        whatsapp_app_secret=APP_SECRET,
        allow_private_webhook_urls=True,
        graph_api_url=upstream_url,
        llm_streaming=False,
        ai_reply_burst_seconds=0.0,
        ai_max_concurrent_conversations=args.conversations * 2,
        ai_replies_per_minute="10000000/m",
        # The worker's own sweep interval (on a live channel every job here is relayed at its
        # commit: the sweep finds nothing to send); every 5 s under valgrind, whose slowdown
        # would make the sweep's per-second cost dominate.
        outbox_sweep_seconds=5.0 if args.callgrind else SHIPPED_SWEEP_SECONDS,
    )
    key = await seed_organization(settings, livemode=live)
    headers = {"Authorization": f"Bearer {key}"}
    async with running_app(settings) as (client, broker):
        worker = InProcessWorker(broker, threads=args.threads)
        agent = await client.post(
            "/api/v1/agents",
            json={"name": "Ava", "agent_config": {"llm_base_url": f"{upstream_url}/v1"}},
            headers=headers,
        )
        channel = await client.post(
            "/api/v1/channels",
            json={
                "display_phone_number": "+14155550142",
                "phone_number_id": PHONE_ID,
                "business_account_id": WABA,
                "access_token": "EAAGbench-token",
                # Meta's highest tier: at the default 80, the number's send budget (not the
                # worker) would set the rate.
                "messages_per_second": MESSAGES_PER_SECOND,
            },
            headers=headers,
        )
        assert channel.status_code == 201, channel.text
        await client.put(
            f"/api/v1/channels/{channel.json()['id']}",
            json={"agent_id": agent.json()["id"]},
            headers=headers,
        )
        # Latency: one conversation at a time, the worker running.
        worker.start()
        accepted: dict[str, float] = {}
        warmup = 20
        for customer in range(warmup + args.latency):
            await post(client, webhook(customer, 0))
            accepted[f"+1415{customer:07d}"] = time.perf_counter()
            while len(handed) < customer + 1:  # noqa: ASYNC110
                await asyncio.sleep(0.0005)
        tickets = await tickets_by_phone(settings)
        latencies = [
            (handed[tickets[phone]] - at) * 1000 for phone, at in list(accepted.items())[warmup:]
        ]
        # The phase's follow-up jobs (fan-outs; in test mode the status callbacks, due up to
        # 2 s later) done before the worker stops: none is left to the next phase.
        async with outbox_watch(settings, later_too=True) as pending_jobs:
            deadline = time.monotonic() + 30
            while await pending_jobs() and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        worker.stop()
        # Throughput: every webhook accepted first, then the worker drains them.
        first = warmup + args.latency
        bodies = [webhook(first + n, 0) for n in range(args.conversations)]
        accept_cpu_began = time.process_time()
        for start in range(0, len(bodies), 8):
            await asyncio.gather(*(post(client, body) for body in bodies[start : start + 8]))
        accept_cpu = time.process_time() - accept_cpu_began
        expected = len(handed) + args.conversations
        worker = InProcessWorker(broker, threads=args.threads)
        began = time.perf_counter()
        cpu_began = time.process_time()
        times_began = os.times()
        _collect_instructions(args.callgrind, "on")
        worker.start()
        await watch.wait_for(expected)
        handed_after = time.perf_counter() - began
        # Sustained: the work the replies caused (their events' fan-out, the inbound
        # webhooks' own) is done too, not left in the outbox when the clock stops.
        async with outbox_watch(settings) as due_jobs:
            while await due_jobs():  # noqa: ASYNC110 (the database is what knows)
                await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - began
        cpu = time.process_time() - cpu_began
        times_ended = os.times()
        _collect_instructions(args.callgrind, "off")
        worker.stop()
    counts = upstream.counts()
    upstream.stop()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "backend": database_url.split(":", 1)[0],
        "threads": args.threads,
        "latency_replies": len(latencies),
        "engine_overhead_p50_ms": round(statistics.median(latencies), 2),
        "engine_overhead_p99_ms": round(percentile(latencies, 0.99), 2),
        "engine_overhead_max_ms": round(max(latencies), 2),
        "conversations": args.conversations,
        "replies_per_s": round(args.conversations / elapsed, 1),
        # Replies handed to the send path per second, their follow-up jobs not waited for.
        "handed_per_s": round(args.conversations / handed_after, 1),
        # The whole process's CPU (every thread) while the worker drained, per reply: the
        # figure a shared machine's load distorts least.
        "cpu_ms_per_reply": round(cpu * 1000 / args.conversations, 2),
        # The same CPU split: the process's own code, and the kernel working for it (socket
        # writes to the database and the model on loopback are kernel time).
        "user_ms_per_reply": round(
            (times_ended.user - times_began.user) * 1000 / args.conversations, 2
        ),
        "system_ms_per_reply": round(
            (times_ended.system - times_began.system) * 1000 / args.conversations, 2
        ),
        # The API's side, for the record: the process's CPU per webhook accepted (the signed
        # POST through the ASGI app, the in-process client's own share included).
        "accept_cpu_ms_per_webhook": round(accept_cpu * 1000 / args.conversations, 2),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "channel": args.channel,
        "upstream": counts,
        "peak_rss_mb": round(rss_mb, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--latency", type=int, default=200)
    # A worker process's own default (SWITCHBOARD_WORKER_THREADS): the worker as it ships.
    parser.add_argument(
        "--threads", type=int, default=Settings.model_fields["worker_threads"].default
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument(
        "--channel",
        choices=("live", "test"),
        default="live",
        help="live: replies leave through the Graph API (the local zero-latency one), as in "
        "production; test: through the test-mode simulator, whose status callbacks are jobs "
        "of the same worker",
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="under valgrind --tool=callgrind --instr-atstart=no: count the throughput "
        "phase's instructions only",
    )
    args = parser.parse_args()
    summary = on_fresh_database(args.database_url, lambda url, var: run(args, url, var))
    print(
        f"engine overhead per reply ({summary['backend']}, {summary['latency_replies']} "
        f"one at a time): p50 {summary['engine_overhead_p50_ms']} ms, "
        f"p99 {summary['engine_overhead_p99_ms']} ms, max {summary['engine_overhead_max_ms']} ms"
    )
    print(
        f"{summary['conversations']} conversations on one worker process "
        f"({summary['threads']} threads): {summary['replies_per_s']} replies/s; "
        f"peak RSS {summary['peak_rss_mb']} MB"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
