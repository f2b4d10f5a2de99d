"""Contacts over REST: the documented shapes, validation, isolation and cursor paging."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Tenant, TenantFactory

BASE = "/api/v1/contacts"


async def create(client: httpx.AsyncClient, tenant: Tenant, **fields: object) -> dict[str, object]:
    body = {"phone_number": "+14155550100", "name": "Ada Lovelace", **fields}
    response = await client.post(BASE, json=body, headers=tenant.headers)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_create_returns_contact_shape(client: httpx.AsyncClient, acme: Tenant) -> None:
    contact = await create(
        client,
        acme,
        phone_number="+1 (415) 555-0199",
        tags=["vip", "vip", " b2b "],
        notes="met at expo",
        custom_fields={"plan": "pro", "seats": 5},
    )
    assert set(contact) == {
        "id",
        "organization_id",
        "phone_number",
        "name",
        "tags",
        "notes",
        "custom_fields",
        "platform_user_id",
        "marketing_opt_out",
        "do_not_call",
        "created_at",
        "updated_at",
    }
    assert contact["organization_id"] == acme.organization_id
    assert contact["phone_number"] == "+14155550199"
    assert contact["tags"] == ["vip", "b2b"]
    assert contact["custom_fields"] == {"plan": "pro", "seats": 5}
    assert str(contact["created_at"]).endswith("Z")


async def test_defaults(client: httpx.AsyncClient, acme: Tenant) -> None:
    contact = await create(client, acme)
    assert contact["tags"] == []
    assert contact["notes"] is None
    assert contact["custom_fields"] is None


@pytest.mark.parametrize(
    "phone",
    ["12", "not a phone", "+1", "4155550100", "+" + "1" * 60, "+999 123", ""],
)
async def test_bad_phone_is_400_detail(client: httpx.AsyncClient, acme: Tenant, phone: str) -> None:
    response = await client.post(
        BASE, json={"phone_number": phone, "name": "X"}, headers=acme.headers
    )
    assert response.status_code == 400
    assert response.json() == {"detail": "Invalid phone number format or length"}


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"phone_number": "+14155550100"}, ["body", "name"]),
        ({"name": "X"}, ["body", "phone_number"]),
        ({"phone_number": "+14155550100", "name": "x" * 256}, ["body", "name"]),
        ({"phone_number": "+14155550100", "name": "X", "tags": "vip"}, ["body", "tags"]),
        (
            {"phone_number": "+14155550100", "name": "X", "custom_fields": [1]},
            ["body", "custom_fields"],
        ),
        ({"phone_number": 14155550100, "name": "X"}, ["body", "phone_number"]),
    ],
)
async def test_invalid_body_is_422_array(
    client: httpx.AsyncClient, acme: Tenant, body: dict[str, object], loc: list[str]
) -> None:
    response = await client.post(BASE, json=body, headers=acme.headers)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, list)
    assert detail[0]["loc"] == loc
    assert {"loc", "msg", "type"} <= set(detail[0])


async def test_malformed_json_is_422(client: httpx.AsyncClient, acme: Tenant) -> None:
    headers = {**acme.headers, "Content-Type": "application/json"}
    response = await client.post(BASE, content=b"{nope", headers=headers)
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "json_invalid"


async def test_get_update_delete(client: httpx.AsyncClient, acme: Tenant) -> None:
    contact = await create(client, acme, tags=["a", "b"], notes="n")
    url = f"{BASE}/{contact['id']}"
    assert (await client.get(url, headers=acme.headers)).json() == contact

    response = await client.put(url, json={"tags": ["c"], "name": "Ada L."}, headers=acme.headers)
    assert response.status_code == 200
    updated = response.json()
    assert updated["tags"] == ["c"]
    assert updated["name"] == "Ada L."
    assert updated["notes"] == "n"  # untouched fields stay
    assert updated["updated_at"] >= contact["updated_at"]

    response = await client.put(url, json={"notes": None}, headers=acme.headers)
    assert response.json()["notes"] is None

    response = await client.put(url, json={"phone_number": "bad"}, headers=acme.headers)
    assert response.status_code == 400
    response = await client.put(url, json={"name": None}, headers=acme.headers)
    assert response.status_code == 422

    assert (await client.delete(url, headers=acme.headers)).status_code == 204
    missing = await client.get(url, headers=acme.headers)
    assert missing.status_code == 404
    assert missing.json() == {"detail": "Contact not found"}
    assert (await client.delete(url, headers=acme.headers)).status_code == 404


@pytest.mark.parametrize("contact_id", ["nope", "00000000-0000-0000-0000-000000000000", "1" * 40])
async def test_unknown_id_is_404(client: httpx.AsyncClient, acme: Tenant, contact_id: str) -> None:
    for method in ("GET", "PUT", "DELETE"):
        response = await client.request(
            method,
            f"{BASE}/{contact_id}",
            headers=acme.headers,
            json={"name": "x"} if method == "PUT" else None,
        )
        assert response.status_code == 404
        assert response.json() == {"detail": "Contact not found"}


async def test_other_organization_is_invisible(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    theirs = await create(client, globex, name="Globex person")
    mine = await create(client, acme)
    url = f"{BASE}/{theirs['id']}"
    assert (await client.get(url, headers=acme.headers)).status_code == 404
    put = await client.put(url, json={"name": "hijack"}, headers=acme.headers)
    assert put.status_code == 404
    assert (await client.delete(url, headers=acme.headers)).status_code == 404
    listed = (await client.get(BASE, headers=acme.headers)).json()
    assert [item["id"] for item in listed["data"]] == [mine["id"]]
    assert listed["total_count"] == 1
    # The cursor of another tenant's contact is not a usable anchor either.
    response = await client.get(BASE, params={"starting_after": theirs["id"]}, headers=acme.headers)
    assert response.status_code == 400
    still_theirs = await client.get(url, headers=globex.headers)
    assert still_theirs.json()["name"] == "Globex person"


async def test_cursor_paging_returns_every_contact_once(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    created = [await create(client, acme, name=f"C{i}") for i in range(23)]
    seen: list[str] = []
    params: dict[str, object] = {"limit": 5}
    while True:
        page = (await client.get(BASE, params=params, headers=acme.headers)).json()
        assert page["object"] == "list"
        assert page["total_count"] == 23
        seen.extend(item["id"] for item in page["data"])
        if not page["has_more"]:
            break
        assert page["next_cursor"] == page["data"][-1]["id"]
        params = {"limit": 5, "starting_after": page["next_cursor"]}
    assert sorted(seen) == sorted(c["id"] for c in created)
    assert len(seen) == len(set(seen)) == 23
    # Newest first.
    assert seen[0] == created[-1]["id"]

    # Walking back with ending_before returns the previous page in the same order.
    first_page = (await client.get(BASE, params={"limit": 5}, headers=acme.headers)).json()
    second = (
        await client.get(BASE, params={"limit": 5, "starting_after": seen[4]}, headers=acme.headers)
    ).json()
    back = (
        await client.get(
            BASE,
            params={"limit": 5, "ending_before": second["data"][0]["id"]},
            headers=acme.headers,
        )
    ).json()
    assert [i["id"] for i in back["data"]] == [i["id"] for i in first_page["data"]]
    assert back["has_more"] is False


@pytest.mark.parametrize("limit", ["0", "101", "-1", "abc"])
async def test_limit_out_of_range(client: httpx.AsyncClient, acme: Tenant, limit: str) -> None:
    response = await client.get(BASE, params={"limit": limit}, headers=acme.headers)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "limit"]


async def test_both_cursors_is_400(client: httpx.AsyncClient, acme: Tenant) -> None:
    contact = await create(client, acme)
    response = await client.get(
        BASE,
        params={"starting_after": contact["id"], "ending_before": contact["id"]},
        headers=acme.headers,
    )
    assert response.status_code == 400


async def test_filters(client: httpx.AsyncClient, acme: Tenant) -> None:
    await create(client, acme, name="Grace Hopper", tags=["vip"], phone_number="+442071838750")
    await create(client, acme, name="Alan Turing", tags=["lead"], phone_number="+14155550111")
    await create(client, acme, name="100%_literal", tags=["lead", "vip"])

    async def names(**params: object) -> list[str]:
        page = (await client.get(BASE, params=params, headers=acme.headers)).json()
        return sorted(item["name"] for item in page["data"])

    assert await names(tag="vip") == ["100%_literal", "Grace Hopper"]
    assert await names(tag="nope") == []
    assert await names(search="grace") == ["Grace Hopper"]
    assert await names(search="2071") == ["Grace Hopper"]
    assert await names(search="%_") == ["100%_literal"]
    assert await names(search="turing", tag="lead") == ["Alan Turing"]
    page = (await client.get(BASE, params={"tag": "vip"}, headers=acme.headers)).json()
    assert page["total_count"] == 2


async def test_lists_need_no_more_than_limit(
    client: httpx.AsyncClient, tenants: TenantFactory
) -> None:
    empty = await tenants.organization("Empty")
    page = (await client.get(BASE, headers=empty.headers)).json()
    assert page == {
        "object": "list",
        "data": [],
        "has_more": False,
        "next_cursor": None,
        "total_count": 0,
    }


async def test_total_count_tracks_creates_and_deletes(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    """Unfiltered totals come from trigger-kept counters; they must stay exact."""
    ids = [(await create(client, acme, name=f"T{i}"))["id"] for i in range(3)]
    await create(client, globex)
    assert (await client.delete(f"{BASE}/{ids[0]}", headers=acme.headers)).status_code == 204
    page = (await client.get(BASE, params={"limit": 1}, headers=acme.headers)).json()
    assert page["total_count"] == 2
    after_last = (
        await client.get(BASE, params={"starting_after": ids[1]}, headers=acme.headers)
    ).json()
    assert after_last == {
        "object": "list",
        "data": [],
        "has_more": False,
        "next_cursor": None,
        "total_count": 2,
    }
    assert (await client.get(BASE, headers=globex.headers)).json()["total_count"] == 1
