"""Campaign dispatch throughput, through the real job engine, against the fake Graph API.

Recreates the PostgreSQL database `switchboard_campaigns`, seeds one organization whose
contacts are bulk-inserted with COPY (`--contacts`, 100,000 by default), live channels at
`--rate` messages/s each (their `messages_per_second`) with an APPROVED template, then:

- starts the fake messages endpoint (tests/integrations/whatsapp/fake_graph.py, aiohttp) in its
  own process: the real wire format, every send's recipient recorded, duplicates counted;
- starts ONE `switchboard worker` process on Redis (`--redis-url`), whose
  SWITCHBOARD_GRAPH_API_URL points at the fake: the real client, the real governor;
- per audience size (`--sizes`, 10k and 100k): launches a campaign through the campaigns
  service (audience resolution = the launch's time: the ledger INSERT … SELECT and commit),
  pauses it half-way (pause-to-quiet = from the pause's commit to the fake's last send after
  it), resumes it, and waits until it completes; messages/s counts the sending time only
  (first send to pause, resume to last send). The worker's RSS (its process tree) is sampled
  every 0.2 s;
- then `--channels` channels at `--rate` each, one campaign of `--multi-size` recipients per
  channel launched together: aggregate messages/s.

It prints the figures, the machine's load (the machine may be shared: distrust a loaded run),
and a one-line JSON summary; it never asserts on speed. Duplicates or lost recipients are
errors (exit code 1).
Run: ``.venv/bin/python bench/campaign_dispatch.py [--sizes 10000,100000] [--rate 1000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
sys.path.insert(0, str(REPO_DIR))

from app.access.scopes import Scope  # noqa: E402
from app.access.subject import PrincipalType, Subject  # noqa: E402
from app.campaigns import service as campaigns  # noqa: E402
from app.campaigns.models import Campaign  # noqa: E402
from app.campaigns.schemas import CampaignCreate  # noqa: E402
from app.channels import service as channels  # noqa: E402
from app.channels.models import Channel  # noqa: E402
from app.config import Settings  # noqa: E402
from app.core.ids import new_id  # noqa: E402
from app.db.engine import create_engine, create_sessionmaker  # noqa: E402
from app.kit import outbox  # noqa: E402
from app.organizations.service import create_organization  # noqa: E402
from app.templates.models import MessageTemplate  # noqa: E402
from workers.broker import build_broker  # noqa: E402

SWITCHBOARD = Path(sys.executable).parent / "switchboard"
FAKE = REPO_DIR / "tests" / "integrations" / "whatsapp" / "fake_graph.py"
BENCH_DB = "switchboard_campaigns"
TOKEN = "EAAGbench-token"
WABA = "102290129340398"
BODY = {"type": "BODY", "text": "Hi {{1}}, your order {{2}} has shipped."}
CONTACT_COLUMNS = [
    "id",
    "organization_id",
    "phone_number",
    "name",
    "tags",
    "created_at",
    "updated_at",
]
# A pause is over when the fake has seen nothing new for this long.
QUIET_SECONDS = 1.0


def log(message: str) -> None:
    print(f"[campaigns] {message}", file=sys.stderr, flush=True)


async def recreate_database(admin_dsn: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{BENCH_DB}"')
    finally:
        await conn.close()


def contact_tags(index: int, sizes: list[int], channels: int, multi_size: int) -> list[str]:
    tags = [f"s{size}" for size in sizes if index < size]
    if index < channels * multi_size:
        tags.append(f"m{index // multi_size}")
    return tags


async def seed_contacts(dsn: str, organization_id: str, args: argparse.Namespace) -> float:
    """COPY the contacts in (one bulk insert, not the API) and ANALYZE; answers seconds."""
    import asyncpg

    started = time.perf_counter()
    now = datetime.now(UTC)
    records = (
        (
            str(uuid.uuid4()),
            organization_id,
            f"+1{416_000_0000 + index}",
            f"Contact {index}",
            json.dumps(contact_tags(index, args.sizes, args.channels, args.multi_size)),
            now,
            now,
        )
        for index in range(args.contacts)
    )
    conn = await asyncpg.connect(dsn)
    try:
        await conn.copy_records_to_table("contacts", records=records, columns=CONTACT_COLUMNS)
        await conn.execute("ANALYZE contacts")
    finally:
        await conn.close()
    return time.perf_counter() - started


@dataclass
class Setup:
    subject: Subject
    channel_ids: list[str]
    phone_number_ids: list[str]
    template_ids: list[str]


async def seed(sessionmaker: Any, settings: Settings, count: int, rate: int) -> Setup:
    box = channels.access_token_box(settings.resolved_secret_key())
    async with sessionmaker() as session:
        organization = await create_organization(session, "campaigns bench")
        await session.flush()
        subject = Subject(
            organization.id, "bench", PrincipalType.API_KEY, frozenset({Scope.FULL_ACCESS}), True
        )
        setup = Setup(subject, [], [], [])
        for index in range(count):
            channel = Channel(
                id=new_id(),
                organization_id=organization.id,
                display_phone_number=f"+1415555{index:04d}",
                phone_number_id=f"10654035224{index:04d}",
                business_account_id=WABA,
                livemode=True,
                access_token_encrypted="",
            )
            channel.access_token_encrypted = box.encrypt(
                TOKEN, f"channel:{organization.id}:{channel.id}".encode()
            )
            channel.messages_per_second = rate
            session.add(channel)
            await session.flush()
            template = MessageTemplate(
                id=new_id(),
                organization_id=organization.id,
                channel_id=channel.id,
                business_account_id=WABA,
                platform_template_id=f"99{index:04d}",
                name=f"order_shipped_{index}",
                language="en_US",
                category="UTILITY",
                status="APPROVED",
                components=[BODY],
                quality_score="GREEN",
                livemode=True,
            )
            session.add(template)
            await session.flush()
            setup.channel_ids.append(channel.id)
            setup.phone_number_ids.append(channel.phone_number_id)
            setup.template_ids.append(template.id)
        await session.commit()
    return setup


class Fake:
    """The fake messages endpoint in its own process."""

    def __init__(self, log_dir: Path) -> None:
        self.log = (log_dir / "fake.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(FAKE), "--port", "0", "--token", TOKEN],
            stdout=subprocess.PIPE,
            stderr=self.log,
            cwd=REPO_DIR,
            env={**os.environ, "PYTHONPATH": str(REPO_DIR)},
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        if not line.startswith("listening "):
            raise RuntimeError(f"fake Graph API did not start: {line!r}")
        self.url = line.removeprefix("listening ")
        self.http = httpx.AsyncClient(base_url=self.url, timeout=10)

    async def stats(self, since: float = 0.0) -> dict[str, Any]:
        response = await self.http.get("/_stats", params={"since": since} if since else None)
        data: dict[str, Any] = response.json()
        return data

    async def sent(self, phone_number_id: str) -> int:
        return int((await self.stats())["per_number"].get(phone_number_id, 0))

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=10)


def tree_rss_mb(root: int) -> float:
    """Resident memory of `root` and its descendants (the worker forks its processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    total_kb = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total_kb += int(line.split()[1])
        except OSError:
            continue
    return total_kb / 1024


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU of `root` and its live descendants."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    fields: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                rest = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        fields[int(entry)] = rest
        children.setdefault(int(rest[1]), []).append(int(entry))
    total = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        if pid in fields:
            total += int(fields[pid][11]) + int(fields[pid][12])  # utime, stime
    return total / ticks


@dataclass
class RssSampler:
    pid: int
    peak_mb: float = 0.0
    task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.peak_mb = 0.0
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.peak_mb = max(self.peak_mb, tree_rss_mb(self.pid))
            await asyncio.sleep(0.2)

    async def stop(self) -> float:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        return self.peak_mb


@dataclass
class Result:
    size: int
    resolution_s: float
    messages_per_s: float
    pause_to_quiet_s: float | None
    peak_rss_mb: float
    sends: int
    duplicates: int
    completed: bool
    cpu_us_per_message: float
    notes: list[str] = field(default_factory=list)


async def create_and_launch(
    sessionmaker: Any, setup: Setup, channel_index: int, tag: str
) -> tuple[str, float]:
    data = CampaignCreate.model_validate(
        {
            "name": f"bench {tag}",
            "chat_phone_number_id": setup.channel_ids[channel_index],
            "message_template_id": setup.template_ids[channel_index],
            "audience_type": "tags",
            "audience_tags": [tag],
            "template_parameters": {"1": "{{contact.name}}", "2": "A-1001"},
        }
    )
    async with sessionmaker() as session:
        campaign = await campaigns.create_campaign(session, setup.subject, data)
        await session.commit()
        campaign_id = campaign.id
    started = time.perf_counter()
    async with sessionmaker() as session:
        await campaigns.launch_campaign(session, setup.subject, campaign_id)
        await session.commit()
    return campaign_id, time.perf_counter() - started


async def status_of(sessionmaker: Any, campaign_id: str) -> Campaign:
    async with sessionmaker() as session:
        found = await session.get(Campaign, campaign_id)
        assert found is not None
        return found


async def wait_until(check: Any, seconds: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(step)
    return False


async def run_size(
    sessionmaker: Any,
    setup: Setup,
    fake: Fake,
    sampler: RssSampler,
    size: int,
    channel: int,
    seconds: float,
) -> Result:
    number = setup.phone_number_ids[channel]
    before = await fake.stats()
    sampler.start()
    cpu_before = tree_cpu_seconds(sampler.pid)
    campaign_id, resolution = await create_and_launch(sessionmaker, setup, channel, f"s{size}")
    log(f"{size}: audience resolved in {resolution:.2f} s; sending")

    async def half_sent() -> bool:
        return await fake.sent(number) >= size // 2

    notes: list[str] = []
    await wait_until(half_sent, seconds)
    async with sessionmaker() as session:
        await campaigns.pause_campaign(session, setup.subject, campaign_id)
        await session.commit()
    paused_at = time.time()
    at_pause = await fake.sent(number)
    last_seen, quiet_since = at_pause, time.monotonic()
    while time.monotonic() - quiet_since < QUIET_SECONDS:
        await asyncio.sleep(0.05)
        now_sent = await fake.sent(number)
        if now_sent != last_seen:
            last_seen, quiet_since = now_sent, time.monotonic()
    after_pause = await fake.stats(since=paused_at)
    quiet = max(0.0, after_pause["last_since"] - paused_at) if after_pause["sends_since"] else 0.0
    log(f"{size}: paused at {at_pause} sends; quiet after {quiet * 1000:.0f} ms")
    first_send = float((await fake.stats(since=before["last"]))["first_since"])
    async with sessionmaker() as session:
        await campaigns.resume_campaign(session, setup.subject, campaign_id)
        await session.commit()
    resumed_at = time.time()

    async def completed() -> bool:
        return (await status_of(sessionmaker, campaign_id)).status == "completed"

    done = await wait_until(completed, seconds, 0.2)
    final = await fake.stats(since=resumed_at)
    cpu = tree_cpu_seconds(sampler.pid) - cpu_before
    peak = await sampler.stop()
    campaign = await status_of(sessionmaker, campaign_id)
    sends = int(final["per_number"].get(number, 0))
    if not done:
        notes.append(f"not completed within {seconds:.0f} s ({campaign.status})")
    if campaign.sent_count != size or sends != size:
        notes.append(f"sent_count {campaign.sent_count}, fake saw {sends}, audience {size}")
    # Sending time: from the first send to the pause, and from the resume to the last send.
    sending = (paused_at - first_send) + max(0.0, final["last"] - resumed_at)
    rate = sends / sending if sending > 0 else 0.0
    return Result(
        size,
        resolution,
        rate,
        quiet,
        peak,
        sends,
        int(final["duplicates"]) - int(before["duplicates"]),
        done and not notes,
        cpu / sends * 1e6 if sends else 0.0,
        notes,
    )


async def run_channels(
    sessionmaker: Any, setup: Setup, fake: Fake, sampler: RssSampler, args: argparse.Namespace
) -> dict[str, Any]:
    base = len(args.sizes)
    before = await fake.stats()
    sampler.start()
    cpu_before = tree_cpu_seconds(sampler.pid)
    launched = await asyncio.gather(
        *(
            create_and_launch(sessionmaker, setup, base + index, f"m{index}")
            for index in range(args.channels)
        )
    )
    ids = [campaign_id for campaign_id, _ in launched]

    async def all_completed() -> bool:
        found = [await status_of(sessionmaker, campaign_id) for campaign_id in ids]
        return all(campaign.status == "completed" for campaign in found)

    done = await wait_until(all_completed, args.timeout, 0.2)
    cpu = tree_cpu_seconds(sampler.pid) - cpu_before
    peak = await sampler.stop()
    stats = await fake.stats(since=before["last"])
    sends = sum(
        int(stats["per_number"].get(setup.phone_number_ids[base + index], 0))
        for index in range(args.channels)
    )
    span = stats["last"] - stats["first_since"]
    return {
        "channels": args.channels,
        "recipients": args.channels * args.multi_size,
        "sends": sends,
        "messages_per_s": round(sends / span, 1) if span > 0 else 0.0,
        "ratio": round(sends / span / (args.rate * args.channels), 3) if span > 0 else 0.0,
        "peak_rss_mb": round(peak, 1),
        "duplicates": int(stats["duplicates"]) - int(before["duplicates"]),
        "completed": done and sends == args.channels * args.multi_size,
        "worker_cpu_us_per_message": round(cpu / sends * 1e6) if sends else 0,
    }


def load_average() -> float:
    with open("/proc/loadavg") as loadavg:
        return float(loadavg.read().split()[0])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="audience sizes, comma-separated")
    parser.add_argument("--rate", type=int, default=1000, help="messages/s of each channel")
    parser.add_argument("--channels", type=int, default=4, help="channels of the second run")
    parser.add_argument("--multi-size", type=int, default=20000, help="recipients per channel")
    parser.add_argument("--threads", type=int, default=4, help="worker threads")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per campaign")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/2")
    )
    args = parser.parse_args()
    args.sizes = [int(size) for size in args.sizes.split(",") if size]
    args.contacts = max([*args.sizes, args.channels * args.multi_size])
    return args


