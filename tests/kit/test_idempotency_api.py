"""Idempotency-Key on POST: replay, mismatch, isolation between organizations."""

from __future__ import annotations

import httpx

from tests.conftest import Tenant

BASE = "/api/v1/contacts"
BODY = {"phone_number": "+14155550100", "name": "Ada"}


async def count(client: httpx.AsyncClient, tenant: Tenant) -> int:
    return int((await client.get(BASE, headers=tenant.headers)).json()["total_count"])


async def test_same_key_replays_first_response(client: httpx.AsyncClient, acme: Tenant) -> None:
    headers = {**acme.headers, "Idempotency-Key": "create-ada-1"}
    first = await client.post(BASE, json=BODY, headers=headers)
    second = await client.post(BASE, json=BODY, headers=headers)
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert second.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert await count(client, acme) == 1


async def test_same_key_other_body_is_400(client: httpx.AsyncClient, acme: Tenant) -> None:
    headers = {**acme.headers, "Idempotency-Key": "k-1"}
    assert (await client.post(BASE, json=BODY, headers=headers)).status_code == 200
    response = await client.post(BASE, json={**BODY, "name": "Grace"}, headers=headers)
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["detail"]
    assert await count(client, acme) == 1


async def test_failed_requests_are_not_stored(client: httpx.AsyncClient, acme: Tenant) -> None:
    headers = {**acme.headers, "Idempotency-Key": "k-2"}
    bad = await client.post(BASE, json={"phone_number": "12", "name": "x"}, headers=headers)
    assert bad.status_code == 400
    fixed = await client.post(BASE, json={"phone_number": "12", "name": "x"}, headers=headers)
    assert fixed.status_code == 400  # re-run, not replayed
    assert "idempotent-replayed" not in fixed.headers


async def test_keys_are_per_organization(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    mine = await client.post(BASE, json=BODY, headers={**acme.headers, "Idempotency-Key": "k"})
    theirs = await client.post(BASE, json=BODY, headers={**globex.headers, "Idempotency-Key": "k"})
    assert mine.json()["id"] != theirs.json()["id"]
    assert theirs.json()["organization_id"] == globex.organization_id


async def test_key_length_is_checked(client: httpx.AsyncClient, acme: Tenant) -> None:
    response = await client.post(
        BASE, json=BODY, headers={**acme.headers, "Idempotency-Key": "x" * 256}
    )
    assert response.status_code == 400
    assert await count(client, acme) == 0


async def test_distinct_keys_create_distinct_records(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    for key in ("a", "b"):
        await client.post(BASE, json=BODY, headers={**acme.headers, "Idempotency-Key": key})
    assert await count(client, acme) == 2
