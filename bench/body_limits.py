"""Memory of a real `switchboard serve` while anonymous clients stream huge bodies at it.

Starts `switchboard serve --no-worker` on a fresh SQLite database in a temporary folder, waits
for /healthz, samples the server's resident memory (VmRSS of the process and its children) for
`--idle-seconds`, then opens `--attackers` connections at once, each POSTing a `--megabytes`
MiB body with `Transfer-Encoding: chunked` to `--path` (by default /webhooks/whatsapp, which is
anonymous) as fast as the server takes it, exactly what
`head -c 268435456 /dev/zero | curl -X POST -H 'Transfer-Encoding: chunked' --data-binary @-`
does, and start again when answered, for `--seconds`. Meanwhile it samples the memory every
10 ms and times GET /healthz in a loop.

It prints the idle and peak RSS, their difference (target: within 50 MB of idle), /healthz
latency during the attack, what each attacker managed to send and the status it got, and a
one-line JSON summary. It never fails on figures. Run:
``.venv/bin/python bench/body_limits.py [--attackers 3] [--megabytes 256]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SWITCHBOARD = Path(sys.executable).parent / "switchboard"
HOST = "127.0.0.1"
MIB = 1024 * 1024
CHUNK = 64 * 1024


def log(message: str) -> None:
    print(f"[body_limits] {message}", file=sys.stderr, flush=True)


def rss_bytes(pid: int) -> int:
    """VmRSS of `pid` and every descendant (0 for one that just ended)."""
    total = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        pending.extend(int(child) for child in children)
    return total


async def http_get(port: int, path: str) -> int:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status_line = await reader.readline()
        await reader.read()
        return int(status_line.split()[1])
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


@dataclass
class Attack:
    sent: int = 0
    status: int | None = None
    error: str | None = None
    seconds: float = 0.0


async def attack(port: int, path: str, total: int) -> Attack:
    """One chunked POST of `total` bytes of zeros; stops when the server answers or hangs up."""
    outcome = Attack()
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection(HOST, port)
    chunk = b"%x\r\n" % CHUNK + b"\0" * CHUNK + b"\r\n"

    async def read_status() -> None:
        line = await reader.readline()
        if line:
            outcome.status = int(line.split()[1])

    answer = asyncio.create_task(read_status())
    try:
        writer.write(
            (
                f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n"
            ).encode()
        )
        while outcome.sent < total and not answer.done():
            writer.write(chunk)
            await writer.drain()
            outcome.sent += CHUNK
        if not answer.done():
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        await asyncio.wait_for(answer, 120)
    except (OSError, TimeoutError) as exc:
        outcome.error = type(exc).__name__
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(answer, 5)
    finally:
        answer.cancel()
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    outcome.seconds = time.perf_counter() - started
    return outcome


async def measure(args: argparse.Namespace, pid: int) -> dict[str, object]:
    idle_samples = []
    deadline = time.perf_counter() + args.idle_seconds
    while time.perf_counter() < deadline:
        idle_samples.append(rss_bytes(pid))
        await asyncio.sleep(0.05)
    idle = int(statistics.median(idle_samples))
    log(f"idle RSS {idle / 1e6:.1f} MB")

    peak = idle
    health: list[float] = []
    health_errors = 0
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_bytes(pid))
            await asyncio.sleep(0.01)

    async def probe() -> None:
        nonlocal health_errors
        while not done.is_set():
            started = time.perf_counter()
            try:
                status = await asyncio.wait_for(http_get(args.port, "/healthz"), 30)
            except (OSError, TimeoutError):
                health_errors += 1
                continue
            health.append(time.perf_counter() - started)
            if status != 200:
                health_errors += 1
            await asyncio.sleep(0.02)

    watchers = [asyncio.create_task(sample()), asyncio.create_task(probe())]
    started = time.perf_counter()

    async def attacker() -> list[Attack]:
        # Again and again until `--seconds` have passed (at least once): a sustained attack.
        outcomes = [await attack(args.port, args.path, args.megabytes * MIB)]
        while time.perf_counter() - started < args.seconds:
            outcomes.append(await attack(args.port, args.path, args.megabytes * MIB))
        return outcomes

    rounds = await asyncio.gather(*(attacker() for _ in range(args.attackers)))
    attack_seconds = time.perf_counter() - started
    attacks = [outcome for outcomes in rounds for outcome in outcomes]
    await asyncio.sleep(0.5)  # memory the server releases late still counts
    done.set()
    await asyncio.gather(*watchers)
    after = rss_bytes(pid)

    for index, outcomes in enumerate(rounds):
        first = outcomes[0]
        log(
            f"attacker {index}: {len(outcomes)} requests; the first: status {first.status}, "
            f"sent {first.sent / MIB:.1f} MiB in {first.seconds:.2f} s"
            f"{f', {first.error}' if first.error else ''}"
        )
    health_ms = sorted(value * 1000 for value in health)
    summary: dict[str, object] = {
        "bench": "body_limits",
        "path": args.path,
        "attackers": args.attackers,
        "body_mib": args.megabytes,
        "idle_rss_mb": round(idle / 1e6, 1),
        "peak_rss_mb": round(peak / 1e6, 1),
        "peak_over_idle_mb": round((peak - idle) / 1e6, 1),
        "rss_after_mb": round(after / 1e6, 1),
        "requests": len(attacks),
        "statuses": sorted({str(outcome.status) for outcome in attacks}),
        "max_sent_mib": round(max(outcome.sent for outcome in attacks) / MIB, 1),
        "attack_seconds": round(attack_seconds, 2),
        "healthz_probes": len(health_ms),
        "healthz_errors": health_errors,
        "healthz_p50_ms": round(statistics.median(health_ms), 1) if health_ms else None,
        "healthz_max_ms": round(health_ms[-1], 1) if health_ms else None,
    }
    print(f"idle RSS:            {idle / 1e6:8.1f} MB")
    print(
        f"peak RSS (attack):   {peak / 1e6:8.1f} MB  (+{(peak - idle) / 1e6:.1f} MB; target < 50)"
    )
    print(f"RSS after:           {after / 1e6:8.1f} MB")
    if health_ms:
        print(
            f"/healthz during it:  p50 {summary['healthz_p50_ms']} ms, "
            f"max {summary['healthz_max_ms']} ms over {len(health_ms)} probes"
        )
    print(json.dumps(summary))
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attackers", type=int, default=3)
    parser.add_argument("--megabytes", type=int, default=256)
    parser.add_argument("--path", default="/webhooks/whatsapp")
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="keep attacking this long (at least once)"
    )
    parser.add_argument("--port", type=int, default=8131)
    parser.add_argument("--idle-seconds", type=float, default=2.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="sb-body-limits-") as folder:
        env = {
            **os.environ,
            "DATABASE_URL": f"sqlite+aiosqlite:///{folder}/switchboard.db",
            "SWITCHBOARD_VAR_DIR": f"{folder}/var",
            "SWITCHBOARD_STORAGE_URL": f"file://{folder}/objects",
            "SWITCHBOARD_ACCESS_LOG": "false",
            "SWITCHBOARD_LOG_LEVEL": "warning",
        }
        env.pop("REDIS_URL", None)
        server = subprocess.Popen(
            [str(SWITCHBOARD), "serve", "--no-worker", "--host", HOST, "--port", str(args.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(Path(folder) / "server.log", "wb"),  # noqa: SIM115
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if asyncio.run(http_get(args.port, "/healthz")) == 200:
                        break
                except OSError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    log((Path(folder) / "server.log").read_text()[-2000:])
                    raise SystemExit("the server did not start")
                time.sleep(0.2)
            log(f"server pid {server.pid} ready on :{args.port}")
            asyncio.run(measure(args, server.pid))
        finally:
            server.terminate()
            try:
                server.wait(15)
            except subprocess.TimeoutExpired:
                server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
