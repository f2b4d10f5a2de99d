"""Quick replies over REST: the documented shape and errors, 409s, isolation, paging, scopes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.quick_replies import service
from tests.conftest import Tenant, TenantFactory
from tests.quick_replies.conftest import BASE, create

NOT_FOUND = {"detail": "Quick reply not found"}
SHAPE = {"id", "shortcut", "content", "created_at"}


async def test_create_returns_spec_shape(client: httpx.AsyncClient, acme: Tenant) -> None:
    reply = await create(client, acme, "/thanks", "Thank you for reaching out!")
    assert set(reply) == SHAPE
    assert reply["shortcut"] == "/thanks"
    assert reply["content"] == "Thank you for reaching out!"
    assert str(reply["created_at"]).endswith("Z")


@pytest.mark.parametrize("shortcut", ["/", "/x", "/" + "a" * 99, "/héllo", "/a/b-c_d.e"])
async def test_shortcut_limits_accepted(
    client: httpx.AsyncClient, acme: Tenant, shortcut: str
) -> None:
    assert (await create(client, acme, shortcut))["shortcut"] == shortcut


async def test_missing_shortcut_is_validation_array(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    """The documented example of the validation-array body (docs/api.md)."""
    response = await client.post(BASE, json={"content": "Hello"}, headers=acme.headers)
    assert response.status_code == 422
    assert response.json() == {
        "detail": [{"loc": ["body", "shortcut"], "msg": "Field required", "type": "missing"}]
    }
    both = await client.post(BASE, json={}, headers=acme.headers)
    assert [error["loc"] for error in both.json()["detail"]] == [
        ["body", "shortcut"],
        ["body", "content"],
    ]


@pytest.mark.parametrize(
    ("fields", "loc", "error_type", "msg"),
    [
        ({"shortcut": ""}, "shortcut", "string_too_short", None),
        ({"shortcut": "/" + "a" * 100}, "shortcut", "string_too_long", None),
        (
            {"shortcut": "hi"},
            "shortcut",
            "value_error",
            "Value error, shortcut must start with '/'",
        ),
        (
            {"shortcut": "/good morning"},
            "shortcut",
            "value_error",
            "Value error, shortcut must not contain white space",
        ),
        ({"shortcut": 7}, "shortcut", "string_type", None),
        ({"content": ""}, "content", "string_too_short", None),
        ({"content": "x" * 4097}, "content", "string_too_long", None),
        ({"content": None}, "content", "string_type", None),
    ],
)
async def test_invalid_body_is_422_array(
    client: httpx.AsyncClient,
    acme: Tenant,
    fields: dict[str, Any],
    loc: str,
    error_type: str,
    msg: str | None,
) -> None:
    sent = {"shortcut": "/hi", "content": "Hello", **fields}
    response = await client.post(BASE, json=sent, headers=acme.headers)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", loc]
    assert error["type"] == error_type
    if msg is not None:
        assert error["msg"] == msg


async def test_duplicate_shortcut_is_409(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    await create(client, acme, "/hi")
    response = await client.post(
        BASE, json={"shortcut": "/hi", "content": "Another"}, headers=acme.headers
    )
    assert response.status_code == 409
    assert response.json() == {"detail": "A quick reply with the shortcut '/hi' already exists"}
    # Shortcuts are unique per organization, and case-sensitive.
    await create(client, globex, "/hi")
    await create(client, acme, "/Hi")
    assert (await client.get(BASE, headers=acme.headers)).json()["total_count"] == 2


async def test_get_update_delete(client: httpx.AsyncClient, acme: Tenant) -> None:
    reply = await create(client, acme, "/hi", "Hello")
    url = f"{BASE}/{reply['id']}"
    assert (await client.get(url, headers=acme.headers)).json() == reply

    updated = await client.put(url, json={"content": "Hello there"}, headers=acme.headers)
    assert updated.status_code == 200
    assert updated.json() == {**reply, "content": "Hello there"}
    renamed = await client.put(url, json={"shortcut": "/hello"}, headers=acme.headers)
    assert renamed.json() == {**reply, "shortcut": "/hello", "content": "Hello there"}
    unchanged = await client.put(url, json={}, headers=acme.headers)
    assert unchanged.json() == renamed.json()
    same = await client.put(url, json={"shortcut": "/hello"}, headers=acme.headers)
    assert same.status_code == 200

    for sent, loc in (
        ({"shortcut": None}, ["body", "shortcut"]),
        ({"content": None}, ["body", "content"]),
        ({"shortcut": "nope"}, ["body", "shortcut"]),
        ({"content": ""}, ["body", "content"]),
    ):
        response = await client.put(url, json=sent, headers=acme.headers)
        assert response.status_code == 422, sent
        assert response.json()["detail"][0]["loc"] == loc

    other = await create(client, acme, "/bye", "Goodbye")
    clash = await client.put(url, json={"shortcut": "/bye"}, headers=acme.headers)
    assert clash.status_code == 409
    assert clash.json() == {"detail": "A quick reply with the shortcut '/bye' already exists"}
    assert (await client.get(f"{BASE}/{other['id']}", headers=acme.headers)).json() == other

    deleted = await client.delete(url, headers=acme.headers)
    assert deleted.status_code == 204
    assert deleted.content == b""
    for method in ("GET", "PUT", "DELETE"):
        response = await client.request(
            method, url, json={"content": "x"} if method == "PUT" else None, headers=acme.headers
        )
        assert response.status_code == 404
        assert response.json() == NOT_FOUND
    # The shortcut is free again.
    await create(client, acme, "/hello")


@pytest.mark.parametrize("reply_id", ["nope", "00000000-0000-0000-0000-000000000000", "1" * 40])
async def test_unknown_id_is_404(client: httpx.AsyncClient, acme: Tenant, reply_id: str) -> None:
    for method in ("GET", "PUT", "DELETE"):
        response = await client.request(
            method,
            f"{BASE}/{reply_id}",
            json={"content": "x"} if method == "PUT" else None,
            headers=acme.headers,
        )
        assert response.status_code == 404
        assert response.json() == NOT_FOUND


async def test_other_organization_is_invisible(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    theirs = await create(client, globex, "/secret", "Globex only")
    mine = await create(client, acme, "/mine")
    url = f"{BASE}/{theirs['id']}"
    for method in ("GET", "PUT", "DELETE"):
        response = await client.request(
            method,
            url,
            json={"content": "hijack"} if method == "PUT" else None,
            headers=acme.headers,
        )
        assert response.status_code == 404
        assert response.json() == NOT_FOUND
    listed = (await client.get(BASE, headers=acme.headers)).json()
    assert [item["id"] for item in listed["data"]] == [mine["id"]]
    assert listed["total_count"] == 1
    cursor = await client.get(BASE, params={"starting_after": theirs["id"]}, headers=acme.headers)
    assert cursor.status_code == 400
    assert (await client.get(url, headers=globex.headers)).json() == theirs


async def test_cursor_paging_returns_every_reply_once(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    created = [await create(client, acme, f"/r{i}", f"Reply {i}") for i in range(12)]
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 5}
    while True:
        page = (await client.get(BASE, params=params, headers=acme.headers)).json()
        assert page["object"] == "list"
        assert page["total_count"] == 12
        assert all(set(item) == SHAPE for item in page["data"])
        seen.extend(item["id"] for item in page["data"])
        if not page["has_more"]:
            break
        assert page["next_cursor"] == page["data"][-1]["id"]
        params = {"limit": 5, "starting_after": page["next_cursor"]}
    assert seen == [reply["id"] for reply in reversed(created)]
    back = (
        await client.get(BASE, params={"limit": 5, "ending_before": seen[5]}, headers=acme.headers)
    ).json()
    assert [item["id"] for item in back["data"]] == seen[:5]
    assert back["has_more"] is False
    for limit in ("0", "101", "many"):
        response = await client.get(BASE, params={"limit": limit}, headers=acme.headers)
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["query", "limit"]
    both = await client.get(
        BASE, params={"starting_after": seen[0], "ending_before": seen[1]}, headers=acme.headers
    )
    assert both.status_code == 400


async def test_organization_limit(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "MAX_QUICK_REPLIES", 2)
    first = await create(client, acme, "/a")
    await create(client, acme, "/b")
    response = await client.post(
        BASE, json={"shortcut": "/c", "content": "C"}, headers=acme.headers
    )
    assert response.status_code == 400
    assert response.json() == {
        "detail": "An organization can have at most 2 quick replies; delete some before "
        "creating more"
    }
    await create(client, globex, "/c")  # per organization
    assert (await client.delete(f"{BASE}/{first['id']}", headers=acme.headers)).status_code == 204
    await create(client, acme, "/c")


@pytest.mark.parametrize(
    "scopes",
    [["agents:read"], ["agents:write", "calls:read"], ["calls:dispatch", "webhooks:admin"]],
)
async def test_scope_matrix(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, scopes: list[str]
) -> None:
    reply = await create(client, acme)
    limited = await tenants.key(acme, scopes)
    url = f"{BASE}/{reply['id']}"
    for method, path, sent in (
        ("POST", BASE, {"shortcut": "/new", "content": "New"}),
        ("GET", BASE, None),
        ("GET", url, None),
        ("PUT", url, {"content": "changed"}),
        ("DELETE", url, None),
    ):
        response = await client.request(method, path, json=sent, headers=limited.headers)
        assert response.status_code == 403, (method, path, response.text)
        error = response.json()["error"]
        assert error["code"] == "insufficient_scope"
        assert error["type"] == "authentication_error"
        assert "full_access" in error["message"]
    assert (await client.get(url, headers=acme.headers)).json() == reply
    assert (await client.get(BASE, headers=acme.headers)).json()["total_count"] == 1
