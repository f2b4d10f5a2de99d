"""Contact search and tag filters walked page by page in both directions, on REST and GraphQL,
against the rule computed here: `search` is a case-insensitive substring of the name or a
substring of the phone number, `tag` an exact tag, `total_count` the exact number of matches.
On PostgreSQL a search starting with '+' takes the E.164 prefix path and every search reads
its matches once for the page and the total: both must give what the rule gives."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import GRAPHQL, Tenant

CONTACTS = "/api/v1/contacts"
PEOPLE = [
    ("Ada Lovelace", "+14155550100", ["vip"]),
    ("Grace Hopper", "+442071838750", ["lead"]),
    ("Alan Turing", "+14155550142", ["lead", "vip"]),
    ("Katherine +Johnson", "+14165550100", []),
    ("Mary Jackson", "+5511955550100", ["lead"]),
    ("Dorothy Vaughan", "+14155551415", ["vip"]),
    ("Ada Yonath", "+972501234567", []),
]


def _expected(search: str | None, tag: str | None) -> list[str]:
    """Names matching, newest first (created in list order)."""
    found = [
        name
        for name, phone, tags in PEOPLE
        if (search is None or search.lower() in name.lower() or search in phone)
        and (tag is None or tag in tags)
    ]
    return list(reversed(found))


@pytest.fixture
async def people(client: httpx.AsyncClient, acme: Tenant, globex: Tenant) -> None:
    for name, phone, tags in PEOPLE:
        response = await client.post(
            CONTACTS,
            json={"phone_number": phone, "name": name, "tags": tags},
            headers=acme.headers,
        )
        assert response.status_code == 200, response.text
    # Another tenant's look-alike must never appear.
    response = await client.post(
        CONTACTS,
        json={"phone_number": "+14155550100", "name": "Ada Elsewhere", "tags": ["vip"]},
        headers=globex.headers,
    )
    assert response.status_code == 200


CASES = [
    ("+1415", None),
    ("+14155550", None),
    ("+44", None),
    ("+", None),
    ("+Johnson", None),
    ("+1415", "vip"),
    ("1415", None),
    ("0100", None),
    ("ada", None),
    ("ADA", "vip"),
    ("zzz", None),
    ("+9", None),
    (None, "lead"),
    (None, "vip"),
]


@pytest.mark.usefixtures("people")
@pytest.mark.parametrize(("search", "tag"), CASES)
async def test_rest_pages_match_the_rule_both_ways(
    client: httpx.AsyncClient, acme: Tenant, search: str | None, tag: str | None
) -> None:
    expected = _expected(search, tag)
    query: dict[str, Any] = {"limit": 2}
    if search is not None:
        query["search"] = search
    if tag is not None:
        query["tag"] = tag

    async def page(**cursor: str) -> dict[str, Any]:
        response = await client.get(CONTACTS, params={**query, **cursor}, headers=acme.headers)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        assert body["total_count"] == len(expected)
        return body

    forward: list[dict[str, Any]] = []
    body = await page()
    forward += body["data"]
    while body["has_more"]:
        body = await page(starting_after=body["next_cursor"])
        forward += body["data"]
    assert [item["name"] for item in forward] == expected

    if len(forward) > 1:
        backward: list[str] = []
        before = forward[-1]["id"]
        while True:
            body = await page(ending_before=before)
            if not body["data"]:
                break
            backward = [item["name"] for item in body["data"]] + backward
            before = body["data"][0]["id"]
        assert backward == expected[:-1]


LIST = """
query($first: Int, $after: String, $tag: String, $search: String) {
  contacts(first: $first, after: $after, tag: $tag, search: $search) {
    totalCount nodes { name } pageInfo { hasNextPage endCursor }
  }
}
"""


@pytest.mark.usefixtures("people")
@pytest.mark.parametrize(("search", "tag"), CASES)
async def test_graphql_pages_match_the_rule(
    client: httpx.AsyncClient, acme: Tenant, search: str | None, tag: str | None
) -> None:
    expected = _expected(search, tag)
    names: list[str] = []
    after: str | None = None
    while True:
        variables = {"first": 3, "after": after, "search": search, "tag": tag}
        response = await client.post(
            GRAPHQL, json={"query": LIST, "variables": variables}, headers=acme.headers
        )
        body = response.json()
        assert "errors" not in body, body
        contacts = body["data"]["contacts"]
        assert contacts["totalCount"] == len(expected)
        names += [node["name"] for node in contacts["nodes"]]
        if not contacts["pageInfo"]["hasNextPage"]:
            break
        after = contacts["pageInfo"]["endCursor"]
    assert names == expected
