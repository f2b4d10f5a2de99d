"""Dashboard reads of a campaign: `campaign { stats recipients(status, first, after) }` over
GraphQL and `GET /campaigns/{id}/recipients.csv`, on both databases, with the simulator's
magic numbers giving mixed recipient statuses."""

from __future__ import annotations

import asyncio
import csv
import io
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.campaigns import reports
from app.contacts.models import Contact
from app.core.clock import utcnow
from app.main import create_app
from tests.campaigns.conftest import (
    CAMPAIGNS,
    Jobs,
    campaign_body,
    create_contact,
    fetch_campaign,
    launch_campaign,
)
from tests.conftest import StatementCounter, Tenant, TenantFactory, graphql

# …01 refused at send, …09 accepted then failed, …10 delivered never read, others read.
PEOPLE = [
    ("+15005550001", "Refused"),
    ("+15005550009", "Not on WhatsApp"),
    ("+15005550010", "Never reads"),
    ("+14155550100", '=HYPERLINK("http://evil.example","x")'),
    ("+14155550101", "+1+2"),
    ("+14155550102", "@SUM(A1:A2)"),
    ("+14155550103", "-3 Dash"),
    ("+14155550104", 'Ada, "Countess" Lovelace'),
]
STATS = """
query($id: ID!) { campaign(id: $id) { id stats {
  total pending sent delivered read failed deliveryRate readRate failureRate progress } } }"""
RECIPIENTS = """
query($id: ID!, $status: [CampaignRecipientStatus!], $first: Int, $after: String) {
  campaign(id: $id) {
    recipients(status: $status, first: $first, after: $after) {
      totalCount
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
      edges { cursor node { id } }
      nodes { id contactId phoneNumber name status platformMessageId error
              sentAt deliveredAt readAt failedAt }
    }
  }
}"""
SINGLE_STATUS = """
query($id: ID!) { campaign(id: $id) { recipients(status: DELIVERED) { nodes { phoneNumber } } } }"""
LIST = """
query { campaigns { items { id stats { total } recipients(first: 3) { totalCount
  nodes { id contactId status } } } } }"""
CSV_HEADER = [
    "contact_id",
    "phone_number",
    "name",
    "status",
    "platform_message_id",
    "error",
    "sent_at",
    "delivered_at",
    "read_at",
    "failed_at",
]


@pytest.fixture
async def sent(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
) -> dict[str, Any]:
    """A completed campaign over PEOPLE; its contacts by phone number."""
    contacts = {phone: await create_contact(client, acme, phone, name) for phone, name in PEOPLE}
    campaign_id = (await launch_campaign(client, acme, campaign_body(channel, template)))["id"]
    await jobs.drain()
    assert (await fetch_campaign(client, acme, campaign_id))["status"] == "completed"
    return {"id": campaign_id, "contacts": contacts}


async def recipients(
    client: httpx.AsyncClient, tenant: Tenant, campaign_id: str, **variables: Any
) -> dict[str, Any]:
    return await graphql(client, RECIPIENTS, {"id": campaign_id, **variables}, tenant.headers)


async def test_stats_come_from_the_counters(
    client: httpx.AsyncClient, acme: Tenant, sent: dict[str, Any]
) -> None:
    result = await graphql(client, STATS, {"id": sent["id"]}, acme.headers)
    assert result["data"]["campaign"]["stats"] == {
        "total": 8,
        "pending": 0,
        "sent": 6,  # handed to the platform: …10 and the five readers
        "delivered": 6,
        "read": 5,
        "failed": 2,
        "deliveryRate": 1.0,
        "readRate": 0.8333,
        "failureRate": 0.25,
        "progress": 1.0,
    }


def test_stats_of_a_campaign_not_yet_sent_have_no_rates() -> None:
    class Row:
        total_contacts_count, sent_count, delivered_count, read_count, failed_count = (
            4,
            0,
            0,
            0,
            0,
        )

    stats = reports.campaign_stats(Row())
    assert (stats.pending, stats.delivery_rate, stats.read_rate, stats.progress) == (
        4,
        None,
        None,
        0.0,
    )


