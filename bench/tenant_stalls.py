"""One tenant stalling another: org B's latencies idle, then while org A attacks.

Starts `switchboard serve` (API only, REDIS_URL set) and ONE `switchboard worker`
(`--threads 4`) on a fresh PostgreSQL database and the given Redis database, creates org A and
org B (test keys; org B has a test-mode channel and an agent), then runs five phases of
`--seconds` each. In every phase org B measures, one probe after the other:

  rest_ms      GET /api/v1/contacts?limit=1, sampled every 50 ms the whole phase (p50, max)
  txt_s        upload a 20-byte TXT until it is `ready` (the knowledge queue)
  template_s   create a template until it is APPROVED (the simulator, through the jobs)
  call_s       POST /api/v1/calls (test mode) until the call log is `completed`
  event_ms     create a contact until its `lead.created` arrives on org B's `events`
               subscription (opened at the start of the phase)

while org A runs the issue's attack of that phase:

  idle           nothing
  docx           8 uploads at once, every 16 s (the default upload rate limit), of a 23 MiB
                 .docx whose zip directory lists 520,000 entries (it used to be parsed on the
                 event loop before the entry limit was checked)
  subscriptions  10 websockets x 10 `events` subscriptions (each used to hold one of the 100
                 Redis connections of the API process)
  ws_frames      five anonymous websockets at a time, each sending a 15 MiB connection_init
  pdf            8 uploads of a 390 KB PDF of 1,990 pages sharing one content stream (31 s of
                 extraction each; they used to hold every worker thread); last, as its
                 extractions outlive the phase

It prints, per phase, each figure and its ratio to idle (target: under 2), and a one-line JSON
summary. It never fails on figures. A probe that cannot finish within 120 s counts as 120 s.
Run: ``.venv/bin/python bench/tenant_stalls.py --redis-url redis://127.0.0.1:6379/15``
(the Redis database is flushed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import redis
from websockets.asyncio.client import ClientConnection, connect

SWITCHBOARD = Path(sys.executable).parent / "switchboard"
BENCH_DB = "switchboard_stalls"
HOST = "127.0.0.1"
PROBE_LIMIT_SECONDS = 120.0
TEMPLATE_BODY = {
    "type": "BODY",
    "text": "Hi {{1}}, your order {{2}} has shipped.",
    "example": {"body_text": [["Ada", "A-1001"]]},
}
EVENTS = 'subscription { events(types: ["lead.created"]) { id type data } }'
PROTOCOL = "graphql-transport-ws"


def log(message: str) -> None:
    print(f"[stalls] {message}", file=sys.stderr, flush=True)


# --- the inputs ----------------------------------------------------------------------


def crowded_docx(entries: int = 520_000) -> bytes:
    """A DOCX-looking zip (23 MiB) whose central directory lists `entries` entries, every one
    pointing at the same local header: `zipfile` parses them all before anyone counts them."""
    name = b"word/document.xml"
    data = b"<w:document/>"
    crc = zlib.crc32(data)
    local = (
        struct.pack(
            "<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 0, 0, 0, crc, len(data), len(data), len(name), 0
        )
        + name
        + data
    )

    def central(entry_name: bytes) -> bytes:
        """A central directory record pointing at the one local header (offset 0)."""
        head = struct.pack(
            "<4sHHHHHHIII", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, crc, len(data), len(data)
        )
        return head + struct.pack("<HHHHHII", len(entry_name), 0, 0, 0, 0, 0, 0) + entry_name

    first, filler = central(name), central(b"a")
    directory = first + filler * (entries - 1)
    directory_offset = len(local)
    zip64_offset = directory_offset + len(directory)
    zip64 = struct.pack(
        "<4sQHHIIQQQQ",
        b"PK\x06\x06",
        44,
        45,
        45,
        0,
        0,
        entries,
        entries,
        len(directory),
        directory_offset,
    )
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, zip64_offset, 1)
    end = struct.pack(
        "<4sHHHHIIH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, len(directory), directory_offset, 0
    )
    return local + directory + zip64 + locator + end


def shared_stream_pdf(pages: int = 1990, stream_bytes: int = 100_000) -> bytes:
    """A PDF of `pages` pages that all draw the same (uncompressed) content stream: small on
    disk, but the extractor parses the stream once per page."""
    line = b"BT /F1 8 Tf 20 780 Td (The quick brown fox jumps over the lazy dog 0123) Tj ET\n"
    content = line * (stream_bytes // len(line))
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids ["
        + b" ".join(b"%d 0 R" % (5 + index) for index in range(pages))
        + b"] /Count %d >>" % pages,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
    ]
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 3 0 R >> >> >>"
    )
    objects.extend(page for _ in range(pages))
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    )
    return out.getvalue()


# --- the service -----------------------------------------------------------------------------


async def recreate_database(admin_dsn: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(admin_dsn)
    try:
        await connection.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        await connection.execute(f'CREATE DATABASE "{BENCH_DB}"')
    finally:
        await connection.close()


def cli(env: dict[str, str], *args: str) -> dict[str, Any]:
    result = subprocess.run(
        [str(SWITCHBOARD), *args], env=env, capture_output=True, text=True, check=True
    )
    payload: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return payload


class Tenant:
    def __init__(self, key: str) -> None:
        self.key = key
        self.headers = {"Authorization": f"Bearer {key}"}
        self.agent_id = ""
        self.channel_id = ""


async def until(check: Callable[[], Awaitable[bool]]) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < PROBE_LIMIT_SECONDS:
        if await check():
            return time.perf_counter() - started
        await asyncio.sleep(0.05)
    return PROBE_LIMIT_SECONDS


# --- org B's probes --------------------------------------------------------------------------


class Probes:
    def __init__(self, client: httpx.AsyncClient, tenant: Tenant, ws_url: str) -> None:
        self.client = client
        self.tenant = tenant
        self.ws_url = ws_url
        self.serial = 0

    async def sample_rest(self, stop: asyncio.Event, into: list[float]) -> None:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                await self.client.get(
                    "/api/v1/contacts?limit=1",
                    headers=self.tenant.headers,
                    timeout=PROBE_LIMIT_SECONDS,
                )
            except httpx.HTTPError:
                into.append(PROBE_LIMIT_SECONDS * 1000)
            else:
                into.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.05)

    async def _settled(
        self, path: str, poll: str, field: str, final: tuple[str, ...], **request: Any
    ) -> float:
        """Seconds from POSTing `path` until the created resource's `field` (read at `poll`,
        formatted with its id) is one of `final`."""
        started = time.perf_counter()
        response = await self.client.post(
            path, headers=self.tenant.headers, timeout=PROBE_LIMIT_SECONDS, **request
        )
        if response.status_code != 201:
            log(f"{path} refused: {response.status_code} {response.text[:200]}")
            return PROBE_LIMIT_SECONDS
        url = poll.format(id=response.json()["id"])

        async def settled() -> bool:
            found = await self.client.get(url, headers=self.tenant.headers)
            return found.json().get(field) in final

        await until(settled)
        return time.perf_counter() - started

    async def txt(self) -> float:
        return await self._settled(
            "/api/v1/knowledge-base/upload",
            "/api/v1/knowledge-base/{id}",
            "index_status",
            ("ready", "failed"),
            files={"file": ("hours.txt", b"Open from 9 to 5.\n", "text/plain")},
        )

    async def template(self) -> float:
        body = {
            "channel_id": self.tenant.channel_id,
            "name": f"shipped_{uuid.uuid4().hex[:8]}",
            "language": "en_US",
            "category": "UTILITY",
            "components": [TEMPLATE_BODY],
        }
        return await self._settled(
            "/api/v1/templates",
            "/api/v1/templates/{id}",
            "status",
            ("APPROVED", "REJECTED"),
            json=body,
        )

    async def call(self) -> float:
        body = {"agent_id": self.tenant.agent_id, "to_number": "+14155550123"}
        return await self._settled(
            "/api/v1/calls",
            "/api/v1/call-logs/{id}",
            "status",
            ("completed", "failed", "busy", "no-answer"),
            json=body,
        )

    @contextlib.asynccontextmanager
    async def subscription(self) -> AsyncIterator[ClientConnection | None]:
        try:
            async with connect(self.ws_url, subprotocols=[PROTOCOL]) as ws:  # type: ignore[list-item]
                await ws.send(
                    json.dumps(
                        {
                            "type": "connection_init",
                            "payload": {"Authorization": self.tenant.headers["Authorization"]},
                        }
                    )
                )
                await ws.recv()
                await ws.send(
                    json.dumps({"id": "b", "type": "subscribe", "payload": {"query": EVENTS}})
                )
                await asyncio.sleep(0.5)  # subscribing is asynchronous
                yield ws
        except (OSError, TimeoutError) as exc:
            log(f"org B could not subscribe: {exc!r}")
            yield None

    async def event(self, ws: ClientConnection | None) -> float:
        if ws is None:
            return PROBE_LIMIT_SECONDS
        self.serial += 1
        started = time.perf_counter()
        phone = f"+1415555{self.serial % 10000:04d}"
        await self.client.post(
            "/api/v1/contacts",
            json={"phone_number": phone, "name": "Bo"},
            headers=self.tenant.headers,
        )
        try:
            async with asyncio.timeout(PROBE_LIMIT_SECONDS):
                while True:
                    message = json.loads(await ws.recv())
                    if message.get("type") != "next":
                        log(f"org B's subscription: {str(message)[:200]}")
                        return PROBE_LIMIT_SECONDS
                    data = message["payload"].get("data") or {}
                    if (data.get("events") or {}).get("data", {}).get("phone_number") == phone:
                        return time.perf_counter() - started
        except (TimeoutError, OSError, ValueError):
            return PROBE_LIMIT_SECONDS


# --- org A's attacks -------------------------------------------------------------------------


async def attack_docx(
    client: httpx.AsyncClient, tenant: Tenant, stop: asyncio.Event, document: bytes
) -> None:
    """Eight at once, as the issue did, again every 16 s: the most the default upload rate
    limit (30 a minute per organization) lets one organization send."""

    async def one() -> None:
        with contextlib.suppress(httpx.HTTPError):
            await client.post(
                "/api/v1/knowledge-base/upload",
                files={"file": ("crowded.docx", document)},
                headers=tenant.headers,
                timeout=PROBE_LIMIT_SECONDS,
            )

    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(8)))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, 16.0 - (time.perf_counter() - started))):
                await stop.wait()


async def attack_subscriptions(ws_url: str, tenant: Tenant, stop: asyncio.Event) -> None:
    async def socket() -> None:
        try:
            async with connect(ws_url, subprotocols=[PROTOCOL]) as ws:  # type: ignore[list-item]
                await ws.send(
                    json.dumps(
                        {
                            "type": "connection_init",
                            "payload": {"Authorization": tenant.headers["Authorization"]},
                        }
                    )
                )
                await ws.recv()
                for op in range(10):
                    await ws.send(
                        json.dumps(
                            {"id": str(op), "type": "subscribe", "payload": {"query": EVENTS}}
                        )
                    )
                while not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.5):
                            await ws.recv()
        except OSError as exc:
            log(f"org A socket: {exc!r}")

    await asyncio.gather(*(socket() for _ in range(10)))


async def attack_frames(ws_url: str, stop: asyncio.Event) -> None:
    frame = json.dumps({"type": "connection_init", "payload": {"pad": "x" * (15 * 1024 * 1024)}})

    async def socket() -> None:
        while not stop.is_set():
            try:
                async with connect(ws_url, subprotocols=[PROTOCOL], max_size=None) as ws:  # type: ignore[list-item]
                    await ws.send(frame)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(5):
                            await ws.recv()
            except Exception:  # refused or closed: the next one goes anyway
                await asyncio.sleep(0.05)

    await asyncio.gather(*(socket() for _ in range(5)))


async def attack_pdf(
    client: httpx.AsyncClient, tenant: Tenant, stop: asyncio.Event, document: bytes
) -> None:
    await asyncio.gather(
        *(
            client.post(
                "/api/v1/knowledge-base/upload",
                files={"file": (f"catalog-{index}.pdf", document)},
                headers=tenant.headers,
                timeout=PROBE_LIMIT_SECONDS,
            )
            for index in range(8)
        )
    )
    await stop.wait()


# --- phases ----------------------------------------------------------------------------------


ATTACKS = ("docx", "subscriptions", "ws_frames", "pdf")


async def phase(
    name: str, probes: Probes, seconds: float, attacker: list[str] | None
) -> dict[str, Any]:
    """Org B's probes for `seconds` (at least one round), while `attacker` (a command line: the
    attack runs in a process of its own, so its own CPU is not org B's client's) runs."""
    process = None
    if attacker is not None:
        process = await asyncio.create_subprocess_exec(*attacker)
        await asyncio.sleep(3.0)  # the attack is under way before the first probe
    stop = asyncio.Event()
    rest: list[float] = []
    sampler = asyncio.create_task(probes.sample_rest(stop, rest))
    figures: dict[str, list[float]] = {"txt_s": [], "template_s": [], "call_s": [], "event_ms": []}
    started = time.perf_counter()
    async with probes.subscription() as ws:
        while True:
            figures["txt_s"].append(await probes.txt())
            figures["template_s"].append(await probes.template())
            figures["call_s"].append(await probes.call())
            figures["event_ms"].append(await probes.event(ws) * 1000)
            if time.perf_counter() - started >= seconds:
                break
    stop.set()
    await sampler
    if process is not None:
        process.terminate()
        await process.wait()
    result: dict[str, Any] = {
        "rest_ms_p50": round(statistics.median(rest), 1),
        "rest_ms_max": round(max(rest), 1),
        **{key: round(statistics.median(values), 3) for key, values in figures.items()},
        "rounds": len(figures["txt_s"]),
    }
    log(f"{name}: {result}")
    return result


async def attack(name: str, port: int, key: str) -> None:
    """The attacker process: org A's attack `name`, until terminated."""
    base = f"http://{HOST}:{port}"
    ws_url = f"ws://{HOST}:{port}/graphql"
    org_a = Tenant(key)
    stop = asyncio.Event()  # never set: the phase terminates this process
    async with httpx.AsyncClient(base_url=base, timeout=PROBE_LIMIT_SECONDS) as client:
        if name == "docx":
            await attack_docx(client, org_a, stop, crowded_docx())
        elif name == "subscriptions":
            await attack_subscriptions(ws_url, org_a, stop)
        elif name == "ws_frames":
            await attack_frames(ws_url, stop)
        elif name == "pdf":
            await attack_pdf(client, org_a, stop, shared_stream_pdf())


