"""The real carrier client against a local carrier speaking Twilio's wire format, and the
request signature scheme."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.integrations.telephony.base import CallPlacement, CarrierError
from app.integrations.telephony.signature import compute_signature, is_valid_signature
from app.integrations.telephony.simulator import SimulatedCarrier, simulated_outcome
from app.integrations.telephony.twilio import (
    TwilioCarrier,
    dial_twiml,
    stream_twiml,
    stream_url,
)
from tests.calls.fake_carrier import (
    ACCOUNT_SID,
    AUTH_TOKEN,
    INVALID_NUMBER,
    OUTAGE_NUMBER,
    RunningCarrier,
)

PLACEMENT = CallPlacement(
    to_number="+14155550123",
    from_number="+14155550100",
    status_callback_url="https://sb.example.com/webhooks/telephony/status?call_log_id=x",
    twiml=stream_twiml(stream_url("https://sb.example.com", "/voice/twilio"), 'tok<&"en'),
    machine_detection_url="https://sb.example.com/webhooks/telephony/machine-detection?x=1",
)


@pytest.fixture(scope="module")
def fake() -> Iterator[RunningCarrier]:
    with RunningCarrier() as running:
        yield running


@pytest.fixture
async def client(fake: RunningCarrier) -> Iterator[TwilioCarrier]:  # type: ignore[misc]
    carrier = TwilioCarrier(fake.url, ACCOUNT_SID, AUTH_TOKEN, timeout=5)
    yield carrier
    await carrier.aclose()


def test_signature_matches_the_published_example() -> None:
    # The worked example of Twilio's request validation documentation.
    url = "https://mycompany.com/myapp.php?foo=1&bar=2"
    params = {
        "CallSid": "CA1234567890ABCDE",
        "Caller": "+12349013030",
        "Digits": "1234",
        "From": "+12349013030",
        "To": "+18005551212",
    }
    assert compute_signature("12345", url, params.items()) == "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    assert is_valid_signature("12345", url, params.items(), "0/KCTR6DLpKmkAf8muzZqo1nDgQ=")
    assert not is_valid_signature("12346", url, params.items(), "0/KCTR6DLpKmkAf8muzZqo1nDgQ=")
    assert not is_valid_signature("12345", url + "&x=1", params.items(), "0/KCTR6DLpKmkAf8mu")
    assert not is_valid_signature("12345", url, params.items(), None)
    tampered = {**params, "Digits": "9999"}
    assert not is_valid_signature("12345", url, tampered.items(), "0/KCTR6DLpKmkAf8muzZqo1nDgQ=")


async def test_create_call_sends_the_calls_resource_form(
    fake: RunningCarrier, client: TwilioCarrier
) -> None:
    placed = await client.create_call(PLACEMENT)
    assert placed.sid.startswith("CA")
    assert placed.status == "queued"
    call = fake.carrier.calls[placed.sid]
    assert call["to"] == PLACEMENT.to_number
    assert call["from"] == PLACEMENT.from_number
    assert call["status_callback"] == PLACEMENT.status_callback_url
    assert call["status_callback_events"] == ["initiated", "ringing", "answered", "completed"]
    assert call["twiml"] == (
        '<Response><Connect><Stream url="wss://sb.example.com/voice/twilio">'
        '<Parameter name="token" value="tok&lt;&amp;&quot;en"/></Stream></Connect></Response>'
    )
    method, path, form = fake.carrier.requests[-1]
    assert (method, path) == ("POST", f"/2010-04-01/Accounts/{ACCOUNT_SID}/Calls.json")
    assert ("StatusCallbackMethod", "POST") in form
    assert ("Record", "true") in form
    # Asynchronous answering-machine detection, its verdict to our callback.
    assert ("MachineDetection", "DetectMessageEnd") in form
    assert ("AsyncAmd", "true") in form
    assert ("AsyncAmdStatusCallback", PLACEMENT.machine_detection_url) in form


def test_stream_urls_follow_the_public_urls_scheme() -> None:
    assert (
        stream_url("http://127.0.0.1:8000/", "/voice/twilio") == "ws://127.0.0.1:8000/voice/twilio"
    )
    assert (
        stream_url("https://sb.example.com", "/voice/twilio") == "wss://sb.example.com/voice/twilio"
    )
    assert dial_twiml("+14155550199") == "<Response><Dial>+14155550199</Dial></Response>"


async def test_update_call_hangs_up_and_ignores_calls_already_over(
    fake: RunningCarrier, client: TwilioCarrier
) -> None:
    placed = await client.create_call(PLACEMENT)
    await client.update_call(placed.sid, status="completed")
    assert fake.carrier.updates[-1] == (placed.sid, {"Status": "completed"})
    await client.update_call("CA" + "f" * 32, status="completed")  # 20404: nothing to do
    with pytest.raises(CarrierError):
        await TwilioCarrier(fake.url, ACCOUNT_SID, "wrong-token").update_call(
            placed.sid, status="completed"
        )


async def test_error_bodies_become_carrier_errors(client: TwilioCarrier) -> None:
    with pytest.raises(CarrierError) as refused:
        await client.create_call(
            CallPlacement(INVALID_NUMBER, "+14155550100", PLACEMENT.status_callback_url, "Hi")
        )
    assert refused.value.status == 400
    assert refused.value.code == 21211
    assert "is not a valid phone number" in refused.value.message
    assert not refused.value.retryable

    with pytest.raises(CarrierError) as outage:
        await client.create_call(
            CallPlacement(OUTAGE_NUMBER, "+14155550100", PLACEMENT.status_callback_url, "Hi")
        )
    assert outage.value.status == 503
    assert outage.value.retryable


async def test_wrong_credentials_are_refused(fake: RunningCarrier) -> None:
    carrier = TwilioCarrier(fake.url, ACCOUNT_SID, "wrong-token", timeout=5)
    try:
        with pytest.raises(CarrierError) as refused:
            await carrier.create_call(PLACEMENT)
    finally:
        await carrier.aclose()
    assert refused.value.status == 401
    assert refused.value.code == 20003
    assert not refused.value.retryable


async def test_unreachable_carrier_is_retryable() -> None:
    carrier = TwilioCarrier("http://127.0.0.1:9", ACCOUNT_SID, AUTH_TOKEN, timeout=2)
    try:
        with pytest.raises(CarrierError) as failed:
            await carrier.create_call(PLACEMENT)
    finally:
        await carrier.aclose()
    assert failed.value.status is None
    assert failed.value.retryable


async def test_fetch_call_reads_price_duration_and_recording(
    fake: RunningCarrier, client: TwilioCarrier
) -> None:
    placed = await client.create_call(PLACEMENT)
    fake.carrier.finish(placed.sid, duration=42, price="-0.01300", recording_sid="RE" + "1" * 32)
    details = await client.fetch_call(placed.sid)
    assert details.status == "completed"
    assert details.duration_seconds == 42
    assert details.cost == pytest.approx(0.013)
    assert details.recording_url == (
        f"{fake.url}/2010-04-01/Accounts/{ACCOUNT_SID}/Recordings/{'RE' + '1' * 32}.mp3"
    )
    with pytest.raises(CarrierError) as missing:
        await client.fetch_call("CA" + "f" * 32)
    assert missing.value.status == 404


@pytest.mark.parametrize(
    ("number", "outcome"),
    [
        ("+15005550002", "busy"),
        ("+15005550003", "no-answer"),
        ("+15005550004", "failed"),
        ("+14155550123", "completed"),
    ],
)
async def test_simulator_outcomes(number: str, outcome: str) -> None:
    assert simulated_outcome(number) == outcome
    placed = await SimulatedCarrier().create_call(PLACEMENT)
    assert placed.sid.startswith("CA")
    assert len(placed.sid) == 34


async def test_owns_number_asks_the_accounts_incoming_numbers(
    fake: RunningCarrier, client: TwilioCarrier
) -> None:
    fake.carrier.incoming_numbers[:] = ["+14155550177", "+141555501770"]
    fake.carrier.requests.clear()
    assert await client.owns_number("+14155550177")
    (request,) = fake.carrier.requests
    assert request == (
        "GET",
        f"/2010-04-01/Accounts/{ACCOUNT_SID}/IncomingPhoneNumbers.json",
        [("PhoneNumber", "+14155550177")],
    )
    # The filter also matches parts of numbers: only an exact entry counts.
    assert not await client.owns_number("+1415555017")
    assert not await client.owns_number("+14155550199")
    wrong = TwilioCarrier(fake.url, ACCOUNT_SID, "wrong-token", timeout=5)
    try:
        with pytest.raises(CarrierError) as refused:
            await wrong.owns_number("+14155550177")
    finally:
        await wrong.aclose()
    assert refused.value.status == 401
