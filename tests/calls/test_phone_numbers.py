"""Agent ↔ phone number assignments on REST and GraphQL, and the carrier's incoming-call
webhook that logs inbound calls for the assigned agent (signed like every carrier call)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.calls.telephony import INCOMING_PATH, STATUS_PATH
from app.config import Settings
from tests.calls.fake_carrier import (
    ACCOUNT_SID,
    AUTH_TOKEN,
    FakeCarrier,
    RunningCarrier,
    signed_status,
)
from tests.conftest import Tenant, TenantFactory, graphql, make_settings

NUMBERS = "/api/v1/phone-numbers"
PUBLIC_URL = "https://switchboard.example.com"
ASSIGN = """
mutation($input: AssignPhoneNumberInput!) {
  assignPhoneNumber(input: $input) {
    phoneNumber { id phoneNumber agentId livemode }
    errors { code message field }
  }
}"""

STREAM_ANSWER = re.compile(
    r'<Response><Connect><Stream url="wss://[^/"]+/voice/twilio">'
    r'<Parameter name="token" value="[A-Za-z0-9._-]+"/></Stream></Connect></Response>'
)


@pytest.fixture(scope="module")
def running_carrier() -> Iterator[RunningCarrier]:
    with RunningCarrier() as running:
        yield running


@pytest.fixture
def carrier(running_carrier: RunningCarrier) -> FakeCarrier:
    """The carrier account, as new, owning the numbers the tests assign with live keys."""
    fake = running_carrier.carrier
    fake.requests.clear()
    fake.incoming_numbers[:] = ["+14155550120", "+14155550177"]
    return fake


@pytest.fixture
def settings(
    database_url: str, tmp_path: Path, running_carrier: RunningCarrier, carrier: FakeCarrier
) -> Settings:
    return make_settings(
        database_url,
        tmp_path,
        telephony_api_url=running_carrier.url,
        telephony_account_sid=ACCOUNT_SID,
        telephony_auth_token=AUTH_TOKEN,
        telephony_public_url=PUBLIC_URL,
    )


async def create_agent(client: httpx.AsyncClient, tenant: Tenant, welcome: str = "Hi") -> str:
    response = await client.post(
        "/api/v1/agents",
        json={"name": "Ava", "agent_config": {"welcome_message": welcome}},
        headers=tenant.headers,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def assign(
    client: httpx.AsyncClient, tenant: Tenant, agent_id: str, number: str
) -> httpx.Response:
    return await client.post(
        NUMBERS, json={"phone_number": number, "agent_id": agent_id}, headers=tenant.headers
    )


async def test_assign_list_move_and_remove(client: httpx.AsyncClient, acme: Tenant) -> None:
    first = await create_agent(client, acme)
    second = await create_agent(client, acme)
    response = await assign(client, acme, first, "+1 415 555 0111")
    assert response.status_code == 201, response.text
    created = response.json()
    assert created["phone_number"] == "+14155550111"
    assert created["agent_id"] == first
    assert created["organization_id"] == acme.organization_id

    moved = await assign(client, acme, second, "+14155550111")
    assert moved.status_code == 201
    assert moved.json()["id"] == created["id"]
    assert moved.json()["agent_id"] == second

    listed = (await client.get(NUMBERS, headers=acme.headers)).json()
    assert [item["agent_id"] for item in listed["data"]] == [second]

    deleted = await client.delete(f"{NUMBERS}/{created['id']}", headers=acme.headers)
    assert deleted.status_code == 204
    again = await client.delete(f"{NUMBERS}/{created['id']}", headers=acme.headers)
    assert again.status_code == 404


async def test_numbers_and_agents_of_other_organizations(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    mine = await create_agent(client, acme)
    theirs = await create_agent(client, globex)
    response = await assign(client, acme, theirs, "+14155550112")
    assert response.status_code == 404
    assert response.json() == {"error": 404, "message": "Agent not found"}

    assert (await assign(client, globex, theirs, "+14155550112")).status_code == 201
    taken = await assign(client, acme, mine, "+14155550112")
    assert taken.status_code == 409
    assert taken.json() == {"detail": "Phone number is already in use"}
    listed = (await client.get(NUMBERS, headers=acme.headers)).json()
    assert listed["data"] == []

    bad = await assign(client, acme, mine, "12")
    assert bad.status_code == 400


async def test_scopes_and_graphql(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    agent_id = await create_agent(client, acme)
    reader = await tenants.key(acme, ["agents:read"])
    assert (await assign(client, reader, agent_id, "+14155550113")).status_code == 403
    assert (await client.get(NUMBERS, headers=reader.headers)).status_code == 200

    body = await graphql(
        client,
        ASSIGN,
        {"input": {"agentId": agent_id, "phoneNumber": "+14155550113"}},
        acme.headers,
    )
    payload = body["data"]["assignPhoneNumber"]
    assert payload["errors"] == []
    assert payload["phoneNumber"]["phoneNumber"] == "+14155550113"
    listed = await graphql(
        client, "{ phoneNumbers { nodes { phoneNumber agentId } } }", None, reader.headers
    )
    assert listed["data"]["phoneNumbers"]["nodes"] == [
        {"phoneNumber": "+14155550113", "agentId": agent_id}
    ]
    refused = await graphql(
        client,
        ASSIGN,
        {"input": {"agentId": agent_id, "phoneNumber": "+14155550114"}},
        reader.headers,
    )
    assert refused["data"]["assignPhoneNumber"] is None


async def carrier_post(
    client: httpx.AsyncClient, path: str, params: dict[str, str], token: str = AUTH_TOKEN
) -> httpx.Response:
    form, headers = signed_status(PUBLIC_URL + path, params, token)
    return await client.post(path, data=form, headers=headers)


def incoming(sid: str, to: str) -> dict[str, str]:
    return {
        "CallSid": sid,
        "AccountSid": ACCOUNT_SID,
        "From": "+14155550199",
        "To": to,
        "CallStatus": "ringing",
        "Direction": "inbound",
    }


async def inbound_logs(client: httpx.AsyncClient, tenant: Tenant) -> list[dict[str, Any]]:
    response = await client.get(
        "/api/v1/call-logs", params={"direction": "inbound"}, headers=tenant.headers
    )
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def test_incoming_call_is_answered_by_the_assigned_agent(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    live = await tenants.key(acme, ["full_access"], livemode=True)
    agent_id = await create_agent(client, live, welcome="Thanks for calling <Acme>.")
    assert (await assign(client, live, agent_id, "+14155550120")).status_code == 201
    sid = "CA" + "a" * 32

    answer = await carrier_post(client, INCOMING_PATH, incoming(sid, "+14155550120"))
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/xml")
    # The agent answers on the call's media stream (tests/voice/ follow it).
    assert STREAM_ANSWER.fullmatch(answer.text), answer.text
    # The carrier retrying the same call logs it once.
    assert (await carrier_post(client, INCOMING_PATH, incoming(sid, "+14155550120"))).is_success
    [log] = await inbound_logs(client, live)
    assert log["call_id"] == sid
    assert log["agent_id"] == agent_id
    assert log["status"] == "in-progress"
    assert log["from_number"] == "+14155550199"
    assert log["livemode"] is True

    done = {**incoming(sid, "+14155550120"), "CallStatus": "completed", "CallDuration": "12"}
    assert (await carrier_post(client, STATUS_PATH, done)).status_code == 204
    [log] = await inbound_logs(client, live)
    assert log["status"] == "completed"
    assert log["duration_seconds"] == 12


async def test_incoming_calls_refused(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    agent_id = await create_agent(client, acme)  # a test key: a test-mode number
    assert (await assign(client, acme, agent_id, "+14155550121")).status_code == 201
    for number in ("+14155550121", "+14155550122"):
        answer = await carrier_post(client, INCOMING_PATH, incoming("CA" + "b" * 32, number))
        assert answer.status_code == 200
        assert "not in service" in answer.text
    forged = await carrier_post(
        client, INCOMING_PATH, incoming("CA" + "c" * 32, "+14155550121"), token="wrong"
    )
    assert forged.status_code == 403
    assert await inbound_logs(client, acme) == []


# --- a number belongs to one organization; live assignments are verified -------------------


async def test_a_test_key_never_blocks_a_live_assignment(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, tenants: TenantFactory
) -> None:
    """The reproduction: org B's test key claims +14155550177; org A's live key then assigns
    it, and the carrier's calls to it reach org A's agent."""
    squatter = await create_agent(client, globex, welcome="Globex here")
    assert (await assign(client, globex, squatter, "+14155550177")).status_code == 201
    live = await tenants.key(acme, ["full_access"], livemode=True)
    agent_id = await create_agent(client, live, welcome="Acme here")
    owned = await assign(client, live, agent_id, "+14155550177")
    assert owned.status_code == 201, owned.text
    assert owned.json()["livemode"] is True
    answer = await carrier_post(client, INCOMING_PATH, incoming("CA" + "d" * 32, "+14155550177"))
    assert STREAM_ANSWER.fullmatch(answer.text), answer.text
    [log] = await inbound_logs(client, live)
    assert log["agent_id"] == agent_id
    assert await inbound_logs(client, globex) == []
    # Held live by acme now: another organization's test key is refused too.
    third = await tenants.organization("Initech")
    theirs = await create_agent(client, third)
    taken = await assign(client, third, theirs, "+14155550177")
    assert taken.status_code == 409
    assert taken.json() == {"detail": "Phone number is already in use"}


async def test_live_assignments_are_verified_with_the_carrier(
    client: httpx.AsyncClient, globex: Tenant, tenants: TenantFactory, carrier: FakeCarrier
) -> None:
    live = await tenants.key(globex, ["full_access"], livemode=True)
    agent_id = await create_agent(client, live)
    # A number the carrier account does not have: 400, nothing assigned.
    squat = await assign(client, live, agent_id, "+14155550188")
    assert squat.status_code == 400
    assert squat.json() == {
        "detail": "+14155550188 is not one of the voice carrier account's numbers"
    }
    assert carrier.requests[-1] == (
        "GET",
        f"/2010-04-01/Accounts/{ACCOUNT_SID}/IncomingPhoneNumbers.json",
        [("PhoneNumber", "+14155550188")],
    )
    assert (await client.get(NUMBERS, headers=live.headers)).json()["data"] == []
    answer = await carrier_post(client, INCOMING_PATH, incoming("CA" + "e" * 32, "+14155550188"))
    assert "not in service" in answer.text
    # One the account has: verified and assigned; moving it to another agent asks no more.
    assert (await assign(client, live, agent_id, "+14155550120")).status_code == 201
    asked = len(carrier.requests)
    other = await create_agent(client, live)
    assert (await assign(client, live, other, "+14155550120")).status_code == 201
    assert len(carrier.requests) == asked
    # Test keys are never verified.
    assert (
        await assign(client, globex, await create_agent(client, globex), "+14155550188")
    ).is_success
    assert len(carrier.requests) == asked


async def test_verification_needs_a_carrier_that_answers(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    settings: Settings,
) -> None:
    live = await tenants.key(acme, ["full_access"], livemode=True)
    agent_id = await create_agent(client, live)
    settings.telephony_api_url = "http://127.0.0.1:9"  # nothing listens there
    unreachable = await assign(client, live, agent_id, "+14155550177")
    assert unreachable.status_code == 502
    assert unreachable.json()["detail"].startswith("The voice carrier could not verify")
    settings.telephony_account_sid = None
    unconfigured = await assign(client, live, agent_id, "+14155550177")
    assert unconfigured.status_code == 400
    assert unconfigured.json() == {
        "detail": "No voice carrier is configured, so a live number cannot be verified"
    }
    body = await graphql(
        client,
        ASSIGN,
        {"input": {"agentId": agent_id, "phoneNumber": "+14155550177"}},
        live.headers,
    )
    (error,) = body["data"]["assignPhoneNumber"]["errors"]
    assert (error["code"], error["field"]) == ("phone_number_not_verified", "phoneNumber")