async def run(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    base = f"http://{HOST}:{args.port}"
    ws_url = f"ws://{HOST}:{args.port}/graphql"
    org_a = Tenant(cli(env, "orgs", "create", "--name", "Org A")["api_key"])
    org_b = Tenant(cli(env, "orgs", "create", "--name", "Org B")["api_key"])
    docx_mib, pdf_kb = len(crowded_docx()) / 2**20, len(shared_stream_pdf()) / 1024
    log(f"inputs: docx {docx_mib:.1f} MiB, pdf {pdf_kb:.0f} KB")
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
    async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as client:
        channel = await client.post(
            "/api/v1/channels",
            json={
                "display_phone_number": "+14155550142",
                "phone_number_id": "106540352242922",
                "business_account_id": "102290129340398",
                "access_token": "EAAGtest-token",
            },
            headers=org_b.headers,
        )
        org_b.channel_id = channel.json()["id"]
        agent = await client.post(
            "/api/v1/agents",
            json={"name": "Ava", "agent_config": {"welcome_message": "Hi, this is Ava."}},
            headers=org_b.headers,
        )
        org_b.agent_id = agent.json()["id"]
        probes = Probes(client, org_b, ws_url)
        await phase("warm-up", probes, 0, None)
        results = {"idle": await phase("idle", probes, args.seconds, None)}
        for name in ATTACKS:
            if args.only and name not in args.only:
                continue
            attacker = [
                sys.executable,
                __file__,
                "--attack",
                name,
                "--port",
                str(args.port),
                "--key",
                org_a.key,
            ]
            results[name] = await phase(name, probes, args.seconds, attacker)
    return results


def report(results: dict[str, Any]) -> dict[str, Any]:
    idle = results["idle"]
    keys = ["rest_ms_p50", "txt_s", "template_s", "call_s", "event_ms"]
    print(f"{'phase':<14}" + "".join(f"{key:>22}" for key in [*keys, "rest_ms_max"]))
    worst = 0.0
    ratios: dict[str, dict[str, float]] = {}
    for name, figures in results.items():
        cells = []
        ratios[name] = {}
        for key in keys:
            ratio = figures[key] / idle[key] if idle[key] else float("inf")
            ratios[name][key] = round(ratio, 2)
            if name != "idle":
                worst = max(worst, ratio)
            cells.append(f"{figures[key]:>12} ({ratio:4.1f}x)")
        print(
            f"{name:<14}"
            + "".join(f"{cell:>22}" for cell in cells)
            + f"{figures['rest_ms_max']:>22}"
        )
    print(f"worst ratio to idle: {worst:.2f} (target < 2)")
    return {
        "bench": "tenant_stalls",
        "phases": results,
        "ratios": ratios,
        "worst_ratio": round(worst, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"),
        help="admin URL; the database switchboard_stalls is recreated next to it",
    )
    parser.add_argument("--redis-url", help="a Redis database to flush and use (required)")
    parser.add_argument("--attack", choices=ATTACKS, help=argparse.SUPPRESS)  # attacker process
    parser.add_argument("--key", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=8132)
    parser.add_argument("--seconds", type=float, default=20.0, help="per phase")
    parser.add_argument("--only", nargs="*", help="attack phases to run (default: all)")
    args = parser.parse_args()
    if args.attack:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(attack(args.attack, args.port, args.key))
        return 0
    if not args.redis_url:
        parser.error("--redis-url is required")

    asyncio.run(recreate_database(args.database_url))
    redis.Redis.from_url(args.redis_url).flushdb()
    database_url = (
        args.database_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
        + f"/{BENCH_DB}"
    )
    with tempfile.TemporaryDirectory(prefix="sb-stalls-") as folder:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")},
            "DATABASE_URL": database_url,
            "REDIS_URL": args.redis_url,
            "SWITCHBOARD_SECRET_KEY": "bench-secret-key-for-hmac-and-jwt-0123456789",
            "SWITCHBOARD_VAR_DIR": f"{folder}/var",
            "SWITCHBOARD_STORAGE_URL": f"file://{folder}/objects",
            "SWITCHBOARD_ACCESS_LOG": "false",
            "SWITCHBOARD_LOG_LEVEL": "warning",
            "SWITCHBOARD_RATE_LIMIT_PER_KEY": "100000/s",
            "SWITCHBOARD_RATE_LIMIT_PER_ORG": "100000/s",
            "SWITCHBOARD_KNOWLEDGE_UPLOAD_RATE_LIMIT": "100000/m",
            "SWITCHBOARD_WORKER_METRICS_PORT": "0",
        }
        subprocess.run([str(SWITCHBOARD), "migrate"], env=env, check=True, capture_output=True)
        logs = Path(folder)
        with (
            (logs / "serve.log").open("wb") as serve_log,
            (logs / "worker.log").open("wb") as worker_log,
        ):
            server = subprocess.Popen(
                [str(SWITCHBOARD), "serve", "--host", HOST, "--port", str(args.port)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=serve_log,
            )
            worker = subprocess.Popen(
                [str(SWITCHBOARD), "worker", "--processes", "1", "--threads", "4"],
                env=env,
                stdout=worker_log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if (
                        httpx.get(f"http://{HOST}:{args.port}/healthz", timeout=1).status_code
                        == 200
                    ):
                        break
                except httpx.HTTPError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    log((logs / "serve.log").read_text()[-2000:])
                    raise SystemExit("the server did not start")
                time.sleep(0.2)
            results = asyncio.run(run(args, env))
            print(json.dumps(report(results)))
        finally:
            server.terminate()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, 15)
            for process in (server, worker):
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
