"""The carrier's callbacks under hostile or broken input: values out of range are 400, never
500 (fuzzed), and which calls a SID-only status may move."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import httpx
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.calls.telephony import INCOMING_PATH, STATUS_PATH, record_carrier_sid
from tests.calls.test_phone_numbers import (  # noqa: F401 (fixtures)
    assign,
    carrier,
    carrier_post,
    create_agent,
    inbound_logs,
    incoming,
    running_carrier,
    settings,
)
from tests.conftest import Tenant, TenantFactory

NUMBER = "+14155550120"  # one of the carrier account's numbers (tests.calls.test_phone_numbers)
SID = "CA" + "7" * 32


async def live_inbound_call(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> Tenant:
    live = await tenants.key(acme, ["full_access"], livemode=True)
    agent_id = await create_agent(client, live)
    assert (await assign(client, live, agent_id, NUMBER)).status_code == 201
    answer = await carrier_post(client, INCOMING_PATH, incoming(SID, NUMBER))
    assert answer.status_code == 200
    return live


async def test_out_of_range_values_are_400_and_change_nothing(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    live = await live_inbound_call(client, acme, tenants)
    done = {**incoming(SID, NUMBER), "CallStatus": "completed"}
    for field, value, detail in (
        (
            "CallDuration",
            "99999999999999999999",
            "CallDuration must be a whole number of seconds from 0 to 86400",
        ),
        ("CallDuration", "-3", "CallDuration must be a whole number of seconds from 0 to 86400"),
        ("CallSid", "CA" + "9" * 298, "CallSid must be 1 to 64 letters, digits, '_' or '-'"),
        ("Price", "1e400", "Price must be a number up to 10000"),
        ("Price", "nan", "Price must be a number up to 10000"),
        ("RecordingUrl", "https://r.example.com/" + "a" * 3000, None),
    ):
        response = await carrier_post(client, STATUS_PATH, {**done, field: value})
        assert response.status_code == 400, (field, value, response.text)
        if detail is not None:
            assert response.json() == {"detail": detail}
    [log] = await inbound_logs(client, live)
    assert log["status"] == "in-progress"
    # The carrier's own values are taken.
    fine = {**done, "CallDuration": "86400", "Price": "-0.0130"}
    assert (await carrier_post(client, STATUS_PATH, fine)).status_code == 204
    [log] = await inbound_logs(client, live)
    assert (log["status"], log["duration_seconds"], log["cost"]) == ("completed", 86400, 0.013)


async def test_an_incoming_call_with_an_overlong_sid_is_400(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    live = await live_inbound_call(client, acme, tenants)
    response = await carrier_post(client, INCOMING_PATH, incoming("CA" + "8" * 298, NUMBER))
    assert response.status_code == 400
    assert response.json() == {"detail": "CallSid must be 1 to 64 letters, digits, '_' or '-'"}
    assert len(await inbound_logs(client, live)) == 1


async def test_a_sid_alone_moves_inbound_calls_only(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    live = await tenants.key(acme, ["full_access"], livemode=True)
    agent_id = await create_agent(client, live)
    dispatched = await client.post(
        "/api/v1/calls",
        json={"agent_id": agent_id, "to_number": "+14155550142", "from_number": NUMBER},
        headers=live.headers,
    )
    assert dispatched.status_code == 201, dispatched.text
    call_log_id = dispatched.json()["id"]
    outbound_sid = "CA" + "6" * 32
    async with sessionmaker() as session:  # the carrier accepted it as outbound_sid
        assert await record_carrier_sid(session, call_log_id, outbound_sid)
        await session.commit()
    done = {"CallSid": outbound_sid, "CallStatus": "completed", "CallDuration": "5"}
    # The SID alone: not an inbound call, so not one this callback may move.
    assert (await carrier_post(client, STATUS_PATH, done)).status_code == 404
    call = (await client.get(f"/api/v1/call-logs/{call_log_id}", headers=live.headers)).json()
    assert call["status"] == "in-progress"
    # The URL the call was placed with names its log: taken.
    placed_url = f"{STATUS_PATH}?{urlencode({'call_log_id': call_log_id})}"
    assert (await carrier_post(client, placed_url, done)).status_code == 204
    call = (await client.get(f"/api/v1/call-logs/{call_log_id}", headers=live.headers)).json()
    assert (call["status"], call["duration_seconds"]) == ("completed", 5)


# --- fuzz: whatever the carrier's parameters hold, never a 5xx --------------------------------

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)
_NUMBERS = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["", "0", "12", "1e400", "-inf", "0x10", "١٢", "12.5", " 7"]),
    _TEXT,
)
_PARAMETERS = st.fixed_dictionaries(
    {},
    optional={
        "CallSid": st.one_of(st.just(SID), st.just("CA" + "a" * 300), _TEXT),
        "CallStatus": st.one_of(st.sampled_from(["completed", "ringing", "busy", "failed"]), _TEXT),
        "CallDuration": _NUMBERS,
        "Price": _NUMBERS,
        "CallPrice": _NUMBERS,
        "RecordingUrl": st.one_of(st.just("https://r.example.com/x.wav"), _TEXT),
        "From": st.one_of(st.just("+14155550199"), _TEXT),
        "To": st.one_of(st.just(NUMBER), _TEXT),
        "Direction": _TEXT,
    },
)
_CASES = st.tuples(
    st.sampled_from([STATUS_PATH, INCOMING_PATH]),
    st.one_of(st.none(), _TEXT, st.uuids().map(str)),
    _PARAMETERS,
)


def fuzz_cases(count: int) -> list[tuple[str, str | None, dict[str, str]]]:
    """`count` cases drawn by hypothesis (collected, then posted by the async test)."""
    cases: list[tuple[str, str | None, dict[str, str]]] = []

    @hypothesis_settings(
        max_examples=count,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(_CASES)
    def collect(case: tuple[str, str | None, dict[str, str]]) -> None:
        cases.append(case)

    collect()
    return cases


async def test_carrier_callbacks_never_answer_5xx(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    await live_inbound_call(client, acme, tenants)
    failures: list[Any] = []
    for path, call_log_id, params in fuzz_cases(120):
        target = (
            path if call_log_id is None else f"{path}?{urlencode({'call_log_id': call_log_id})}"
        )
        response = await carrier_post(client, target, params)
        if response.status_code >= 500:
            failures.append((target, params, response.status_code, response.text))
    assert failures == []