async def test_recipients_walk_every_page_in_contact_id_order(
    client: httpx.AsyncClient, acme: Tenant, sent: dict[str, Any]
) -> None:
    seen: list[dict[str, Any]] = []
    after = None
    pages = 0
    while True:
        result = await recipients(client, acme, sent["id"], first=3, after=after)
        connection = result["data"]["campaign"]["recipients"]
        assert connection["totalCount"] == 8
        assert connection["pageInfo"]["hasPreviousPage"] is (after is not None)
        assert [edge["cursor"] for edge in connection["edges"]] == [
            node["id"] for node in connection["nodes"]
        ]
        seen += connection["nodes"]
        pages += 1
        if not connection["pageInfo"]["hasNextPage"]:
            break
        after = connection["pageInfo"]["endCursor"]
    assert pages == 3
    ids = [node["contactId"] for node in seen]
    assert ids == sorted(ids)
    by_phone = {node["phoneNumber"]: node for node in seen}
    assert set(by_phone) == {phone for phone, _ in PEOPLE}
    for phone, contact in sent["contacts"].items():
        node = by_phone[phone]
        assert node["id"] == node["contactId"] == contact["id"]
        assert node["name"] == contact["name"]
    refused = by_phone["+15005550001"]
    assert refused["status"] == "failed"
    assert refused["platformMessageId"] is None
    assert "131009" in refused["error"]
    assert refused["failedAt"]
    assert refused["sentAt"] is None
    unreached = by_phone["+15005550009"]
    assert (unreached["status"], bool(unreached["platformMessageId"])) == ("failed", True)
    assert unreached["sentAt"]
    assert unreached["failedAt"]
    never_reads = by_phone["+15005550010"]
    assert never_reads["status"] == "delivered"
    assert never_reads["deliveredAt"]
    assert never_reads["readAt"] is None
    reader = by_phone["+14155550100"]
    assert reader["status"] == "read"
    assert reader["platformMessageId"].startswith("wamid.")
    assert reader["sentAt"] <= reader["deliveredAt"] <= reader["readAt"]
    assert reader["error"] is None


async def test_status_filter_pages_over_several_pages(
    client: httpx.AsyncClient, acme: Tenant, sent: dict[str, Any]
) -> None:
    walked: list[str] = []
    after = None
    while True:
        result = await recipients(
            client, acme, sent["id"], status=["READ", "FAILED"], first=2, after=after
        )
        connection = result["data"]["campaign"]["recipients"]
        assert connection["totalCount"] == 7
        assert {node["status"] for node in connection["nodes"]} <= {"read", "failed"}
        walked += [node["contactId"] for node in connection["nodes"]]
        if not connection["pageInfo"]["hasNextPage"]:
            break
        after = connection["pageInfo"]["endCursor"]
    assert len(walked) == 7
    assert walked == sorted(walked)
    # One status may be given without a list.
    single = await graphql(client, SINGLE_STATUS, {"id": sent["id"]}, acme.headers)
    [delivered] = single["data"]["campaign"]["recipients"]["nodes"]
    assert delivered["phoneNumber"] == "+15005550010"
    # A status nobody is in: an empty page, not an error.
    none = await recipients(client, acme, sent["id"], status=["PENDING", "CLAIMED"])
    assert none["data"]["campaign"]["recipients"]["totalCount"] == 0
    assert none["data"]["campaign"]["recipients"]["nodes"] == []


async def test_bad_arguments_are_named(
    client: httpx.AsyncClient, acme: Tenant, sent: dict[str, Any]
) -> None:
    cases = [
        ({"after": "nope"}, "after", "after: no such object: 'nope'"),
        ({"after": str(uuid.uuid4())}, "after", "after: no such object"),
        ({"first": 0}, "first", "first must be between 1 and 100"),
        ({"first": 101}, "first", "first must be between 1 and 100"),
        ({"status": []}, "status", "status must name at least one status"),
    ]
    for variables, field, message in cases:
        result = await recipients(client, acme, sent["id"], **variables)
        [error] = result["errors"]
        assert error["extensions"] == {"code": "invalid_input", "field": field}
        assert error["message"].startswith(message)
        assert result["data"]["campaign"] is None
    # A contact of the organization outside this campaign is no cursor of it either.
    stranger = await create_contact(client, acme, "+14155550199", "Stranger")
    result = await recipients(client, acme, sent["id"], after=stranger["id"])
    assert result["errors"][0]["extensions"]["field"] == "after"