async def main_async(args: argparse.Namespace) -> int:
    admin_dsn = args.database_url
    dsn = f"{admin_dsn.rsplit('/', 1)[0]}/{BENCH_DB}"
    sqlalchemy_url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
    await recreate_database(admin_dsn)
    log_dir = Path(tempfile.mkdtemp(prefix="switchboard-campaigns-"))
    fake = Fake(log_dir)
    try:
        return await measure(args, dsn, sqlalchemy_url, log_dir, fake)
    finally:
        fake.stop()


async def measure(
    args: argparse.Namespace, dsn: str, sqlalchemy_url: str, log_dir: Path, fake: Fake
) -> int:
    secret = "bench-secret-key-0123456789-0123456789"
    env = dict(os.environ)
    env.update(
        DATABASE_URL=sqlalchemy_url,
        REDIS_URL=args.redis_url,
        SWITCHBOARD_GRAPH_API_URL=fake.url,
        SWITCHBOARD_LOG_LEVEL="warning",
        SWITCHBOARD_SECRET_KEY=secret,
    )
    await asyncio.to_thread(
        subprocess.run, [str(SWITCHBOARD), "migrate"], env=env, check=True, capture_output=True
    )
    settings = Settings(database_url=sqlalchemy_url, redis_url=args.redis_url, secret_key=secret)
    broker = build_broker(args.redis_url)
    broker.client.flushdb()  # type: ignore[attr-defined]
    import dramatiq

    for queue in ("default", "events", "webhooks"):
        broker.declare_queue(queue)
    dramatiq.set_broker(broker)
    relay = outbox.BrokerRelay(broker, broker.client)  # type: ignore[attr-defined]
    outbox.set_dispatcher(relay.submit)
    engine = create_engine(settings.database_url, pool_size=8)
    sessionmaker = create_sessionmaker(engine)
    setup = await seed(sessionmaker, settings, len(args.sizes) + args.channels, args.rate)
    async with sessionmaker() as session:
        organization_id = setup.subject.organization_id
        await session.commit()
    seconds = await seed_contacts(dsn, organization_id, args)
    log(f"seeded {args.contacts} contacts with COPY in {seconds:.1f} s")

    worker_log = (log_dir / "worker.log").open("w")
    worker = subprocess.Popen(  # noqa: ASYNC220 (started once, before measuring)
        [str(SWITCHBOARD), "worker", "--processes", "1", "--threads", str(args.threads)],
        env=env,
        cwd=REPO_DIR,
        stdout=worker_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    sampler = RssSampler(worker.pid)
    load_before = load_average()
    results: list[Result] = []
    multi: dict[str, Any] = {}
    try:
        await asyncio.sleep(3)  # the worker boots and opens its pools
        idle_rss = tree_rss_mb(worker.pid)
        for index, size in enumerate(args.sizes):
            results.append(
                await run_size(sessionmaker, setup, fake, sampler, size, index, args.timeout)
            )
        if args.channels:
            log(f"{args.channels} channels x {args.multi_size} recipients at {args.rate}/s each")
            multi = await run_channels(sessionmaker, setup, fake, sampler, args)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
        await engine.dispose()
        relay.close()
        broker.close()
    load_after = load_average()
    cores = os.cpu_count() or 1
    print(f"one channel at {args.rate} messages/s, one worker process ({args.threads} threads)")
    print(
        f"{'audience':>9} {'resolve s':>9} {'msg/s':>8} {'ratio':>6} {'quiet ms':>9}"
        f" {'peak RSS MB':>11} {'dupes':>6} {'complete':>8} {'CPU us/msg':>10}"
    )
    summary: dict[str, Any] = {
        "bench": "campaign_dispatch",
        "rate": args.rate,
        "worker_idle_rss_mb": round(idle_rss, 1),
    }
    failed = False
    for result in results:
        ratio = result.messages_per_s / args.rate
        quiet = result.pause_to_quiet_s
        print(
            f"{result.size:9d} {result.resolution_s:9.2f} {result.messages_per_s:8.0f}"
            f" {ratio:6.3f} {quiet * 1000 if quiet is not None else float('nan'):9.0f}"
            f" {result.peak_rss_mb:11.1f} {result.duplicates:6d} {result.completed!s:>8}"
            f" {result.cpu_us_per_message:10.0f}"
        )
        for note in result.notes:
            print(f"  ! {note}")
        failed = failed or result.duplicates > 0 or not result.completed
        summary[str(result.size)] = {
            "ratio": round(ratio, 3),
            "messages_per_s": round(result.messages_per_s, 1),
            "audience_resolution_s": round(result.resolution_s, 2),
            "pause_to_quiet_s": round(quiet, 3) if quiet is not None else None,
            "peak_rss_mb": round(result.peak_rss_mb, 1),
            "duplicates": result.duplicates,
            "completed": result.completed,
            "worker_cpu_us_per_message": round(result.cpu_us_per_message),
        }
    if multi:
        print(
            f"{multi['channels']} channels: {multi['messages_per_s']:.0f} messages/s aggregate"
            f" (ratio {multi['ratio']:.3f} of {args.rate * multi['channels']}),"
            f" peak RSS {multi['peak_rss_mb']:.1f} MB, duplicates {multi['duplicates']},"
            f" completed {multi['completed']}"
        )
        failed = failed or multi["duplicates"] > 0 or not multi["completed"]
        summary["channels"] = multi
    print(
        "targets: ratio >= 0.95 on one channel, audience resolution < 3 s (100k),"
        " pause-to-quiet < 1 s, RSS < 300 MB and flat from 10k to 100k"
    )
    print(f"load average {load_before:.1f} before, {load_after:.1f} after, on {cores} cores")
    if max(load_before, load_after) > cores * 0.75:
        print("WARNING: the machine is loaded by other work; these figures are noisy")
    summary["load_average"] = [load_before, load_after]
    summary["cores"] = cores
    log(f"logs: {log_dir}")
    print(json.dumps(summary, separators=(",", ":")))
    return 1 if failed else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop: the worker and fake too
    raise SystemExit(asyncio.run(main_async(parse_args())))
