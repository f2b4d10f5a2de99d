"""Contact lists at scale: one organization of 1,000,000 contacts on PostgreSQL.

Creates its own database (dropped at the end unless --keep), migrates it, creates one
organization and key with the CLI, then seeds:

- bulk, one ``INSERT … SELECT`` statement of --contacts rows through the counter triggers (the
  real write path, one request per contact, would take hours here); before it, the same
  statement into a scratch organization with and without the counter triggers, --rounds times
  each, interleaved and rolled back, so the times compare counting against no counting (all
  with the B-tree indexes only; the GIN indexes are dropped for the load and rebuilt after,
  timed);
- through the real write path: --api-contacts contacts by ``POST /api/v1/contacts``.

Data: every 10th contact tagged ``lead``, every 100th ``vip`` and ``lead`` (1% / 10%); names
are 50 first names x 200 surnames (each full name ~100 contacts, each surname ~0.5%); phone
numbers ``+1415`` followed by 7 digits of the row number.

Then, against one Switchboard server (one worker, no Redis), it reads sequentially (one
request at a time, keep-alive) and prints p50/p99 per read on REST and GraphQL: first page,
a deep cursor page (after the middle contact), tag filters, name searches, phone searches (an
E.164 prefix, and digits anywhere in the number) and a search with no match; every response
carries its exact ``total_count``. It ends with a one-line JSON summary. It reports figures
only; it never asserts on time.

Run: ``.venv/bin/python bench/scale.py [--contacts 1000000] [--samples 100]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
from api_throughput import (
    HOST,
    SWITCHBOARD,
    BenchError,
    Server,
    create_org,
    log,
    run_switchboard,
    running,
    switchboard_env,
)

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"
PORT = 8111
PAGE = 20
GIN_INDEXES = {
    "ix_contacts_organization_id_tags": (
        "CREATE INDEX ix_contacts_organization_id_tags ON contacts "
        "USING gin (organization_id, tags jsonb_path_ops)"
    ),
    "ix_contacts_search_trgm": (
        "CREATE INDEX ix_contacts_search_trgm ON contacts "
        "USING gin (organization_id, name gin_trgm_ops, phone_number gin_trgm_ops)"
    ),
}
FIRST = [
    "Ana",
    "Bo",
    "Chen",
    "Dara",
    "Eli",
    "Fatima",
    "Gus",
    "Hana",
    "Ivo",
    "Jun",
    "Kofi",
    "Lena",
    "Mia",
    "Nils",
    "Omar",
    "Pia",
    "Quinn",
    "Rosa",
    "Sami",
    "Tara",
    "Uma",
    "Vik",
    "Wen",
    "Xavi",
    "Yara",
    "Zeno",
    "Alma",
    "Bela",
    "Cruz",
    "Dov",
    "Edda",
    "Finn",
    "Gala",
    "Hugo",
    "Iris",
    "Jory",
    "Kai",
    "Lior",
    "Mona",
    "Noor",
    "Otto",
    "Pilar",
    "Rhea",
    "Sven",
    "Teo",
    "Ulla",
    "Vera",
    "Wade",
    "Yuki",
    "Zora",
]
ROOTS = [
    "Silva",
    "Okafor",
    "Nguyen",
    "Kowal",
    "Haddad",
    "Moreau",
    "Itoh",
    "Reyes",
    "Novak",
    "Larsen",
    "Adeyemi",
    "Petrov",
    "Costa",
    "Schmidt",
    "Tanaka",
    "Murphy",
    "Rossi",
    "Dubois",
    "Yilmaz",
    "Khan",
]
SUFFIXES = ["", "son", "ley", "ford", "berg", "ton", "wood", "field", "man", "ski"]
SURNAMES = [root + suffix for root in ROOTS for suffix in SUFFIXES]  # 200
FIELDS = "id name phoneNumber tags createdAt"


def seed_sql(count: int) -> str:
    first = "ARRAY[" + ",".join(f"'{name}'" for name in FIRST) + "]"
    last = "ARRAY[" + ",".join(f"'{name}'" for name in SURNAMES) + "]"
    # Newest first is i = 1: created_at falls back 30 s per row (a year per ~1M rows).
    return f"""
    INSERT INTO contacts (id, organization_id, phone_number, name, tags, notes, custom_fields,
                          created_at, updated_at)
    SELECT gen_random_uuid()::text, $1, '+1415' || lpad(i::text, 7, '0'),
           ({first})[1 + i % {len(FIRST)}] || ' '
             || ({last})[1 + (i / {len(FIRST)}) % {len(SURNAMES)}],
           CASE WHEN i % 100 = 0 THEN '["vip", "lead"]'::jsonb
                WHEN i % 10 = 0 THEN '["lead"]'::jsonb ELSE '[]'::jsonb END,
           CASE WHEN i % 3 = 0 THEN 'Note ' || i END,
           CASE WHEN i % 2 = 0 THEN jsonb_build_object('plan', 'pro', 'seats', i % 50) END,
           now() - make_interval(secs => i * 30), now() - make_interval(secs => i * 30)
    FROM generate_series(1, {count}) AS i
    """


def urls(admin_url: str, name: str) -> tuple[str, str, str]:
    parts = urlsplit(admin_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise BenchError(f"refusing a non-loopback database host: {parts.hostname!r}")
    admin = urlunsplit(parts._replace(scheme="postgresql"))
    bench = urlunsplit(parts._replace(scheme="postgresql", path=f"/{name}"))
    return admin, bench, bench.replace("postgresql://", "postgresql+asyncpg://", 1)


async def admin_execute(dsn: str, statement: str) -> None:
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


COUNTER_TRIGGERS = ("contacts_count_insert", "contacts_count_update", "contacts_count_delete")


async def timed_insert(dsn: str, org_id: str, count: int, *, counting: bool) -> float:
    """One INSERT … SELECT of `count` contacts into a scratch organization, rolled back (the
    trigger change too), then VACUUM: seconds taken by the INSERT."""
    connection = await asyncpg.connect(dsn)
    try:
        transaction = connection.transaction()
        await transaction.start()
        if not counting:
            disable = ", ".join(f"DISABLE TRIGGER {name}" for name in COUNTER_TRIGGERS)
            await connection.execute(f"ALTER TABLE contacts {disable}")
        started = time.perf_counter()
        await connection.execute(seed_sql(count), org_id)
        elapsed = time.perf_counter() - started
        await transaction.rollback()
        await connection.execute("VACUUM contacts")
        return elapsed
    finally:
        await connection.close()


async def seed(dsn: str, org_id: str, count: int, rounds: int) -> dict[str, Any]:
    """Bulk seed; returns the timings (seconds)."""
    timings: dict[str, Any] = {"insert_without_counting_s": [], "insert_with_counting_s": []}
    connection = await asyncpg.connect(dsn)
    try:
        for index in GIN_INDEXES:
            await connection.execute(f"DROP INDEX {index}")
        scratch = str(uuid.uuid4())
        await connection.execute(
            "INSERT INTO organizations (id, name, created_at, updated_at) "
            "VALUES ($1, 'scratch', now(), now())",
            scratch,
        )
    finally:
        await connection.close()
    # Interleaved, each rolled back: the machine's speed drifts, so each variant runs `rounds`
    # times in turn on the same table state.
    for round_ in range(rounds):
        for counting in (False, True):
            log(f"round {round_ + 1}: {count:,} contacts, counting {counting} (rolled back)")
            key = "insert_with_counting_s" if counting else "insert_without_counting_s"
            elapsed = await timed_insert(dsn, scratch, count, counting=counting)
            timings[key].append(round(elapsed, 2))
    connection = await asyncpg.connect(dsn)
    try:
        log(f"seeding {count:,} contacts in one statement, counted")
        started = time.perf_counter()
        await connection.execute(seed_sql(count), org_id)
        timings["seed_insert_s"] = time.perf_counter() - started
        log("rebuilding the GIN indexes")
        started = time.perf_counter()
        for statement in GIN_INDEXES.values():
            await connection.execute(statement)
        timings["gin_indexes_s"] = time.perf_counter() - started
        started = time.perf_counter()
        await connection.execute("VACUUM ANALYZE contacts")
        await connection.execute("VACUUM ANALYZE resource_counters")
        timings["vacuum_analyze_s"] = time.perf_counter() - started
        exact = await connection.fetchval(
            "SELECT count(*) FROM contacts WHERE organization_id = $1", org_id
        )
        counted = await connection.fetchval(
            "SELECT sum(count) FROM resource_counters WHERE organization_id = $1 "
            "AND resource = 'contacts' AND label = ''",
            org_id,
        )
        if exact != counted:
            raise BenchError(f"counter {counted} != count(*) {exact}")
    finally:
        await connection.close()
    return timings


async def middle_contact(dsn: str, org_id: str, count: int) -> str:
    connection = await asyncpg.connect(dsn)
    try:
        found: str = await connection.fetchval(
            "SELECT id FROM contacts WHERE organization_id = $1 "
            "ORDER BY created_at DESC, id DESC OFFSET $2 LIMIT 1",
            org_id,
            count // 2,
        )
        return found
    finally:
        await connection.close()


async def api_writes(client: httpx.AsyncClient, headers: dict[str, str], count: int) -> float:
    """Contacts through the real write path; returns the mean seconds per request."""
    started = time.perf_counter()
    for index in range(count):
        response = await client.post(
            "/api/v1/contacts",
            json={
                "phone_number": f"+1212555{index:04d}",
                "name": f"Api Writer {index}",
                "tags": ["vip"] if index % 10 == 0 else [],
            },
            headers=headers,
        )
        if response.status_code != 200:
            raise BenchError(f"POST /contacts: {response.status_code} {response.text[:300]}")
    return (time.perf_counter() - started) / max(count, 1)


def reads(after: str) -> list[tuple[str, dict[str, str], str]]:
    """(name, REST query, GraphQL arguments) of every measured read."""
    full_name = f"{FIRST[7]} {SURNAMES[33]}"
    return [
        ("first page", {}, ""),
        ("deep cursor page", {"starting_after": after}, f'after: "{after}"'),
        ("tag vip (1%)", {"tag": "vip"}, 'tag: "vip"'),
        ("tag lead (10%)", {"tag": "lead"}, 'tag: "lead"'),
        ("tag nobody has", {"tag": "nobody"}, 'tag: "nobody"'),
        ("name search, full name", {"search": full_name}, f'search: "{full_name}"'),
        ("name search, surname", {"search": SURNAMES[57]}, f'search: "{SURNAMES[57]}"'),
        ("phone search, +prefix", {"search": "+14150987"}, 'search: "+14150987"'),
        ("phone search, digits", {"search": "5098765"}, 'search: "5098765"'),
        ("no-match search", {"search": "zzqxw"}, 'search: "zzqxw"'),
    ]


@dataclass
class Request:
    client: httpx.AsyncClient
    headers: dict[str, str]
    name: str
    surface: str
    query: dict[str, str]
    document: str

    async def once(self) -> tuple[int, int]:
        """(rows on the page, total_count) of one request."""
        if self.surface == "rest":
            response = await self.client.get(
                "/api/v1/contacts", params={"limit": PAGE, **self.query}, headers=self.headers
            )
            if response.status_code != 200:
                raise BenchError(f"{self.name}: {response.status_code} {response.text[:300]}")
            body = response.json()
            return len(body["data"]), body["total_count"]
        response = await self.client.post(
            "/graphql", json={"query": self.document}, headers=self.headers
        )
        body = response.json()
        if response.status_code != 200 or body.get("errors"):
            raise BenchError(f"{self.name} (GraphQL): {response.text[:300]}")
        contacts = body["data"]["contacts"]
        return len(contacts["nodes"]), contacts["totalCount"]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def measure(
    client: httpx.AsyncClient, headers: dict[str, str], after: str, samples: int
) -> list[dict[str, Any]]:
    results = []
    for name, query, arguments in reads(after):
        graphql_args = ", ".join(filter(None, [f"first: {PAGE}", arguments]))
        document = (
            f"{{ contacts({graphql_args}) {{ totalCount nodes {{ {FIELDS} }} "
            "pageInfo { hasNextPage endCursor } } }"
        )
        for surface in ("rest", "graphql"):
            request = Request(client, headers, name, surface, query, document)
            for _ in range(3):
                await request.once()
            timings = []
            for _ in range(samples):
                started = time.perf_counter()
                rows, total = await request.once()
                timings.append((time.perf_counter() - started) * 1000)
            results.append(
                {
                    "read": name,
                    "surface": surface,
                    "rows": rows,
                    "total_count": total,
                    "p50_ms": round(percentile(timings, 0.5), 2),
                    "p99_ms": round(percentile(timings, 0.99), 2),
                }
            )
            log(f"{name} ({surface}): {results[-1]}")
    return results


def machine_load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


async def run(args: argparse.Namespace) -> dict[str, Any]:
    name = f"switchboard_scale_{uuid.uuid4().hex[:8]}"
    admin, dsn, sqlalchemy_url = urls(args.admin_url, name)
    await admin_execute(admin, f'CREATE DATABASE "{name}"')
    try:
        env = switchboard_env(sqlalchemy_url)
        run_switchboard(["migrate"], env)
        org_id, api_key = create_org(env)
        headers = {"Authorization": f"Bearer {api_key}"}
        summary: dict[str, Any] = {"contacts": args.contacts, "load_before": machine_load()}
        started = time.perf_counter()
        timings = await seed(dsn, org_id, args.contacts, args.rounds)
        summary.update({k: round(v, 2) if isinstance(v, float) else v for k, v in timings.items()})
        summary["seed_total_s"] = round(time.perf_counter() - started, 2)
        after = await middle_contact(dsn, org_id, args.contacts)
        log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="switchboard-scale-"))
        server = Server(
            name="switchboard",
            cmd=[
                str(SWITCHBOARD),
                "serve",
                "--host",
                HOST,
                "--port",
                str(args.port),
                "--workers",
                "1",
                "--no-worker",
            ],
            env=env,
            ready_url=f"http://{HOST}:{args.port}/healthz",
            log_path=log_dir / "switchboard.log",
        )
        with running([server]):
            async with httpx.AsyncClient(
                base_url=f"http://{HOST}:{args.port}", timeout=60.0
            ) as client:
                mean = await api_writes(client, headers, args.api_contacts)
                summary["api_contacts"] = args.api_contacts
                summary["api_write_mean_ms"] = round(mean * 1000, 2)
                summary["reads"] = await measure(client, headers, after, args.samples)
        summary["load_after"] = machine_load()
        return summary
    finally:
        if not args.keep:
            await admin_execute(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        else:
            log(f"kept database {name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contacts", type=int, default=1_000_000)
    parser.add_argument("--api-contacts", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2, help="insert timings per variant")
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--admin-url", default=DEFAULT_ADMIN_URL)
    parser.add_argument("--log-dir", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()
    try:
        summary = asyncio.run(run(args))
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"\nseeding {summary['contacts']:,} contacts (one INSERT … SELECT each):")
    print(f"  without counting (rolled back): {summary['insert_without_counting_s']} s")
    print(f"  with counting (rolled back):    {summary['insert_with_counting_s']} s")
    print(f"  seeding itself, counted:        {summary['seed_insert_s']:8.2f} s")
    print(f"  GIN indexes rebuilt:            {summary['gin_indexes_s']:8.2f} s")
    print(f"  VACUUM ANALYZE:                 {summary['vacuum_analyze_s']:8.2f} s")
    print(
        f"  real write path: {summary['api_contacts']} x POST /api/v1/contacts, "
        f"mean {summary['api_write_mean_ms']} ms"
    )
    print(
        f"\n{'read':28} {'surface':8} {'rows':>4} {'total_count':>11} {'p50 ms':>8} {'p99 ms':>8}"
    )
    for row in summary["reads"]:
        print(
            f"{row['read']:28} {row['surface']:8} {row['rows']:>4} {row['total_count']:>11} "
            f"{row['p50_ms']:>8} {row['p99_ms']:>8}"
        )
    print(f"\nload average before {summary['load_before']}, after {summary['load_after']}")
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