async def test_list_pages_of_several_campaigns_are_batched(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    sent: dict[str, Any],
    sql_counter: StatementCounter,
) -> None:
    sql_counter.count = 0
    alone = await graphql(client, LIST, headers=acme.headers)
    statements_for_one = sql_counter.count
    assert len(alone["data"]["campaigns"]["items"]) == 1
    draft = await client.post(
        CAMPAIGNS, json=campaign_body(channel, template), headers=acme.headers
    )
    scheduled = (
        await launch_campaign(
            client, acme, campaign_body(channel, template, scheduled_at="2099-01-01T00:00:00Z")
        )
    )["id"]
    sql_counter.count = 0
    result = await graphql(client, LIST, headers=acme.headers)
    statements = sql_counter.count
    items = {item["id"]: item for item in result["data"]["campaigns"]["items"]}
    assert items[draft.json()["id"]]["recipients"] == {"totalCount": 0, "nodes": []}
    assert items[scheduled]["recipients"]["totalCount"] == 8
    assert {node["status"] for node in items[scheduled]["recipients"]["nodes"]} == {"pending"}
    assert items[sent["id"]]["recipients"]["totalCount"] == 8
    for item in items.values():
        nodes = item["recipients"]["nodes"]
        assert len(nodes) == min(3, item["recipients"]["totalCount"])
        assert [node["contactId"] for node in nodes] == sorted(node["contactId"] for node in nodes)
        assert all(node["id"] == node["contactId"] for node in nodes)
    # The pages and counts of three campaigns cost what those of one did.
    assert statements == statements_for_one


async def test_other_tenants_and_missing_scope(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    tenants: TenantFactory,
    sent: dict[str, Any],
) -> None:
    foreign = await recipients(client, globex, sent["id"])
    assert foreign == {"data": {"campaign": None}}
    reader = await tenants.key(acme, ["agents:read"])
    refused = await recipients(client, reader, sent["id"])
    assert refused["data"]["campaign"] is None
    assert refused["errors"][0]["extensions"]["code"] == "insufficient_scope"
    manager = await tenants.key(acme, ["campaigns:manage"])
    allowed = await recipients(client, manager, sent["id"], first=1)
    assert allowed["data"]["campaign"]["recipients"]["totalCount"] == 8


# --- CSV export ---------------------------------------------------------------------------


def parse_csv(body: bytes) -> list[list[str]]:
    assert body.count(b"\r\n") == len(body.splitlines())  # RFC 4180 line ends
    return list(csv.reader(io.StringIO(body.decode("utf-8"), newline="")))


