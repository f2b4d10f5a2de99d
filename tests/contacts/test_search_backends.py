"""Contact search gives the same contacts on SQLite (trigram FTS5 index) and PostgreSQL (trigram
and pattern indexes): the same rows in both databases, the same searches, the same ids in the
same order with the same totals, also after the rows change (the index's triggers), and also
when SQLite scans instead of reading its index (short or too common texts)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, event, insert, update
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from app.access.scopes import Scope
from app.access.subject import PrincipalType, Subject
from app.contacts import repository as contact_repository
from app.contacts import service
from app.contacts.models import Contact
from app.db.engine import create_engine
from app.kit.pagination import CursorParams
from app.organizations.service import create_organization
from tests.conftest import fresh_database

PEOPLE = [
    ("Ada Lovelace", "+14155550100"),
    ("ada lovelace", "+14155550101"),
    ("ADA BYRON", "+442071838750"),
    ("Alan Turing", "+14155550142"),
    ("Katherine +Johnson", "+14165550100"),
    ("Mary Jackson", "+5511955550100"),
    ("Dorothy Vaughan", "+14155551415"),
    ("Ada Yonath", "+972501234567"),
    ("100% Sure_Thing", "+33142685300"),
    ('Quote "Q" Quinn', "+33142685301"),
    ("Back\\slash Bob", "+33142685302"),
    ("Zoë Saldaña", "+34912345678"),
    ("NEAR AND OR NOT", "+34912345679"),
    ("star*power {name}: x", "+34912345680"),
    ("  spaced   out  ", "+34912345681"),
]
SEARCHES = [
    "ada",  # case-insensitive substring, index path
    "ADA",
    "aDa lOVE",
    "Ad",  # two characters: a scan on SQLite
    "a",
    "ovelac",
    "+1415",  # an E.164 prefix (PostgreSQL: a B-tree range)
    "+14155550",
    "+44",
    "+",
    "+Johnson",  # '+' in a name
    "1415",  # digits anywhere in the number
    "0100",
    "5550100",
    "100%",  # LIKE's wildcards are literal
    "e_T",
    "%",
    "_",
    "\\slash",
    '"Q"',  # FTS5 syntax is literal
    'Q" Q',
    "NEAR",
    "AND OR",
    "star*",
    "{name}:",
    "e}: x",
    "   ",
    "oë Sal",  # non-ASCII, same case
    "zzz",
    "zz",
]


def _subject(organization_id: str) -> Subject:
    return Subject(
        organization_id=organization_id,
        principal_id="search-test",
        principal_type=PrincipalType.API_KEY,
        scopes=frozenset({Scope.FULL_ACCESS}),
        livemode=False,
    )


@pytest.fixture(scope="module")
def database_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    directory = tmp_path_factory.mktemp("search_backends")
    with (
        fresh_database("sqlite", directory, "sb_search") as sqlite_url,
        fresh_database("postgresql", directory, "sb_search") as postgresql_url,
    ):
        yield {"sqlite": sqlite_url, "postgresql": postgresql_url}


class Backend:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.sessionmaker = async_sessionmaker(engine, expire_on_commit=False)
        self.organization_id = ""
        self.statements: list[str] = []
        event.listen(engine.sync_engine, "before_cursor_execute", self._record)

    def _record(self, *args: Any) -> None:
        self.statements.append(args[2])

    async def seed(self, rows: list[dict[str, Any]]) -> None:
        async with self.sessionmaker() as session:
            organization = await create_organization(session, "Search")
            self.organization_id = organization.id
            await session.execute(
                insert(Contact), [{**row, "organization_id": organization.id} for row in rows]
            )
            # Another organization's look-alikes never appear.
            other = await create_organization(session, "Elsewhere")
            await session.execute(
                insert(Contact),
                [{**row, "id": str(uuid.uuid4()), "organization_id": other.id} for row in rows],
            )
            await session.commit()

    async def search(self, text: str) -> tuple[list[str], int]:
        async with self.sessionmaker() as session:
            page = await service.list_contacts(
                session, _subject(self.organization_id), CursorParams(limit=100), search=text
            )
        return [row.id for row in page.items], page.total_count

    async def write(self, statement: Any) -> None:
        async with self.sessionmaker() as session:
            await session.execute(statement)
            await session.commit()


@pytest.fixture
async def backends(database_urls: dict[str, str]) -> AsyncIterator[dict[str, Backend]]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        {
            "id": str(uuid.uuid4()),
            "phone_number": phone,
            "name": name,
            "tags": [],
            "created_at": start + timedelta(minutes=index),
            "updated_at": start + timedelta(minutes=index),
        }
        for index, (name, phone) in enumerate(PEOPLE)
    ]
    engines = {name: create_engine(url, pool_size=2) for name, url in database_urls.items()}
    backends = {name: Backend(engine) for name, engine in engines.items()}
    for backend in backends.values():
        await backend.seed(rows)
    yield backends
    for name, backend in backends.items():
        await backend.write(delete(Contact))
        await engines[name].dispose()


def _rule(text: str) -> list[str]:
    """Names matching, newest first, by the documented rule."""
    found = [
        name
        for name, phone in PEOPLE
        if text.lower() in name.lower() or text in phone  # ASCII case folding only
    ]
    return list(reversed(found))


async def _compare(backends: dict[str, Backend], searches: list[str]) -> None:
    sqlite, postgresql = backends["sqlite"], backends["postgresql"]
    for text in searches:
        on_sqlite, on_postgresql = await sqlite.search(text), await postgresql.search(text)
        assert on_sqlite == on_postgresql, text
        assert on_sqlite[1] == len(on_sqlite[0]), text


async def test_the_same_searches_find_the_same_contacts(backends: dict[str, Backend]) -> None:
    await _compare(backends, SEARCHES)
    # Both agree with the rule too (names are unique among the rows seeded here).
    sqlite = backends["sqlite"]
    async with sqlite.sessionmaker() as session:
        names = {
            row.id: row.name
            for row in (
                await service.list_contacts(
                    session, _subject(sqlite.organization_id), CursorParams(limit=100)
                )
            ).items
        }
    for text in SEARCHES:
        ids, _ = await sqlite.search(text)
        assert [names[i] for i in ids] == _rule(text), text


async def test_sqlite_reads_its_index_for_three_characters_and_more(
    backends: dict[str, Backend],
) -> None:
    sqlite = backends["sqlite"]
    sqlite.statements.clear()
    await sqlite.search("ovelac")
    assert any("contacts_fts MATCH" in statement for statement in sqlite.statements)
    sqlite.statements.clear()
    await sqlite.search("Ad")
    assert not any("contacts_fts" in statement for statement in sqlite.statements)


async def test_too_common_a_text_scans_with_the_same_result(
    backends: dict[str, Backend], monkeypatch: pytest.MonkeyPatch
) -> None:
    indexed = {text: await backends["sqlite"].search(text) for text in SEARCHES}
    monkeypatch.setattr(contact_repository, "FTS_MAX_HITS", 1)  # any two hits are too many
    sqlite = backends["sqlite"]
    scanned = {text: await sqlite.search(text) for text in SEARCHES}
    assert scanned == indexed
    sqlite.statements.clear()
    await sqlite.search("ovelac")  # two contacts in each organization
    hit_count, page = [s for s in sqlite.statements if "contacts" in s]
    assert "contacts_fts MATCH" in hit_count
    assert "contacts_fts" not in page


async def test_the_index_follows_updates_and_deletes(backends: dict[str, Backend]) -> None:
    for backend in backends.values():
        organization = Contact.organization_id == backend.organization_id
        await backend.write(
            update(Contact)
            .where(organization, Contact.name == "Alan Turing")
            .values(name="Alonzo Church", phone_number="+12025550199")
        )
        await backend.write(delete(Contact).where(organization, Contact.name == "Mary Jackson"))
    await _compare(backends, ["Turing", "Alonzo", "+1202", "0142", "Jackson", "ary Ja", "ada"])
    assert await backends["sqlite"].search("Turing") == ([], 0)
    assert len((await backends["sqlite"].search("Alonzo"))[0]) == 1
