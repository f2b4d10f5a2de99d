"""Channels over REST: the documented shapes, the sealed token, test mode, isolation, paging."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.channels import service
from app.channels.models import Channel
from app.kit.crypto import DecryptionFailed
from tests.conftest import TEST_SECRET, Tenant, TenantFactory
from tests.integrations.whatsapp.fake_graph import FakeGraph

BASE = "/api/v1/channels"
TOKEN = "EAAGm0PX4ZCpsBAKZCsecret-upstream-token_123"
FIELDS = {
    "id",
    "organization_id",
    "display_phone_number",
    "phone_number_id",
    "business_account_id",
    "name",
    "livemode",
    "messages_per_second",
    "agent_id",
    "quality_rating",
    "messaging_limit",
    "quality_event",
    "quality_updated_at",
    "account_status",
    "created_at",
    "updated_at",
}
NOT_FOUND = {"detail": "Channel not found"}
PATTERN = "string_pattern_mismatch"
OTHER_SCOPES = [
    ["agents:read"],
    ["agents:write", "calls:read"],
    ["calls:dispatch", "campaigns:manage", "webhooks:admin"],
]


def body(**fields: Any) -> dict[str, Any]:
    return {
        "display_phone_number": "+1 (415) 555-0142",
        "phone_number_id": "106540352242922",
        "business_account_id": "102290129340398",
        "access_token": TOKEN,
        **fields,
    }


async def create(client: httpx.AsyncClient, tenant: Tenant, **fields: Any) -> dict[str, Any]:
    response = await client.post(BASE, json=body(**fields), headers=tenant.headers)
    assert response.status_code == 201, response.text
    assert TOKEN not in response.text
    return response.json()  # type: ignore[no-any-return]


@pytest.fixture
async def acme_live(tenants: TenantFactory, acme: Tenant, platform: FakeGraph) -> Tenant:
    """A live key of acme, whose account's token reads the default number."""
    platform.add_phone_number(body()["phone_number_id"], token=TOKEN)
    return await tenants.key(acme, ["full_access"], livemode=True)


async def test_create_returns_channel_shape(client: httpx.AsyncClient, acme: Tenant) -> None:
    channel = await create(client, acme, name="Support line")
    assert set(channel) == FIELDS
    assert channel["organization_id"] == acme.organization_id
    assert channel["display_phone_number"] == "+14155550142"  # stored as E.164
    assert channel["phone_number_id"] == "106540352242922"
    assert channel["business_account_id"] == "102290129340398"
    assert channel["name"] == "Support line"
    assert channel["livemode"] is False  # acme's default key is a test key
    assert str(channel["created_at"]).endswith("Z")
    assert channel["updated_at"] == channel["created_at"]


async def test_name_is_optional(client: httpx.AsyncClient, acme: Tenant) -> None:
    assert (await create(client, acme))["name"] is None


async def test_live_key_creates_live_channel(client: httpx.AsyncClient, acme_live: Tenant) -> None:
    assert (await create(client, acme_live))["livemode"] is True