async def test_csv_export_of_the_ledger(
    client: httpx.AsyncClient, acme: Tenant, sent: dict[str, Any]
) -> None:
    response = await client.get(f"{CAMPAIGNS}/{sent['id']}/recipients.csv", headers=acme.headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.headers["content-disposition"] == (
        f'attachment; filename="campaign-{sent["id"]}-recipients.csv"'
    )
    header, *rows = parse_csv(response.content)
    assert header == CSV_HEADER
    assert len(rows) == len(PEOPLE)
    assert [row[0] for row in rows] == sorted(row[0] for row in rows)
    by_phone = {row[1]: dict(zip(header, row, strict=True)) for row in rows}
    # Phone numbers stay as they are (+ and digits cannot form a formula).
    assert set(by_phone) == {phone for phone, _ in PEOPLE}
    # Names a spreadsheet would evaluate are escaped; the others are left alone.
    names = {phone: row["name"] for phone, row in by_phone.items()}
    assert names["+14155550100"] == '\'=HYPERLINK("http://evil.example","x")'
    assert names["+14155550101"] == "'+1+2"
    assert names["+14155550102"] == "'@SUM(A1:A2)"
    assert names["+14155550103"] == "'-3 Dash"
    assert names["+14155550104"] == 'Ada, "Countess" Lovelace'
    assert names["+15005550010"] == "Never reads"
    reader = by_phone["+14155550100"]
    assert reader["contact_id"] == sent["contacts"]["+14155550100"]["id"]
    assert reader["status"] == "read"
    assert reader["platform_message_id"].startswith("wamid.")
    assert reader["error"] == ""
    assert reader["failed_at"] == ""
    assert reader["sent_at"].endswith("Z")
    assert reader["read_at"].endswith("Z")
    refused = by_phone["+15005550001"]
    assert (refused["status"], refused["platform_message_id"]) == ("failed", "")
    assert "131009" in refused["error"]
    assert refused["failed_at"]
    assert by_phone["+15005550010"]["status"] == "delivered"
    assert by_phone["+15005550010"]["read_at"] == ""


def test_csv_cells_are_escaped_only_when_a_spreadsheet_would_evaluate_them() -> None:
    assert reports.csv_safe("=1+2") == "'=1+2"
    assert reports.csv_safe("\tx") == "'\tx"
    assert reports.csv_safe("\rx") == "'\rx"
    assert reports.csv_safe("+1 (415) 555") == "'+1 (415) 555"
    assert reports.csv_safe("+14155550100") == "+14155550100"
    assert reports.csv_safe("Ada") == "Ada"
    assert reports.csv_safe(None) == ""


async def test_csv_of_a_draft_is_the_header_only_and_errors(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    tenants: TenantFactory,
    channel: dict[str, Any],
    template: dict[str, Any],
) -> None:
    draft = await client.post(
        CAMPAIGNS, json=campaign_body(channel, template), headers=acme.headers
    )
    url = f"{CAMPAIGNS}/{draft.json()['id']}/recipients.csv"
    empty = await client.get(url, headers=acme.headers)
    assert parse_csv(empty.content) == [CSV_HEADER]
    for tenant, path in (
        (globex, url),
        (acme, f"{CAMPAIGNS}/{uuid.uuid4()}/recipients.csv"),
        (acme, f"{CAMPAIGNS}/not-an-id/recipients.csv"),
    ):
        missing = await client.get(path, headers=tenant.headers)
        assert missing.status_code == 404
        assert missing.json() == {"detail": "Campaign not found"}
    reader = await tenants.key(acme, ["agents:read"])
    forbidden = await client.get(url, headers=reader.headers)
    assert forbidden.status_code == 403
    manager = await tenants.key(acme, ["campaigns:manage"])
    assert (await client.get(url, headers=manager.headers)).status_code == 200


async def add_contacts(
    sessionmaker: async_sessionmaker[AsyncSession], tenant: Tenant, count: int
) -> None:
    now = utcnow()
    async with sessionmaker() as session:
        await session.execute(
            insert(Contact),
            [
                {
                    "id": str(uuid.uuid4()),
                    "organization_id": tenant.organization_id,
                    "phone_number": f"+1415{number:07d}",
                    "name": f"=Bulk {number}",
                    "tags": [],
                    "created_at": now,
                    "updated_at": now,
                }
                for number in range(count)
            ],
        )
        await session.commit()


async def test_csv_streams_5000_rows_in_short_reads(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
    resources: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await add_contacts(sessionmaker, acme, 5000)
    campaign_id = (
        await launch_campaign(
            client, acme, campaign_body(channel, template, scheduled_at="2099-01-01T00:00:00Z")
        )
    )["id"]
    opened = 0
    open_now = 0
    original = resources.session

    @asynccontextmanager
    async def counted(*, writes: bool) -> AsyncIterator[AsyncSession]:
        nonlocal opened, open_now
        opened += 1
        open_now += 1
        try:
            async with original(writes=writes) as session:
                yield session
        finally:
            open_now -= 1

    monkeypatch.setattr(resources, "session", counted)
    # Straight to the ASGI app: the body's messages as the server sends them.
    app = create_app(resources=resources)
    messages: list[dict[str, Any]] = []

    requested = False
    finished = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await finished.wait()  # the client stays until the body has been sent
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        assert open_now == 0  # no session is held while a chunk goes out
        messages.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            finished.set()

    headers = [(b"authorization", f"Bearer {acme.api_key}".encode())]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": f"{CAMPAIGNS}/{campaign_id}/recipients.csv",
        "raw_path": f"{CAMPAIGNS}/{campaign_id}/recipients.csv".encode(),
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 1234),
        "server": ("testserver", 80),
        "root_path": "",
    }
    await app(scope, receive, send)
    assert messages[0]["type"] == "http.response.start"
    assert messages[0]["status"] == 200
    bodies = [message for message in messages if message["type"] == "http.response.body"]
    # The header, five batches of 1,000, and the end of the body.
    assert len([message for message in bodies if message.get("body")]) == 6
    body = b"".join(message.get("body", b"") for message in bodies)
    header, *rows = parse_csv(body)
    assert header == CSV_HEADER
    assert len(rows) == 5000
    ids = [row[0] for row in rows]
    assert ids == sorted(ids)
    assert len(set(ids)) == 5000
    assert all(row[2].startswith("'=Bulk ") and row[3] == "pending" for row in rows)
    # The request's own session, then 5 batches of 1,000 and the empty read that ends them.
    assert opened == 1 + 6


