"""Contact search at scale on SQLite: one organization of 100,000 contacts.

Creates a scratch SQLite database (removed at the end unless --keep), migrates it, creates one
organization, and inserts --contacts rows in one transaction through the counter triggers (and,
where the migrations add it, the search index's triggers): names are 50 first names x 200
surnames as in bench/scale.py (each surname ~0.5%), phone numbers ``+1415`` followed by 7
digits of the row number. The insert time is printed.

Then it times, in-process through the contacts service (the SQL the REST and GraphQL lists
run, without HTTP), the first page (20) with its exact ``total_count`` of: no filter, a
surname, a full name, a three-letter name fragment, an E.164 prefix, digits inside the
number, a search with no match, and a prefix every number shares; best, p50 and p99 of
--samples runs each, then a one-line JSON summary. It reports figures only; it never asserts
on time.

Run: ``.venv/bin/python bench/sqlite_search.py [--contacts 100000] [--samples 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.scopes import Scope
from app.access.subject import PrincipalType, Subject
from app.contacts import service
from app.contacts.models import Contact
from app.core.ids import new_id
from app.db.engine import create_engine, create_sessionmaker
from app.db.migrate import upgrade
from app.kit.pagination import CursorParams
from app.organizations.service import create_organization

FIRST = [
    "Ada", "Alan", "Alice", "Amara", "Ana", "Ben", "Carlos", "Chen", "Chloe", "Daniel",
    "Diego", "Elena", "Emma", "Farah", "Felix", "Grace", "Hana", "Hugo", "Ines", "Ivan",
    "Jamal", "Julia", "Kenji", "Lara", "Leo", "Lina", "Luca", "Maya", "Mei", "Mohamed",
    "Nadia", "Noah", "Olga", "Omar", "Priya", "Rafael", "Rosa", "Sara", "Sofia", "Tariq",
    "Theo", "Uma", "Victor", "Wei", "Yara", "Yusuf", "Zara", "Zoe", "Ravi", "Nina",
]  # fmt: skip
ROOTS = [
    "Abbott", "Baker", "Castillo", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad",
    "Ivanova", "Jensen", "Kowalski", "Larsen", "Moreau", "Nakamura", "Okafor", "Petrov",
    "Quinn", "Rossi", "Schmidt", "Tanaka",
]  # fmt: skip
SUFFIXES = ["", "son", "ner", "ley", "ford", "wick", "berg", "ton", "ski", "ez"]
SURNAMES = [root + suffix for root in ROOTS for suffix in SUFFIXES]  # 200


def contact_rows(organization_id: str, count: int) -> list[dict[str, Any]]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(count):
        first = FIRST[i % len(FIRST)]
        last = SURNAMES[(i // len(FIRST)) % len(SURNAMES)]
        created = start + timedelta(seconds=i)
        rows.append(
            {
                "id": new_id(),
                "organization_id": organization_id,
                "phone_number": f"+1415{i:07d}",
                "name": f"{first} {last}",
                "tags": [],
                "created_at": created,
                "updated_at": created,
            }
        )
    return rows


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def run(contacts: int, samples: int, directory: Path) -> dict[str, Any]:
    url = f"sqlite+aiosqlite:///{directory / 'search.db'}"
    engine = create_engine(url, pool_size=1)
    sessionmaker = create_sessionmaker(engine)
    async with sessionmaker() as session:
        organization = await create_organization(session, "bench")
        await session.commit()
    started = time.perf_counter()
    async with sessionmaker() as session:
        await session.execute(insert(Contact), contact_rows(organization.id, contacts))
        await session.commit()
    seeded = time.perf_counter() - started
    print(f"inserted {contacts} contacts in {seeded:.1f} s", flush=True)
    subject = Subject(
        organization_id=organization.id,
        principal_id="bench",
        principal_type=PrincipalType.API_KEY,
        scopes=frozenset({Scope.FULL_ACCESS}),
        livemode=False,
    )
    reads = [
        ("first page", None),
        ("name search, surname", SURNAMES[57]),
        ("name search, full name", f"{FIRST[7]} {SURNAMES[33]}"),
        ("name search, fragment", "oka"),
        ("phone search, E.164 prefix", "+141500123"),
        ("phone search, digits inside", "0012345"),
        ("no-match search", "Zyxwvut"),
        # In every contact's number: too common for the index, scanned (FTS_MAX_HITS).
        ("phone search, shared prefix", "+1415"),
    ]
    figures: dict[str, Any] = {"contacts": contacts, "seed_seconds": round(seeded, 1)}
    async with sessionmaker() as session:
        for label, search in reads:
            times, total = await time_read(session, subject, search, samples)
            best, p50, p99 = min(times), percentile(times, 0.5), percentile(times, 0.99)
            print(
                f"{label:30} total {total:>6}  best {best:7.1f} ms  p50 {p50:7.1f} ms"
                f"  p99 {p99:7.1f} ms",
                flush=True,
            )
            figures[label] = {"total": total, "p50_ms": round(p50, 1), "p99_ms": round(p99, 1)}
    await engine.dispose()
    return figures


async def time_read(
    session: AsyncSession, subject: Subject, search: str | None, samples: int
) -> tuple[list[float], int]:
    times = []
    total = 0
    for _ in range(samples + 1):  # the first run warms the statement cache, not counted
        started = time.perf_counter()
        page = await service.list_contacts(session, subject, CursorParams(limit=20), search=search)
        times.append((time.perf_counter() - started) * 1000)
        total = page.total_count
    return times[1:], total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contacts", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--keep", type=Path, help="a directory to leave search.db in")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sb-sqlite-search-") as scratch:
        directory = args.keep or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        upgrade(f"sqlite+aiosqlite:///{directory / 'search.db'}")
        figures = asyncio.run(run(args.contacts, args.samples, directory))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
