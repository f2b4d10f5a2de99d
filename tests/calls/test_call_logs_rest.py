"""Call logs over REST: documented shape, envelope B paging, filters, search, isolation, scopes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from tests.calls.conftest import T0, CallLogFactory
from tests.conftest import Tenant, TenantFactory

BASE = "/api/v1/call-logs"
UNKNOWN_ID = "00000000-0000-0000-0000-000000000000"

TRANSCRIPT = [
    {"speaker": "agent", "text": "Hello, this is Ava from Acme.", "timestamp": 0.4},
    {"speaker": "caller", "text": "Hi! I'd like to book a demo.", "timestamp": 3.25},
]


async def list_logs(client: httpx.AsyncClient, tenant: Tenant, **params: Any) -> dict[str, Any]:
    response = await client.get(BASE, params=params, headers=tenant.headers)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def ids(envelope: dict[str, Any]) -> list[str]:
    return [item["id"] for item in envelope["items"]]


async def test_get_returns_the_call_log_shape(
    client: httpx.AsyncClient, acme: Tenant, calls: CallLogFactory
) -> None:
    recorded = await calls.record(
        acme,
        call_id="CA0123456789abcdef",
        agent_id="7C2D1B53-0F4E-4C52-9E0B-0E7C1B9C2A11",
        chat_phone_number_id="5a1c63d2-2d7e-4d55-9f51-6b3a7d4f0c21",
        phone_number_id="PN0099",
        from_number="+1 (415) 555-0100",
        to_number="+44 20 7183 8750",
        direction="outbound",
        status="completed",
        duration_seconds=87,
        ended_at=T0 + timedelta(seconds=90),
        recording_url="recordings/CA0123456789abcdef.wav",
        transcript=TRANSCRIPT,
        summary="Caller booked a demo for Tuesday.",
        cost=0.0425,
    )
    response = await client.get(f"{BASE}/{recorded['id']}", headers=acme.headers)
    assert response.status_code == 200
    body = response.json()
    assert body == recorded
    assert set(body) == {
        "id",
        "organization_id",
        "call_id",
        "agent_id",
        "chat_phone_number_id",
        "phone_number_id",
        "contact_id",
        "from_number",
        "to_number",
        "direction",
        "status",
        "duration_seconds",
        "started_at",
        "ended_at",
        "recording_url",
        "transcript",
        "summary",
        "cost",
        "end_reason",
        "answered_by",
        "analysis",
        "livemode",
        "created_at",
        "updated_at",
    }
    assert body["organization_id"] == acme.organization_id
    assert body["call_id"] == "CA0123456789abcdef"
    assert body["agent_id"] == "7c2d1b53-0f4e-4c52-9e0b-0e7c1b9c2a11"  # canonical UUID
    assert body["from_number"] == "+14155550100"  # stored in E.164
    assert body["to_number"] == "+442071838750"
    assert body["duration_seconds"] == 87
    assert body["started_at"] == "2026-11-01T09:00:00Z"
    assert body["ended_at"] == "2026-11-01T09:01:30Z"
    assert body["transcript"] == TRANSCRIPT
    assert body["cost"] == 0.0425
    assert body["livemode"] is False
    assert body["contact_id"] is None
    assert body["created_at"].endswith("Z")


async def test_an_unfinished_call_has_nulls_and_zeros(
    client: httpx.AsyncClient, acme: Tenant, calls: CallLogFactory, tenants: TenantFactory
) -> None:
    live = await tenants.key(acme, ["calls:read"], livemode=True)
    recorded = await calls.record(acme, status="in-progress", livemode=True)
    body = (await client.get(f"{BASE}/{recorded['id']}", headers=live.headers)).json()
    assert body["status"] == "in-progress"
    assert body["livemode"] is True
    assert body["ended_at"] is None
    assert body["recording_url"] is None
    assert body["summary"] is None
    assert body["agent_id"] is None
    assert body["transcript"] == []
    assert body["duration_seconds"] == 0
    assert body["cost"] == 0


async def test_empty_list_is_envelope_b_with_defaults(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    assert await list_logs(client, acme) == {"total": 0, "page": 1, "page_size": 20, "items": []}


async def test_pages_partition_the_list_newest_call_first(
    client: httpx.AsyncClient, acme: Tenant, calls: CallLogFactory
) -> None:
    # Recorded out of order: the list follows started_at, not insertion.
    recorded = [await calls.record(acme, minutes=minute) for minute in (3, 0, 6, 1, 5, 2, 4)]
    newest_first = [log["id"] for log in sorted(recorded, key=lambda log: log["started_at"])][::-1]

    pages = [await list_logs(client, acme, page=page, page_size=3) for page in (1, 2, 3, 4)]
    assert [len(page["items"]) for page in pages] == [3, 3, 1, 0]
    assert [(page["total"], page["page"], page["page_size"]) for page in pages] == [
        (7, 1, 3),
        (7, 2, 3),
        (7, 3, 3),
        (7, 4, 3),
    ]
    assert [item for page in pages for item in ids(page)] == newest_first
    everything = await list_logs(client, acme, page_size=100)
    assert ids(everything) == newest_first
    assert everything["items"][0] == next(log for log in recorded if log["id"] == newest_first[0])


async def test_same_start_time_is_ordered_by_id(
    client: httpx.AsyncClient, acme: Tenant, calls: CallLogFactory
) -> None:
    recorded = [await calls.record(acme) for _ in range(4)]
    expected = sorted((log["id"] for log in recorded), reverse=True)
    walked = [
        item
        for page in (1, 2)
        for item in ids(await list_logs(client, acme, page=page, page_size=2))
    ]
    assert walked == expected


async def test_largest_page_number_is_accepted(
    client: httpx.AsyncClient, acme: Tenant, calls: CallLogFactory
) -> None:
    await calls.record(acme)
    body = await list_logs(client, acme, page=2**31 - 1, page_size=100)
    assert body == {"total": 1, "page": 2**31 - 1, "page_size": 100, "items": []}


@pytest.mark.parametrize(
    ("params", "loc"),
    [
        ({"page": 0}, ["query", "page"]),
        ({"page": -1}, ["query", "page"]),
        ({"page": "two"}, ["query", "page"]),
        ({"page": 2**31}, ["query", "page"]),
        ({"page_size": 0}, ["query", "page_size"]),
        ({"page_size": 101}, ["query", "page_size"]),
        ({"page_size": "x"}, ["query", "page_size"]),
        ({"direction": "sideways"}, ["query", "direction"]),
        ({"direction": "INBOUND"}, ["query", "direction"]),
        ({"status": "ringing"}, ["query", "status"]),
        ({"status": "in_progress"}, ["query", "status"]),
        ({"search": "x" * 256}, ["query", "search"]),
    ],
)
async def test_bad_query_is_422_array(
    client: httpx.AsyncClient, acme: Tenant, params: dict[str, Any], loc: list[str]
) -> None:
    response = await client.get(BASE, params=params, headers=acme.headers)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, list)
    assert detail[0]["loc"] == loc
    assert {"loc", "msg", "type"} <= set(detail[0])


async def test_direction_and_status_filters(
    client: httpx.AsyncClient, acme: Tenant, calls: CallLogFactory
) -> None:
    inbound_done = await calls.record(acme, minutes=1, direction="inbound", status="completed")
    inbound_busy = await calls.record(acme, minutes=2, direction="inbound", status="busy")
    outbound_done = await calls.record(acme, minutes=3, direction="outbound", status="completed")
    no_answer = await calls.record(acme, minutes=4, direction="outbound", status="no-answer")

    inbound = await list_logs(client, acme, direction="inbound")
    assert ids(inbound) == [inbound_busy["id"], inbound_done["id"]]
    assert inbound["total"] == 2
    completed = await list_logs(client, acme, status="completed")
    assert ids(completed) == [outbound_done["id"], inbound_done["id"]]
    both = await list_logs(client, acme, direction="outbound", status="no-answer")
    assert (ids(both), both["total"]) == ([no_answer["id"]], 1)
    none = await list_logs(client, acme, direction="inbound", status="failed")
    assert none == {"total": 0, "page": 1, "page_size": 20, "items": []}
    # A filtered total survives paging past the end.
    past_end = await list_logs(client, acme, status="completed", page=5)
    assert (past_end["items"], past_end["total"]) == ([], 2)


async def test_search_matches_a_substring_of_each_field_case_insensitively(
    client: httpx.AsyncClient, acme: Tenant, calls: CallLogFactory
) -> None:
    by_call_id = await calls.record(acme, minutes=1, call_id="CA-Alpha-7781")
    by_from = await calls.record(
        acme, minutes=2, from_number="+442071838750", to_number="+14155550100"
    )
    by_to = await calls.record(
        acme, minutes=3, from_number="+14155550100", to_number="+33142685300"
    )

    assert ids(await list_logs(client, acme, search="alpha")) == [by_call_id["id"]]
    assert ids(await list_logs(client, acme, search="ALPHA-77")) == [by_call_id["id"]]
    assert ids(await list_logs(client, acme, search="ca-aLpHa")) == [by_call_id["id"]]
    assert ids(await list_logs(client, acme, search="2071838")) == [by_from["id"]]
    assert ids(await list_logs(client, acme, search="+3314268")) == [by_to["id"]]
    # Matching any one of the three fields is enough.
    found = await list_logs(client, acme, search="4155550100")
    assert ids(found) == [by_to["id"], by_from["id"], by_call_id["id"]]
    assert found["total"] == 3
    nothing = await list_logs(client, acme, search="zzz")
    assert (nothing["items"], nothing["total"]) == ([], 0)
    # Empty search is no filter.
    assert (await list_logs(client, acme, search=""))["total"] == 3


async def test_search_treats_like_wildcards_literally(
    client: httpx.AsyncClient, acme: Tenant, calls: CallLogFactory
) -> None:
    percent = await calls.record(acme, minutes=1, call_id="promo%50")
    underscore = await calls.record(acme, minutes=2, call_id="sip_trunk")
    backslash = await calls.record(acme, minutes=3, call_id="gw\\7")
    plain = await calls.record(acme, minutes=4, call_id="promo250 sipXtrunk gw7")

    assert ids(await list_logs(client, acme, search="%")) == [percent["id"]]
    assert ids(await list_logs(client, acme, search="o%5")) == [percent["id"]]
    assert ids(await list_logs(client, acme, search="_")) == [underscore["id"]]
    assert ids(await list_logs(client, acme, search="p_t")) == [underscore["id"]]
    assert ids(await list_logs(client, acme, search="\\")) == [backslash["id"]]
    assert ids(await list_logs(client, acme, search="w\\7")) == [backslash["id"]]
    assert ids(await list_logs(client, acme, search="promo")) == [plain["id"], percent["id"]]


async def test_search_combines_with_filters_and_paging(
    client: httpx.AsyncClient, acme: Tenant, calls: CallLogFactory
) -> None:
    matching = [
        await calls.record(acme, minutes=minute, call_id=f"campaign-{minute}", direction="inbound")
        for minute in range(5)
    ]
    await calls.record(acme, minutes=10, call_id="campaign-out", direction="outbound")
    first = await list_logs(client, acme, search="CAMPAIGN", direction="inbound", page_size=2)
    third = await list_logs(
        client, acme, search="CAMPAIGN", direction="inbound", page_size=2, page=3
    )
    assert (first["total"], third["total"]) == (5, 5)
    assert ids(first) == [matching[4]["id"], matching[3]["id"]]
    assert ids(third) == [matching[0]["id"]]


@pytest.mark.parametrize("call_log_id", ["nope", UNKNOWN_ID, "1" * 40, "%25", "CA123"])
async def test_unknown_id_is_404(client: httpx.AsyncClient, acme: Tenant, call_log_id: str) -> None:
    response = await client.get(f"{BASE}/{call_log_id}", headers=acme.headers)
    assert response.status_code == 404
    assert response.json() == {"detail": "Call log not found"}


async def test_other_organization_is_invisible(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, calls: CallLogFactory
) -> None:
    theirs = await calls.record(globex, minutes=5, call_id="CA-shared-search")
    mine = await calls.record(acme, minutes=1, call_id="CA-shared-search-too")

    response = await client.get(f"{BASE}/{theirs['id']}", headers=acme.headers)
    assert response.status_code == 404
    assert response.json() == {"detail": "Call log not found"}
    # Not by listing, filtering, searching or paging either.
    assert await list_logs(client, acme) == {
        "total": 1,
        "page": 1,
        "page_size": 20,
        "items": [mine],
    }
    searched = await list_logs(client, acme, search="shared", direction="outbound")
    assert (ids(searched), searched["total"]) == ([mine["id"]], 1)
    assert (await list_logs(client, acme, page=2, page_size=1))["total"] == 1
    # And the owner still sees its own.
    own = await client.get(f"{BASE}/{theirs['id']}", headers=globex.headers)
    assert own.json() == theirs


@pytest.mark.parametrize(
    ("scopes", "allowed"),
    [
        (["calls:read"], True),
        (["full_access"], True),
        (["agents:read", "calls:read"], True),
        (["agents:read"], False),
        (["calls:dispatch"], False),
        (["agents:write", "campaigns:manage", "webhooks:admin"], False),
    ],
)
async def test_scope_matrix(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    calls: CallLogFactory,
    scopes: list[str],
    allowed: bool,
) -> None:
    recorded = await calls.record(acme)
    key = await tenants.key(acme, scopes)
    for url in (BASE, f"{BASE}/{recorded['id']}"):
        response = await client.get(url, headers=key.headers)
        if allowed:
            assert response.status_code == 200, response.text
            continue
        assert response.status_code == 403
        message = "This API key does not have the required scope: calls:read"
        assert response.json() == {
            "error": {
                "code": "insufficient_scope",
                "message": message,
                "type": "authentication_error",
            },
            "detail": message,
        }


async def test_missing_credentials_is_401(client: httpx.AsyncClient, acme: Tenant) -> None:
    for url in (BASE, f"{BASE}/{UNKNOWN_ID}"):
        response = await client.get(url)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"


async def test_foreign_organization_header_is_400(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    headers = {**acme.headers, "organization_id": globex.organization_id}
    for url in (BASE, f"{BASE}/{UNKNOWN_ID}"):
        response = await client.get(url, headers=headers)
        assert response.status_code == 400
        assert response.json() == {"detail": "A valid organization_id header is required"}


async def test_openapi_documents_envelope_b(client: httpx.AsyncClient) -> None:
    document = (await client.get("/api/v1/openapi.json")).json()
    listing = document["paths"]["/api/v1/call-logs"]["get"]
    names = {parameter["name"] for parameter in listing["parameters"]}
    assert {"page", "page_size", "direction", "status", "search"} <= names
    body = listing["responses"]["200"]["content"]["application/json"]["schema"]
    assert body["required"] == ["total", "page", "page_size", "items"]
    assert "404" in document["paths"]["/api/v1/call-logs/{call_log_id}"]["get"]["responses"]