async def test_csv_generator_holds_one_batch_and_no_session_between_batches(
    resources: Any,
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await add_contacts(sessionmaker, acme, 250)
    campaign_id = (
        await launch_campaign(
            client, acme, campaign_body(channel, template, scheduled_at="2099-01-01T00:00:00Z")
        )
    )["id"]
    open_now = 0

    @asynccontextmanager
    async def short() -> AsyncIterator[AsyncSession]:
        nonlocal open_now
        open_now += 1
        try:
            async with resources.session(writes=False) as session:
                yield session
        finally:
            open_now -= 1

    chunks = []
    async for chunk in reports.recipients_csv(short, campaign_id, batch=100):
        assert open_now == 0
        chunks.append(chunk)
    # The header, then 100, 100 and 50 rows.
    assert [len(parse_csv(chunk)) for chunk in chunks] == [1, 100, 100, 50]


CONTACTS_OF_RECIPIENTS = """
query($id: ID!) { campaign(id: $id) { recipients(first: 100) {
  nodes { contactId name contact { id name phoneNumber } } } } }"""


async def test_the_contact_of_a_recipient_needs_full_access_and_may_be_gone(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, sent: dict[str, Any]
) -> None:
    gone = sent["contacts"]["+14155550103"]
    renamed = sent["contacts"]["+14155550104"]
    assert (
        await client.delete(f"/api/v1/contacts/{gone['id']}", headers=acme.headers)
    ).status_code == 204
    updated = await client.put(
        f"/api/v1/contacts/{renamed['id']}", json={"name": "Ada Lovelace"}, headers=acme.headers
    )
    assert updated.status_code == 200, updated.text
    result = await graphql(client, CONTACTS_OF_RECIPIENTS, {"id": sent["id"]}, acme.headers)
    assert "errors" not in result
    nodes = {node["contactId"]: node for node in result["data"]["campaign"]["recipients"]["nodes"]}
    assert len(nodes) == len(PEOPLE)
    assert nodes[gone["id"]]["contact"] is None  # deleted since; the ledger keeps its row
    assert nodes[gone["id"]]["name"] == gone["name"]
    # The ledger keeps the name at launch; the contact is as it is now.
    assert nodes[renamed["id"]]["name"] == renamed["name"]
    assert nodes[renamed["id"]]["contact"] == {
        "id": renamed["id"],
        "name": "Ada Lovelace",
        "phoneNumber": "+14155550104",
    }
    manager = await tenants.key(acme, ["campaigns:manage"])
    scoped = await graphql(client, CONTACTS_OF_RECIPIENTS, {"id": sent["id"]}, manager.headers)
    codes = {error["extensions"]["code"] for error in scoped["errors"]}
    assert codes == {"insufficient_scope"}
    recipients_seen = scoped["data"]["campaign"]["recipients"]["nodes"]
    assert len(recipients_seen) == len(PEOPLE)
    assert all(node["contact"] is None for node in recipients_seen)


# --- the progress watcher, without a database -------------------------------------------------


def snapshot(status: str, sent: int) -> reports.ProgressSnapshot:
    class Row:
        total_contacts_count, sent_count, delivered_count, read_count, failed_count = (
            3,
            sent,
            0,
            0,
            0,
        )

    return reports.ProgressSnapshot("c1", status, reports.campaign_stats(Row()), None, None)


async def watched(
    monkeypatch: pytest.MonkeyPatch, events: AsyncIterator[dict[str, Any]]
) -> tuple[list[reports.ProgressSnapshot], int]:
    """What watch_progress yields while the row goes sending 1 → 2 → completed 3, one step
    per read."""
    rows = iter(
        [
            snapshot("sending", 1),
            snapshot("sending", 2),
            snapshot("sending", 2),
            snapshot("completed", 3),
        ]
    )
    reads = 0

    async def reread(*_args: Any) -> reports.ProgressSnapshot:
        nonlocal reads
        reads += 1
        return next(rows)

    async def nothing() -> None:
        return None

    monkeypatch.setattr(reports, "reread_progress", reread)
    updates = reports.watch_progress(
        snapshot("sending", 0),
        open_session=None,  # type: ignore[arg-type]
        events=events,
        organization_id="o1",
        livemode=False,
        poll_seconds=0.05,
        before_yield=nothing,
    )

    async def collect() -> list[reports.ProgressSnapshot]:
        return [update async for update in updates]

    return await asyncio.wait_for(collect(), 5.0), reads


async def test_progress_reads_are_not_starved_by_a_flood_of_other_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def flood() -> AsyncIterator[dict[str, Any]]:
        while True:  # always ready: another campaign at full speed
            yield {"type": "campaign.message.delivered", "livemode": False, "data": {}}

    seen, reads = await watched(monkeypatch, flood())
    # Only changes are yielded: the repeated "sending 2" is not.
    assert [(step.status, step.stats.sent) for step in seen] == [
        ("sending", 0),
        ("sending", 1),
        ("sending", 2),
        ("completed", 3),
    ]
    assert reads == 4


async def test_progress_goes_on_by_polling_when_the_stream_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken() -> AsyncIterator[dict[str, Any]]:
        raise ConnectionError("redis went away")
        yield {}  # a generator, like the real streams

    seen, _reads = await watched(monkeypatch, broken())
    assert [step.status for step in seen][-1] == "completed"
