"""Throughput of Switchboard's contact listing against a floor and a peer.

Seeds a fresh PostgreSQL database with one organization's contacts, starts each
server with ONE worker on loopback, checks every target answers 200 with 20
items, then loads the targets one at a time with wrk and prints req/s, p50/p99
latency, non-2xx counts, server CPU, ratios against the floor and PostGraphile,
and a one-line JSON summary. It reports figures only; it never asserts on time.

Targets:
  rest          Switchboard ``GET /api/v1/contacts?limit=20``
  graphql       Switchboard ``POST /graphql`` ``contacts(first: 20)``
  floor         bench/floor_server.py: bare Starlette + asyncpg + orjson
  postgraphile  PostGraphile v4 ``allContacts(first: 20, ...)``

The fast paths measured one by one (only when named in --targets; each server is a Switchboard
with some fast paths off, see SWITCHBOARD_SERVERS):
  graphql-unplanned     the graphql query with compiled plans off: Strawberry and the fast
                        executor (SWITCHBOARD_GRAPHQL_PLANNING=false)
  graphql-core          plans and the fast executor off: graphql-core's own executor
  graphql-edges         ``contacts(first: 20) { edges { cursor node {...} } totalCount }``, a
                        query the plans do not take (edges has a resolver): the fast executor
                        beside the plans
  graphql-edges-core    the same with the fast executor off (plans on)

Run: ``.venv/bin/python bench/api_throughput.py [--duration 10] [--connections 32]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
PG_DIR = BENCH_DIR / "postgraphile"
WRK_SCRIPT = BENCH_DIR / "wrk_graphql.lua"
SWITCHBOARD = Path(sys.executable).parent / "switchboard"

HOST = "127.0.0.1"  # every server binds, and every request goes, to loopback only
BENCH_DB = "switchboard_bench"
DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"
PORT_SWITCHBOARD, PORT_FLOOR, PORT_POSTGRAPHILE = 8101, 8102, 8103
# Switchboard servers by name: port, and the fast paths turned off (one process each).
NO_PLANS = {"SWITCHBOARD_GRAPHQL_PLANNING": "false"}
NO_EXECUTOR = {"SWITCHBOARD_GRAPHQL_FAST_EXECUTOR": "false"}
SWITCHBOARD_SERVERS: dict[str, tuple[int, dict[str, str]]] = {
    "switchboard": (PORT_SWITCHBOARD, {}),
    "switchboard-unplanned": (8104, NO_PLANS),
    "switchboard-core": (8105, NO_PLANS | NO_EXECUTOR),
    "switchboard-no-executor": (8106, NO_EXECUTOR),
}
PAGE = 20
CLK_TCK = os.sysconf("SC_CLK_TCK")

GOALS = {"rest/floor": 0.5, "graphql/floor": 0.35}
RATIOS = [
    ("rest/floor", "rest", "floor"),
    ("graphql/floor", "graphql", "floor"),
    ("graphql/postgraphile", "graphql", "postgraphile"),
    ("rest/postgraphile", "rest", "postgraphile"),
    # What the fast executor buys: on a query the plans do not take, and with plans off.
    ("graphql-edges/graphql-edges-core", "graphql-edges", "graphql-edges-core"),
    ("graphql-unplanned/graphql-core", "graphql-unplanned", "graphql-core"),
    # What the plans buy over the fast executor.
    ("graphql/graphql-unplanned", "graphql", "graphql-unplanned"),
]
DEFAULT_TARGETS = ("rest", "graphql", "floor", "postgraphile")
# The Switchboard server each Switchboard target loads.
SWITCHBOARD_TARGETS = {
    "rest": "switchboard",
    "graphql": "switchboard",
    "graphql-unplanned": "switchboard-unplanned",
    "graphql-core": "switchboard-core",
    "graphql-edges": "switchboard",
    "graphql-edges-core": "switchboard-no-executor",
}
ALL_TARGETS = (
    *DEFAULT_TARGETS,
    "graphql-unplanned",
    "graphql-core",
    "graphql-edges",
    "graphql-edges-core",
)
FIELDS = "id organizationId phoneNumber name tags notes customFields createdAt updatedAt"
SWITCHBOARD_QUERY = f"{{ contacts(first: {PAGE}) {{ nodes {{ {FIELDS} }} totalCount }} }}"
EDGES_QUERY = (
    f"{{ contacts(first: {PAGE}) {{ edges {{ cursor node {{ {FIELDS} }} }} totalCount }} }}"
)
POSTGRAPHILE_QUERY = (
    f'{{ allContacts(first: {PAGE}, condition: {{organizationId: "{{org}}"}}, '
    f"orderBy: [CREATED_AT_DESC, ID_DESC]) {{ nodes {{ {FIELDS} }} totalCount }} }}"
)
FLOOR_SQL = (
    "SELECT id FROM contacts WHERE organization_id=$1 ORDER BY created_at DESC, id DESC LIMIT 20"
)
STANDALONE_SCHEMA = """
CREATE TABLE contacts (
    id varchar(36) PRIMARY KEY,
    organization_id varchar(36) NOT NULL,
    phone_number varchar(50) NOT NULL,
    name varchar(255),
    tags jsonb NOT NULL DEFAULT '[]',
    notes text,
    custom_fields jsonb,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
CREATE INDEX ix_contacts_org_created
    ON contacts (organization_id, created_at DESC, id DESC);
"""
CONTACT_COLUMNS = [
    "id",
    "organization_id",
    "phone_number",
    "name",
    "tags",
    "notes",
    "custom_fields",
    "created_at",
    "updated_at",
]


class BenchError(RuntimeError):
    """A setup or verification failure that stops the benchmark."""


# --------------------------------------------------------------------------- setup


def log(msg: str) -> None:
    """Print a progress line to stderr."""
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def ensure_wrk() -> str:
    """Return wrk's path, installing it with apt-get if it is missing."""
    found = shutil.which("wrk")
    if found:
        return found
    apt = shutil.which("apt-get")
    if not apt:
        raise BenchError("wrk is not on PATH and apt-get is unavailable")
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    log("wrk not found: apt-get install -y wrk")
    install = [apt, "install", "-y", "wrk"]
    if subprocess.run(install, check=False, env=env, capture_output=True).returncode != 0:
        subprocess.run([apt, "update"], check=False, env=env, capture_output=True)
        done = subprocess.run(install, check=False, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise BenchError(f"apt-get install -y wrk failed:\n{done.stderr[-2000:]}")
    found = shutil.which("wrk")
    if not found:
        raise BenchError("wrk still not on PATH after apt-get install")
    return found


def ensure_postgraphile() -> Path:
    """Return PostGraphile's cli.js, running npm ci/install if node_modules is missing."""
    cli = PG_DIR / "node_modules" / "postgraphile" / "cli.js"
    if cli.exists():
        return cli
    npm = shutil.which("npm")
    if not npm or not shutil.which("node"):
        raise BenchError("node/npm not on PATH: cannot install PostGraphile")
    verb = "ci" if (PG_DIR / "package-lock.json").exists() else "install"
    log(f"installing PostGraphile: npm {verb} in {PG_DIR}")
    done = subprocess.run(
        [npm, verb, "--no-audit", "--no-fund"],
        check=False,
        cwd=PG_DIR,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 or not cli.exists():
        raise BenchError(f"npm {verb} failed:\n{done.stdout[-1000:]}{done.stderr[-2000:]}")
    return cli


def database_urls(admin_url: str) -> tuple[str, str, str]:
    """Return (admin asyncpg DSN, bench asyncpg DSN, bench SQLAlchemy URL)."""
    parts = urlsplit(admin_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    if parts.scheme not in ("postgresql", "postgres"):
        raise BenchError(f"unsupported database URL scheme: {parts.scheme!r}")
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise BenchError(f"refusing a non-loopback database host: {parts.hostname!r}")
    admin = urlunsplit(parts._replace(scheme="postgresql"))
    bench = urlunsplit(parts._replace(scheme="postgresql", path=f"/{BENCH_DB}"))
    return admin, bench, bench.replace("postgresql://", "postgresql+asyncpg://", 1)


async def recreate_database(admin_dsn: str) -> None:
    """Drop (WITH FORCE) and create the bench database."""
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{BENCH_DB}"')
    finally:
        await conn.close()


async def create_standalone_schema(dsn: str) -> None:
    """Create a bare contacts table (only for --standalone-schema runs)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(STANDALONE_SCHEMA)
    finally:
        await conn.close()


def switchboard_env(sqlalchemy_url: str) -> dict[str, str]:
    """Environment for every ``switchboard`` command: bench DB, no limits, no Redis."""
    env = dict(os.environ)
    env.pop("REDIS_URL", None)
    env.update(
        DATABASE_URL=sqlalchemy_url,
        SWITCHBOARD_RATE_LIMIT_PER_KEY="1000000000/s",
        SWITCHBOARD_RATE_LIMIT_PER_ORG="1000000000/s",
        SWITCHBOARD_LOG_LEVEL="warning",
        SWITCHBOARD_ACCESS_LOG="false",
    )
    return env


def run_switchboard(args: list[str], env: dict[str, str]) -> str:
    """Run a ``switchboard`` CLI command and return its stdout."""
    if not SWITCHBOARD.exists():
        raise BenchError(f"{SWITCHBOARD} not found (is the project installed in this venv?)")
    done = subprocess.run(
        [str(SWITCHBOARD), *args],
        check=False,
        env=env,
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise BenchError(
            f"switchboard {' '.join(args)} exited {done.returncode}:\n"
            f"{done.stdout[-2000:]}{done.stderr[-4000:]}"
        )
    return done.stdout


def create_org(env: dict[str, str]) -> tuple[str, str]:
    """Create the bench organization; return (organization_id, api_key)."""
    out = run_switchboard(["orgs", "create", "--name", "bench"], env)
    for line in reversed(out.strip().splitlines()):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and "organization_id" in data and "api_key" in data:
            return str(data["organization_id"]), str(data["api_key"])
    raise BenchError(f"could not parse `switchboard orgs create` output:\n{out}")


def contact_records(org_id: str, count: int) -> Iterator[tuple[Any, ...]]:
    """Yield deterministic contact rows with distinct created_at over one year."""
    rng = random.Random(20240601)
    first = ["Ana", "Bo", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivo", "Jun"]
    last = ["Silva", "Okafor", "Nguyen", "Kowalski", "Haddad", "Moreau", "Ito", "Reyes"]
    start = datetime.now(UTC) - timedelta(days=365)
    step = 365 * 86400 / count
    for i in range(count):
        created = start + timedelta(seconds=i * step + rng.random() * step * 0.5)
        tags = ["vip"] if i % 10 == 0 else (["lead", "newsletter"] if i % 7 == 0 else [])
        custom = {"plan": rng.choice(["free", "pro"]), "seats": rng.randint(1, 50)}
        yield (
            str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            org_id,
            f"+1415555{i:04d}" if i < 10_000 else f"+1416{i:07d}",
            f"{rng.choice(first)} {rng.choice(last)}",
            json.dumps(tags),
            f"Note for contact {i}" if i % 3 == 0 else None,
            json.dumps(custom) if i % 2 == 0 else None,
            created,
            created + timedelta(seconds=rng.randint(0, 86400)),
        )


async def seed_contacts(dsn: str, org_id: str, count: int) -> list[str]:
    """COPY ``count`` contacts in, ANALYZE, and return the expected first-page ids."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.copy_records_to_table(
            "contacts", records=contact_records(org_id, count), columns=CONTACT_COLUMNS
        )
        await conn.execute("ANALYZE contacts")
        return [row["id"] for row in await conn.fetch(FLOOR_SQL, org_id)]
    finally:
        await conn.close()


# --------------------------------------------------------------------------- servers


@dataclass
class Server:
    """A server started in its own process group, logging to a file."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    ready_url: str
    log_path: Path
    ready_body: dict[str, Any] | None = None
    cwd: Path = REPO_DIR
    proc: subprocess.Popen[bytes] | None = None
    ready_offset: int = 0

    def start(self) -> None:
        """Spawn the server process, refusing a port some other process holds."""
        port = urlsplit(self.ready_url).port
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ignore TIME_WAIT
            try:
                probe.bind((HOST, port or 0))
            except OSError as exc:
                raise BenchError(f"{self.name}: {HOST}:{port} is already in use") from exc
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                self.cmd,
                env=self.env,
                cwd=self.cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Poll the readiness URL until it answers 200."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        last = "no answer"
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise BenchError(
                        f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}"
                    )
                try:
                    if self.ready_body is None:
                        resp = client.get(self.ready_url)
                    else:
                        resp = client.post(self.ready_url, json=self.ready_body)
                    if resp.status_code == 200:
                        self.ready_offset = self.log_path.stat().st_size
                        return
                    last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                except httpx.HTTPError as exc:
                    last = repr(exc)
                time.sleep(0.25)
        raise BenchError(f"{self.name} not ready after {timeout}s ({last}):\n{self.log_tail()}")

    def stop(self) -> None:
        """Terminate the whole process group (SIGTERM, then SIGKILL)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(grace)
                return
            except subprocess.TimeoutExpired:
                continue

    def log_digest(self) -> tuple[int, Counter[str]]:
        """Tracebacks and distinct unindented lines logged since readiness."""
        with self.log_path.open("rb") as f:
            f.seek(self.ready_offset)
            lines = f.read().decode(errors="replace").splitlines()
        header = "Traceback (most recent call last):"
        tracebacks = sum(1 for ln in lines if ln.startswith(header))
        top = Counter(ln for ln in lines if ln.strip() and not ln[0].isspace())
        del top[header]
        return tracebacks, top

    def log_tail(self, lines: int = 40) -> str:
        """Return the last lines of the server log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@contextmanager
def running(servers: list[Server]) -> Iterator[None]:
    """Start servers, wait for readiness, and always stop them afterwards."""
    try:
        for server in servers:
            log(f"starting {server.name} (log: {server.log_path})")
            server.start()
        for server in servers:
            server.wait_ready()
            log(f"{server.name} ready")
        yield
    finally:
        for server in servers:
            server.stop()


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    """One URL + request shape to verify and load."""

    key: str
    label: str
    server: str
    url: str
    items: Callable[[Any], Any]
    method: str = "GET"
    body: str | None = None
    authorization: str | None = None


def _rest_items(data: Any) -> Any:
    """The list of contacts in a REST response, wherever the envelope puts it."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        for key in ("data", "items", "results", "contacts"):
            if isinstance(data.get(key), list):
                return data[key]
        for value in data.values():
            if isinstance(value, list):
                return value
    return None


def _graphql_nodes(root: str) -> Callable[[Any], Any]:
    def extract(data: Any) -> Any:
        if not isinstance(data, dict) or data.get("errors"):
            return None
        return ((data.get("data") or {}).get(root) or {}).get("nodes")

    return extract


def _graphql_edge_nodes(data: Any) -> Any:
    """The nodes of `contacts.edges`, in order."""
    if not isinstance(data, dict) or data.get("errors"):
        return None
    edges = ((data.get("data") or {}).get("contacts") or {}).get("edges")
    if not isinstance(edges, list):
        return None
    return [edge.get("node") if isinstance(edge, dict) else None for edge in edges]


def build_targets(keys: list[str], org_id: str, api_key: str | None) -> list[Target]:
    """The targets selected on the command line, in a fixed order."""
    bearer = f"Bearer {api_key}" if api_key else None
    sb = f"http://{HOST}:{PORT_SWITCHBOARD}"
    pg_query = POSTGRAPHILE_QUERY.replace("{org}", org_id)
    variants = [
        Target(
            key,
            label,
            SWITCHBOARD_TARGETS[key],
            f"http://{HOST}:{SWITCHBOARD_SERVERS[SWITCHBOARD_TARGETS[key]][0]}/graphql",
            method="POST",
            body=json.dumps({"query": query}),
            authorization=bearer,
            items=items,
        )
        for key, label, query, items in (
            (
                "graphql-unplanned",
                "GraphQL no plans",
                SWITCHBOARD_QUERY,
                _graphql_nodes("contacts"),
            ),
            (
                "graphql-core",
                "GraphQL no plans/executor",
                SWITCHBOARD_QUERY,
                _graphql_nodes("contacts"),
            ),
            ("graphql-edges", "GraphQL edges", EDGES_QUERY, _graphql_edge_nodes),
            ("graphql-edges-core", "GraphQL edges, no executor", EDGES_QUERY, _graphql_edge_nodes),
        )
    ]
    every = [
        Target(
            "rest",
            "Switchboard REST",
            "switchboard",
            f"{sb}/api/v1/contacts?limit={PAGE}",
            authorization=bearer,
            items=_rest_items,
        ),
        Target(
            "graphql",
            "Switchboard GraphQL",
            "switchboard",
            f"{sb}/graphql",
            method="POST",
            body=json.dumps({"query": SWITCHBOARD_QUERY}),
            authorization=bearer,
            items=_graphql_nodes("contacts"),
        ),
        Target(
            "floor",
            "Floor (Starlette+asyncpg)",
            "floor",
            f"http://{HOST}:{PORT_FLOOR}/contacts",
            items=lambda data: data.get("data") if isinstance(data, dict) else None,
        ),
        Target(
            "postgraphile",
            "PostGraphile v4",
            "postgraphile",
            f"http://{HOST}:{PORT_POSTGRAPHILE}/graphql",
            method="POST",
            body=json.dumps({"query": pg_query}),
            items=_graphql_nodes("allContacts"),
        ),
        *variants,
    ]
    return [t for t in every if t.key in keys]


def verify(target: Target, expected_ids: list[str]) -> None:
    """Require HTTP 200 and exactly 20 items; warn if the rows differ from the floor's."""
    headers = {"Content-Type": "application/json"} if target.body else {}
    if target.authorization:
        headers["Authorization"] = target.authorization
    resp = httpx.request(
        target.method, target.url, content=target.body, headers=headers, timeout=10.0
    )
    try:
        data = resp.json()
    except ValueError:
        data = None
    items = target.items(data)
    if resp.status_code != 200 or not isinstance(items, list) or len(items) != PAGE:
        count = len(items) if isinstance(items, list) else "no"
        raise BenchError(
            f"{target.label} failed verification: HTTP {resp.status_code}, {count} items:\n"
            f"{resp.text[:1500]}"
        )
    ids = [item.get("id") if isinstance(item, dict) else None for item in items]
    if ids != expected_ids:
        log(f"WARNING: {target.label} returned 20 items but not the floor's 20 rows in order")
    log(f"verified {target.label}: HTTP 200, {PAGE} items")


# --------------------------------------------------------------------------- load


def _proc_table() -> dict[int, tuple[str, int, int]]:
    """pid -> (comm, ppid, CPU ticks incl. reaped children) for every process."""
    table: dict[int, tuple[str, int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        rest = raw[raw.rindex(")") + 2 :].split()
        ticks = sum(int(v) for v in rest[11:15])  # utime stime cutime cstime
        table[int(entry.name)] = (comm, int(rest[1]), ticks)
    return table


def _is_bench_backend(pid: int) -> bool:
    """Whether a ``postgres`` process is a backend connected to the bench database."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return f" {BENCH_DB} ".encode() in title


@dataclass(frozen=True)
class CpuSample:
    """Cumulative CPU seconds of the server tree, PostgreSQL, wrk and the machine."""

    server: float
    postgres: float
    wrk: float
    machine: float

    def percent_since(self, before: CpuSample, seconds: float) -> dict[str, float]:
        """Percent of one core used by each party between two samples."""
        pct = {
            name: 100 * (getattr(self, name) - getattr(before, name)) / seconds
            for name in ("server", "postgres", "wrk", "machine")
        }
        pct["other"] = max(0.0, pct["machine"] - pct["server"] - pct["postgres"] - pct["wrk"])
        return pct


def cpu_sample(root_pid: int) -> CpuSample:
    """Read /proc: root_pid's tree, the bench DB's backends, wrk (our children)."""
    table = _proc_table()
    tree, frontier = {root_pid}, [root_pid]
    while frontier:
        parent = frontier.pop()
        for pid, (_, ppid, _) in table.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    server = sum(table[pid][2] for pid in tree if pid in table)
    postgres = sum(
        ticks
        for pid, (comm, _, ticks) in table.items()
        if comm == "postgres" and _is_bench_backend(pid)
    )
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    busy = sum(fields) - fields[3] - fields[4]  # all but idle and iowait
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return CpuSample(
        server=server / CLK_TCK,
        postgres=postgres / CLK_TCK,
        wrk=children.ru_utime + children.ru_stime,
        machine=busy / CLK_TCK,
    )


@dataclass
class Result:
    """wrk's figures for one measured run."""

    target: Target
    rps: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: int
    requests: int
    cpu: dict[str, float]


def run_wrk(
    target: Target, duration: int, connections: int, threads: int
) -> tuple[dict[str, Any], str]:
    """Run wrk once against a target; return the done() stats and the raw output."""
    env = os.environ | {
        "WRK_METHOD": target.method,
        "WRK_BODY": target.body or "",
        "WRK_AUTHORIZATION": target.authorization or "",
    }
    cmd = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{duration}s",
        "--latency",
        "-s",
        str(WRK_SCRIPT),
        target.url,
    ]
    done = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("WRK_JSON "):
            return json.loads(line.removeprefix("WRK_JSON ")), done.stdout
    raise BenchError(f"wrk gave no stats for {target.label}:\n{done.stdout}{done.stderr}")


def measure(target: Target, server: Server, args: argparse.Namespace) -> Result:
    """Warm up, then run the measured wrk pass while sampling CPU."""
    assert server.proc is not None
    if args.warmup > 0:
        log(f"{target.label}: warm-up {args.warmup}s")
        run_wrk(target, args.warmup, args.connections, args.threads)
    log(f"{target.label}: measuring {args.duration}s (-t{args.threads} -c{args.connections})")
    before, t0 = cpu_sample(server.proc.pid), time.monotonic()
    stats, raw = run_wrk(target, args.duration, args.connections, args.threads)
    cpu = cpu_sample(server.proc.pid).percent_since(before, time.monotonic() - t0)
    if args.verbose:
        print(raw, file=sys.stderr)
    seconds = stats["duration_us"] / 1e6
    return Result(
        target=target,
        rps=stats["requests"] / seconds if seconds else 0.0,
        p50_ms=stats["p50_us"] / 1000,
        p99_ms=stats["p99_us"] / 1000,
        non_2xx=stats["non_2xx_3xx"],
        socket_errors=sum(
            stats[k] for k in ("connect_errors", "read_errors", "write_errors", "timeouts")
        ),
        requests=stats["requests"],
        cpu=cpu,
    )


# --------------------------------------------------------------------------- report


def report(results: list[Result], servers: list[Server], args: argparse.Namespace) -> bool:
    """Print the table, ratios, goals and JSON summary; return False on any error."""
    ok = True
    print()
    print(
        f"API throughput: {args.contacts} contacts, wrk -t{args.threads} -c{args.connections}"
        f" -d{args.duration}s --latency, 1 worker per server, loopback"
    )
    header = (
        f"{'target':<27}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'non-2xx':>9}"
        f"{'sock err':>9}{'server CPU %':>13}{'pg %':>6}{'wrk %':>6}{'other %':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.target.label:<27}{r.rps:>10.1f}{r.p50_ms:>9.2f}{r.p99_ms:>9.2f}"
            f"{r.non_2xx:>9}{r.socket_errors:>9}{r.cpu['server']:>13.0f}"
            f"{r.cpu['postgres']:>6.0f}{r.cpu['wrk']:>6.0f}{r.cpu['other']:>8.0f}"
        )
    print(
        f"CPU: percent of one core ({os.cpu_count()} cores); 'other' = machine busy time"
        " not spent in the server, its PostgreSQL backends or wrk"
    )
    for r in results:
        if r.non_2xx:
            ok = False
            print(
                f"!!! ERROR: {r.target.label}: {r.non_2xx} of {r.requests} responses were "
                "non-2xx/3xx: these figures are NOT valid !!!"
            )
        if r.cpu["other"] > 25:
            print(
                f"!!! WARNING: {r.target.label}: {r.cpu['other']:.0f}% of a core went to other"
                " work during the run: figures are disturbed, rerun on a quiet machine"
            )
        if r.socket_errors:
            print(f"!!! WARNING: {r.target.label}: {r.socket_errors} socket errors/timeouts")

    rps = {r.target.key: r.rps for r in results}
    ratios = {name: rps[a] / rps[b] for name, a, b in RATIOS if rps.get(a) and rps.get(b)}
    print()
    print("ratios (req/s):")
    for name, value in ratios.items():
        goal = GOALS.get(name)
        verdict = ""
        if goal is not None:
            verdict = f"   target >= {goal:.2f}: {'met' if value >= goal else 'NOT MET'}"
        print(f"  {name:<22}{value:>7.3f}{verdict}")

    print()
    for server in servers:
        tracebacks, lines = server.log_digest()
        state = "ERRORS" if tracebacks else ("output" if lines else "clean")
        print(
            f"server log {server.name} after startup: {state}, {tracebacks} tracebacks"
            f" ({server.log_path})"
        )
        for text, count in lines.most_common(6):
            print(f"    {count:>6} x {text[:160]}")

    summary = {
        "bench": "api_throughput",
        "contacts": args.contacts,
        "wrk": {
            "threads": args.threads,
            "connections": args.connections,
            "duration_s": args.duration,
            "rounds": args.rounds,
        },
        "results": {
            r.target.key: {
                "rps": round(r.rps, 1),
                "p50_ms": round(r.p50_ms, 2),
                "p99_ms": round(r.p99_ms, 2),
                "non_2xx": r.non_2xx,
                "socket_errors": r.socket_errors,
                "cpu_pct": {k: round(v) for k, v in r.cpu.items()},
            }
            for r in results
        },
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
        "targets_met": {k: ratios[k] >= g for k, g in GOALS.items() if k in ratios},
    }
    print()
    print(json.dumps(summary, separators=(",", ":")))
    return ok


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=int, default=10, help="seconds per measured run")
    p.add_argument("--warmup", type=int, default=3, help="warm-up seconds per target")
    p.add_argument("--connections", type=int, default=32, help="wrk -c")
    p.add_argument("--threads", type=int, default=2, help="wrk -t")
    p.add_argument("--contacts", type=int, default=10_000, help="contacts to seed")
    p.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_ADMIN_URL),
        help="admin URL of a loopback PostgreSQL (env BENCH_DATABASE_URL)",
    )
    p.add_argument(
        "--targets",
        default=",".join(DEFAULT_TARGETS),
        help=f"comma-separated subset of {','.join(ALL_TARGETS)}",
    )
    p.add_argument(
        "--standalone-schema",
        action="store_true",
        help="create a bare contacts table instead of `switchboard migrate` "
        "(harness testing only; excludes the rest and graphql targets)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="measure every target this many times, interleaved; report each target's median"
        " run (this machine's speed drifts by tens of percent over minutes)",
    )
    p.add_argument("--log-dir", type=Path, help="where server logs go (default: a temp dir)")
    p.add_argument("-v", "--verbose", action="store_true", help="echo wrk's own output")
    args = p.parse_args(argv)
    keys = [k.strip() for k in args.targets.split(",") if k.strip()]
    unknown = set(keys) - set(ALL_TARGETS)
    if unknown or not keys:
        p.error(f"unknown targets: {sorted(unknown)}")
    if args.standalone_schema:
        keys = [k for k in keys if k not in SWITCHBOARD_TARGETS]
    args.target_keys = keys
    return args


def build_servers(
    keys: list[str], bench_dsn: str, sb_env: dict[str, str], org_id: str, log_dir: Path
) -> list[Server]:
    """The servers needed by the selected targets."""
    servers: list[Server] = []
    wanted = {SWITCHBOARD_TARGETS[key] for key in keys if key in SWITCHBOARD_TARGETS}
    for name, (port, fast_paths_off) in SWITCHBOARD_SERVERS.items():
        if name not in wanted:
            continue
        servers.append(
            Server(
                name=name,
                cmd=[
                    str(SWITCHBOARD),
                    "serve",
                    "--host",
                    HOST,
                    "--port",
                    str(port),
                    "--workers",
                    "1",
                    "--no-worker",
                ],
                env=sb_env | fast_paths_off,
                ready_url=f"http://{HOST}:{port}/healthz",
                log_path=log_dir / f"{name}.log",
            )
        )
    if "floor" in keys:
        servers.append(
            Server(
                name="floor",
                cmd=[
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "--app-dir",
                    str(BENCH_DIR),
                    "floor_server:app",
                    "--host",
                    HOST,
                    "--port",
                    str(PORT_FLOOR),
                    "--workers",
                    "1",
                    "--no-access-log",
                    "--log-level",
                    "warning",
                ],
                env=os.environ | {"BENCH_DSN": bench_dsn, "BENCH_ORG_ID": org_id},
                ready_url=f"http://{HOST}:{PORT_FLOOR}/contacts",
                log_path=log_dir / "floor.log",
            )
        )
    if "postgraphile" in keys:
        cli = ensure_postgraphile()
        servers.append(
            Server(
                name="postgraphile",
                cmd=[
                    shutil.which("node") or "node",
                    str(cli),
                    "--connection",
                    bench_dsn,
                    "--schema",
                    "public",
                    "--host",
                    HOST,
                    "--port",
                    str(PORT_POSTGRAPHILE),
                    "--max-pool-size",
                    "10",
                    "--disable-graphiql",
                    "--disable-query-log",
                    "--dynamic-json",
                    "--no-setof-functions-contain-nulls",
                    "--no-ignore-rbac",
                    "--disable-default-mutations",
                ],
                env=os.environ | {"NODE_ENV": "production"},
                ready_url=f"http://{HOST}:{PORT_POSTGRAPHILE}/graphql",
                ready_body={"query": "{ __typename }"},
                log_path=log_dir / "postgraphile.log",
                cwd=PG_DIR,
            )
        )
    return servers


def main(argv: list[str] | None = None) -> int:
    """Set up, verify, load each target in turn, and report."""
    args = parse_args(argv)
    keys: list[str] = args.target_keys
    ensure_wrk()
    if not WRK_SCRIPT.exists():
        raise BenchError(f"missing {WRK_SCRIPT}")
    admin_dsn, bench_dsn, sqlalchemy_url = database_urls(args.database_url)
    log_dir: Path = args.log_dir or Path(tempfile.mkdtemp(prefix="switchboard-bench-"))
    log_dir.mkdir(parents=True, exist_ok=True)

    log(f"recreating database {BENCH_DB}")
    asyncio.run(recreate_database(admin_dsn))
    sb_env = switchboard_env(sqlalchemy_url)
    api_key: str | None = None
    if args.standalone_schema:
        asyncio.run(create_standalone_schema(bench_dsn))
        org_id = str(uuid.uuid4())
    else:
        log("switchboard migrate")
        run_switchboard(["migrate"], sb_env)
        org_id, api_key = create_org(sb_env)
    log(f"seeding {args.contacts} contacts for organization {org_id}")
    expected_ids = asyncio.run(seed_contacts(bench_dsn, org_id, args.contacts))

    targets = build_targets(keys, org_id, api_key)
    servers = build_servers(keys, bench_dsn, sb_env, org_id, log_dir)
    by_name = {s.name: s for s in servers}
    results: list[Result] = []
    with running(servers):
        for target in targets:
            verify(target, expected_ids)
        runs: dict[str, list[Result]] = {target.key: [] for target in targets}
        for round_number in range(1, args.rounds + 1):
            log(f"round {round_number} of {args.rounds}")
            for target in targets:  # one at a time: the machine has 2 cores
                runs[target.key].append(measure(target, by_name[target.server], args))
        for target in targets:
            per_round = ", ".join(f"{run.rps:.0f}" for run in runs[target.key])
            log(f"{target.label}: req/s per round {per_round}")
            results.append(median_run(runs[target.key]))
        # Targets of one round run back to back, so their ratio is the least disturbed by the
        # machine's drift between rounds.
        for name, numerator, denominator in RATIOS:
            if numerator in runs and denominator in runs:
                ratios = [
                    a.rps / b.rps
                    for a, b in zip(runs[numerator], runs[denominator], strict=True)
                    if b.rps
                ]
                if ratios:
                    listed = ", ".join(f"{ratio:.3f}" for ratio in ratios)
                    log(f"{name}: per round {listed}; median {statistics.median(ratios):.3f}")
    return 0 if report(results, servers, args) else 1


def median_run(runs: list[Result]) -> Result:
    """The run with the median req/s (its latency and CPU figures come with it)."""
    ordered = sorted(runs, key=lambda run: run.rps)
    return ordered[(len(ordered) - 1) // 2]


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"\n!!! BENCH FAILED: {exc}", file=sys.stderr)
        sys.exit(2)