async def test_token_is_stored_sealed_and_never_returned(
    client: httpx.AsyncClient,
    acme: Tenant,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    channel = await create(client, acme)
    second = await create(client, acme, phone_number_id="2")
    async with sessionmaker() as session:
        rows = (
            await session.execute(
                text("SELECT id, access_token_encrypted FROM channels WHERE id IN (:a, :b)"),
                {"a": channel["id"], "b": second["id"]},
            )
        ).all()
        sealed: dict[str, str] = {row[0]: row[1] for row in rows}
        for value in sealed.values():
            assert value.startswith("sb1.")
            assert TOKEN not in value
        # The same token sealed twice differs (fresh nonce): equal tokens are not revealed.
        assert sealed[channel["id"]] != sealed[second["id"]]

        box = service.access_token_box(TEST_SECRET)
        entity = await session.get(Channel, channel["id"])
        assert entity is not None
        assert service.access_token_of(entity, box) == TOKEN
        # Bound to its row: the sealed value copied into another channel does not open.
        other = await session.get(Channel, second["id"])
        assert other is not None
        other.access_token_encrypted = entity.access_token_encrypted
        with pytest.raises(DecryptionFailed):
            service.access_token_of(other, box)
        # And only the service's secret key opens it.
        with pytest.raises(DecryptionFailed):
            service.access_token_of(entity, service.access_token_box("another-secret-key-" * 3))

    responses = [
        await client.get(f"{BASE}/{channel['id']}", headers=acme.headers),
        await client.get(BASE, headers=acme.headers),
        await client.post(BASE, json=body(), headers=acme.headers),  # 409
        await client.post(BASE, json=body(name=""), headers=acme.headers),  # 422
        await client.post(BASE, json=body(display_phone_number="12"), headers=acme.headers),
        await client.post(
            BASE, json=body(access_token=TOKEN + " x"), headers=acme.headers
        ),  # 422 on the token itself
        await client.get("/api/v1/openapi.json"),
    ]
    for response in responses:
        assert TOKEN not in response.text, response.text
        assert "access_token_encrypted" not in response.text
        assert "sb1." not in response.text


@pytest.mark.parametrize(
    "phone", ["12", "not a phone", "+1", "4155550100", "+" + "1" * 60, "+999 123", ""]
)
async def test_bad_display_phone_number_is_400(
    client: httpx.AsyncClient, acme: Tenant, phone: str
) -> None:
    response = await client.post(BASE, json=body(display_phone_number=phone), headers=acme.headers)
    assert response.status_code == 400
    assert response.json() == {"detail": "Invalid phone number format or length"}


@pytest.mark.parametrize(
    ("fields", "loc", "error_type"),
    [
        ({"display_phone_number": None}, ["body", "display_phone_number"], "string_type"),
        ({"phone_number_id": None}, ["body", "phone_number_id"], "string_type"),
        ({"phone_number_id": ""}, ["body", "phone_number_id"], "string_too_short"),
        ({"phone_number_id": "1" * 65}, ["body", "phone_number_id"], "string_too_long"),
        ({"phone_number_id": "12/../34"}, ["body", "phone_number_id"], PATTERN),
        ({"business_account_id": "a b"}, ["body", "business_account_id"], PATTERN),
        ({"access_token": ""}, ["body", "access_token"], "string_too_short"),
        ({"access_token": "x" * 4097}, ["body", "access_token"], "string_too_long"),
        ({"access_token": 123}, ["body", "access_token"], "string_type"),
        ({"name": ""}, ["body", "name"], "string_too_short"),
        ({"name": "n" * 256}, ["body", "name"], "string_too_long"),
    ],
)
async def test_invalid_body_is_422_array(
    client: httpx.AsyncClient,
    acme: Tenant,
    fields: dict[str, Any],
    loc: list[str],
    error_type: str,
) -> None:
    response = await client.post(BASE, json=body(**fields), headers=acme.headers)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail == [{"loc": loc, "msg": detail[0]["msg"], "type": error_type}]


@pytest.mark.parametrize(
    "missing", ["display_phone_number", "phone_number_id", "business_account_id", "access_token"]
)
async def test_missing_field_is_422(client: httpx.AsyncClient, acme: Tenant, missing: str) -> None:
    sent = body()
    del sent[missing]
    response = await client.post(BASE, json=sent, headers=acme.headers)
    assert response.status_code == 422
    assert response.json() == {
        "detail": [{"loc": ["body", missing], "msg": "Field required", "type": "missing"}]
    }


async def test_no_body_is_422(client: httpx.AsyncClient, acme: Tenant) -> None:
    empty = await client.post(BASE, headers=acme.headers)
    assert empty.status_code == 422
    assert empty.json()["detail"][0]["loc"] == ["body"]
    headers = {**acme.headers, "Content-Type": "application/json"}
    broken = await client.post(BASE, content=b"{nope", headers=headers)
    assert broken.json()["detail"][0]["type"] == "json_invalid"


async def test_duplicate_phone_number_id_is_409(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, acme_live: Tenant
) -> None:
    await create(client, acme)
    response = await client.post(
        BASE, json=body(display_phone_number="+14155550199"), headers=acme.headers
    )
    assert response.status_code == 409
    assert response.json() == {
        "detail": "A channel with this phone_number_id already exists in the organization"
    }
    # The organization's own number in the other mode is fine: a test-mode channel never
    # stands in a live one's way.
    assert (await create(client, acme_live))["livemode"] is True
    again = await client.post(BASE, json=body(), headers=acme_live.headers)
    assert again.status_code == 409
    # Another organization may not register it, in either mode.
    taken = await client.post(BASE, json=body(), headers=globex.headers)
    assert taken.status_code == 409
    assert taken.json() == {"detail": "Phone number is already in use"}
    listed = (await client.get(BASE, headers=acme_live.headers)).json()
    assert listed["total_count"] == 2


async def test_get_and_delete(client: httpx.AsyncClient, acme: Tenant) -> None:
    channel = await create(client, acme, name="Sales")
    url = f"{BASE}/{channel['id']}"
    fetched = await client.get(url, headers=acme.headers)
    assert fetched.status_code == 200
    assert fetched.json() == channel
    deleted = await client.delete(url, headers=acme.headers)
    assert deleted.status_code == 204
    assert deleted.content == b""
    missing = await client.get(url, headers=acme.headers)
    assert missing.status_code == 404
    assert missing.json() == NOT_FOUND
    again = await client.delete(url, headers=acme.headers)
    assert again.status_code == 404
    assert again.json() == NOT_FOUND
    # The upstream number can be registered again once its channel is gone.
    await create(client, acme)


@pytest.mark.parametrize("channel_id", ["nope", "00000000-0000-0000-0000-000000000000", "1" * 40])
async def test_unknown_id_is_404(client: httpx.AsyncClient, acme: Tenant, channel_id: str) -> None:
    for method in ("GET", "DELETE"):
        response = await client.request(method, f"{BASE}/{channel_id}", headers=acme.headers)
        assert response.status_code == 404
        assert response.json() == NOT_FOUND


async def test_other_organization_is_invisible(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    theirs = await create(client, globex, name="Globex line")
    mine = await create(client, acme, phone_number_id="555")
    url = f"{BASE}/{theirs['id']}"
    for method in ("GET", "DELETE"):
        response = await client.request(method, url, headers=acme.headers)
        assert response.status_code == 404
        assert response.json() == NOT_FOUND
    listed = (await client.get(BASE, headers=acme.headers)).json()
    assert [item["id"] for item in listed["data"]] == [mine["id"]]
    assert listed["total_count"] == 1
    cursor = await client.get(BASE, params={"starting_after": theirs["id"]}, headers=acme.headers)
    assert cursor.status_code == 400
    still_theirs = await client.get(url, headers=globex.headers)
    assert still_theirs.json()["name"] == "Globex line"


def assert_livemode_forbidden(response: httpx.Response) -> None:
    assert response.status_code == 403, response.text
    message = "A test-mode credential cannot act on a live-mode channel; use a live API key"
    assert response.json() == {
        "error": {"code": "livemode_mismatch", "message": message, "type": "authentication_error"},
        "detail": message,
    }


async def test_test_key_acting_on_live_channel_is_403(
    client: httpx.AsyncClient, acme: Tenant, acme_live: Tenant
) -> None:
    live = await create(client, acme_live, name="Live")
    test = await create(client, acme, phone_number_id="777", name="Test")
    url = f"{BASE}/{live['id']}"
    assert_livemode_forbidden(await client.get(url, headers=acme.headers))
    assert_livemode_forbidden(await client.delete(url, headers=acme.headers))
    # Nothing happened to it; the live key sees and removes it.
    assert (await client.get(url, headers=acme_live.headers)).json() == live

    # Test keys list test-mode channels only; live keys list both kinds.
    test_list = (await client.get(BASE, headers=acme.headers)).json()
    assert [item["id"] for item in test_list["data"]] == [test["id"]]
    assert test_list["total_count"] == 1
    live_list = (await client.get(BASE, headers=acme_live.headers)).json()
    assert [item["id"] for item in live_list["data"]] == [test["id"], live["id"]]
    assert live_list["total_count"] == 2

    # A live key may act on a test-mode channel (its traffic goes to the simulator anyway).
    assert (await client.get(f"{BASE}/{test['id']}", headers=acme_live.headers)).status_code == 200
    assert (await client.delete(url, headers=acme_live.headers)).status_code == 204
    assert (await client.delete(f"{BASE}/{test['id']}", headers=acme_live.headers)).status_code == (
        204
    )


async def test_cursor_paging_returns_every_channel_once(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    created = [await create(client, acme, phone_number_id=f"pn{i}") for i in range(7)]
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 3}
    while True:
        page = (await client.get(BASE, params=params, headers=acme.headers)).json()
        assert page["object"] == "list"
        assert page["total_count"] == 7
        seen.extend(item["id"] for item in page["data"])
        if not page["has_more"]:
            break
        assert page["next_cursor"] == page["data"][-1]["id"]
        params = {"limit": 3, "starting_after": page["next_cursor"]}
    assert seen == [channel["id"] for channel in reversed(created)]
    back = (
        await client.get(BASE, params={"limit": 3, "ending_before": seen[3]}, headers=acme.headers)
    ).json()
    assert [item["id"] for item in back["data"]] == seen[:3]
    assert back["has_more"] is False
    for limit in ("0", "101", "x"):
        response = await client.get(BASE, params={"limit": limit}, headers=acme.headers)
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["query", "limit"]


async def test_empty_list(client: httpx.AsyncClient, acme: Tenant) -> None:
    assert (await client.get(BASE, headers=acme.headers)).json() == {
        "object": "list",
        "data": [],
        "has_more": False,
        "next_cursor": None,
        "total_count": 0,
    }


@pytest.mark.parametrize("scopes", OTHER_SCOPES)
async def test_scope_matrix(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, scopes: list[str]
) -> None:
    channel = await create(client, acme)
    limited = await tenants.key(acme, scopes)
    url = f"{BASE}/{channel['id']}"
    requests: list[tuple[str, str, Any]] = [
        ("POST", BASE, body(phone_number_id="other")),
        ("GET", BASE, None),
        ("GET", url, None),
        ("DELETE", url, None),
    ]
    for method, path, sent in requests:
        response = await client.request(method, path, json=sent, headers=limited.headers)
        assert response.status_code == 403, (method, path, response.text)
        error = response.json()["error"]
        assert error["code"] == "insufficient_scope"
        assert error["type"] == "authentication_error"
        assert "full_access" in error["message"]
    # Nothing changed; full_access passes every route.
    assert (await client.get(url, headers=acme.headers)).status_code == 200
    assert (await client.get(BASE, headers=acme.headers)).json()["total_count"] == 1
    assert (await client.delete(url, headers=acme.headers)).status_code == 204


async def test_requires_credentials(client: httpx.AsyncClient) -> None:
    response = await client.get(BASE)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
