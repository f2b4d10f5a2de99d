"""The real Graph API client against the local fake platform: wire format and failure modes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from app.integrations.whatsapp import errors
from app.integrations.whatsapp.client import GraphApiClient, RetryPolicy
from app.integrations.whatsapp.types import LibraryFilters, TemplateMessage, TemplateSpec
from tests.integrations.whatsapp.fake_graph import FakeGraph, running_fake_graph

TOKEN = "EAAGm0PX4ZCpsBAKZCtoken"
WABA = "102290129340398"
PHONE_ID = "106540352242922"
BODY = [{"type": "BODY", "text": "Hi {{1}}", "example": {"body_text": [["Ada"]]}}]


class Sleeps:
    """Records the waits the client asks for instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture(scope="module")
def graph() -> Iterator[FakeGraph]:
    with running_fake_graph(TOKEN, page_size=2) as graph:
        yield graph


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def client(graph: FakeGraph, sleeps: Sleeps) -> AsyncIterator[GraphApiClient]:
    graph.templates.clear()
    graph.faults.clear()
    graph.requests.clear()
    async with GraphApiClient(
        graph.base_url, TOKEN, retry=RetryPolicy(attempts=3, base_delay=0.5), sleep=sleeps
    ) as client:
        yield client


def spec(name: str, language: str = "en_US") -> TemplateSpec:
    return TemplateSpec(name, language, "UTILITY", BODY)


async def test_create_template_posts_the_platform_shape(
    client: GraphApiClient, graph: FakeGraph
) -> None:
    created = await client.create_template(WABA, spec("order_update"))
    assert created.status == "PENDING"
    assert created.category == "UTILITY"
    assert created.id.isdigit()
    (seen,) = graph.seen("/message_templates")
    assert seen.method == "POST"
    assert seen.path == f"/v19.0/{WABA}/message_templates"
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"
    assert "access_token" not in seen.query  # the token never travels in a URL
    assert seen.json == {
        "name": "order_update",
        "language": "en_US",
        "category": "UTILITY",
        "components": BODY,
    }


async def test_list_follows_paging_next_through_every_page(
    client: GraphApiClient, graph: FakeGraph
) -> None:
    for index in range(5):
        await client.create_template(WABA, spec(f"template_{index}"))
    graph.templates[WABA][0]["status"] = "APPROVED"
    graph.templates[WABA][0]["quality_score"] = {"score": "GREEN", "date": 0}
    listed = await client.list_templates(WABA)
    assert [t.name for t in listed] == [f"template_{index}" for index in range(5)]
    assert (listed[0].status, listed[0].quality_score) == ("APPROVED", "GREEN")
    assert listed[1].quality_score == ""  # UNKNOWN is no score
    gets = [seen for seen in graph.seen("/message_templates") if seen.method == "GET"]
    assert len(gets) == 3  # pages of 2, 2, 1
    assert "after" in gets[1].query
    assert "after" in gets[2].query


async def test_paging_next_to_another_host_is_not_followed(
    client: GraphApiClient, graph: FakeGraph
) -> None:
    graph.fail(
        "/message_templates",
        200,
        {"data": [], "paging": {"next": "https://elsewhere.example/v19.0/x?after=abc"}},
        method="GET",
    )
    assert await client.list_templates(WABA) == []
    assert len(graph.requests) == 1  # the token was not sent to elsewhere.example


async def test_delete_template_by_name_and_id(client: GraphApiClient, graph: FakeGraph) -> None:
    created = await client.create_template(WABA, spec("to_delete"))
    await client.delete_template(WABA, "to_delete", created.id)
    (seen,) = [s for s in graph.requests if s.method == "DELETE"]
    assert seen.query == {"name": "to_delete", "hsm_id": created.id}
    assert graph.templates[WABA] == []
    with pytest.raises(errors.InvalidParameter) as failure:
        await client.delete_template(WABA, "to_delete", created.id)
    assert failure.value.subcode == 2593002


async def test_duplicate_template_is_an_invalid_parameter(client: GraphApiClient) -> None:
    await client.create_template(WABA, spec("twice"))
    with pytest.raises(errors.InvalidParameter) as failure:
        await client.create_template(WABA, spec("twice"))
    assert failure.value.code == 100
    assert "already exists" in failure.value.describe()


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (LibraryFilters(name="payment_reminder"), {"payment_reminder"}),
        (
            LibraryFilters(topic="Payments"),
            {"payment_reminder", "payment_received", "payment_failed"},
        ),
        (
            LibraryFilters(usecase="Appointment reminder", language="es_ES"),
            {"recordatorio_de_cita"},
        ),
        (
            LibraryFilters(industry="Healthcare", language="en_US"),
            {"appointment_reminder", "appointment_confirmation"},
        ),
        (LibraryFilters(search="cart"), {"abandoned_cart"}),
    ],
)
async def test_library_filters_reach_the_platform(
    client: GraphApiClient, graph: FakeGraph, filters: LibraryFilters, expected: set[str]
) -> None:
    found = await client.browse_library(filters)
    assert {entry["name"] for entry in found} == expected
    (seen,) = graph.seen("/message_template_library")
    assert seen.query == filters.as_query()


async def test_send_text_and_template(client: GraphApiClient, graph: FakeGraph) -> None:
    sent = await client.send_text(PHONE_ID, "+14155550100", "Hello")
    assert sent.message_id.startswith("wamid.")
    assert sent.wa_id == "14155550100"
    await client.send_template(
        PHONE_ID, "+14155550100", TemplateMessage("order_update", "en_US", ["Ada"])
    )
    text, template = graph.messages
    assert text["type"] == "text"
    assert text["text"]["body"] == "Hello"
    assert text["messaging_product"] == "whatsapp"
    assert text["recipient_type"] == "individual"
    assert template["template"] == {
        "name": "order_update",
        "language": {"code": "en_US"},
        "components": [{"type": "body", "parameters": [{"type": "text", "text": "Ada"}]}],
    }
    assert graph.seen(f"/{PHONE_ID}/messages")[0].path == f"/v19.0/{PHONE_ID}/messages"


async def test_bad_token_is_invalid_token(graph: FakeGraph, sleeps: Sleeps) -> None:
    async with GraphApiClient(graph.base_url, "wrong", sleep=sleeps) as client:
        with pytest.raises(errors.InvalidToken) as failure:
            await client.list_templates(WABA)
    assert failure.value.code == 190
    assert failure.value.http_status == 401
    assert sleeps.delays == []  # never retried


@pytest.mark.parametrize(
    ("code", "status", "error_class"),
    [
        (130429, 400, errors.ThroughputExceeded),
        (131056, 400, errors.PairRateLimited),
        (80008, 400, errors.TooManyCalls),
        (131026, 400, errors.Undeliverable),
        (190, 401, errors.InvalidToken),
        (100, 400, errors.InvalidParameter),
    ],
)
async def test_meta_error_codes_map_to_typed_errors(
    client: GraphApiClient,
    graph: FakeGraph,
    sleeps: Sleeps,
    code: int,
    status: int,
    error_class: type[errors.WhatsAppError],
) -> None:
    graph.fail_with("/messages", status, code, f"error {code}", times=5)
    with pytest.raises(error_class) as failure:
        await client.send_text(PHONE_ID, "+14155550100", "Hi")
    assert failure.value.code == code
    assert failure.value.message == f"error {code}"
    assert failure.value.trace_id
    attempts = len(graph.seen("/messages"))
    # Throttling is tried again (3 attempts in all); the rest fail at once.
    assert attempts == (3 if error_class.retryable else 1)
    assert len(sleeps.delays) == attempts - 1


async def test_5xx_is_retried_with_jittered_backoff(
    client: GraphApiClient, graph: FakeGraph, sleeps: Sleeps
) -> None:
    graph.fail("/message_templates", 503, None, times=2)
    await client.create_template(WABA, spec("after_outage"))
    assert len(graph.seen("/message_templates")) == 3
    first, second = sleeps.delays
    assert 0 <= first <= 0.5
    assert 0 <= second <= 1.0


async def test_5xx_gives_up_after_the_last_attempt(
    client: GraphApiClient, graph: FakeGraph
) -> None:
    graph.fail_with("/message_templates", 500, 2, "Service temporarily unavailable", times=9)
    with pytest.raises(errors.PlatformUnavailable) as failure:
        await client.list_templates(WABA)
    assert failure.value.http_status == 500
    assert failure.value.retryable
    assert len(graph.seen("/message_templates")) == 3


async def test_throttling_honours_retry_after(
    client: GraphApiClient, graph: FakeGraph, sleeps: Sleeps
) -> None:
    graph.fail_with("/messages", 429, 80008, "Too many calls", headers={"Retry-After": "7"})
    sent = await client.send_text(PHONE_ID, "+14155550100", "Hi")
    assert sent.message_id.startswith("wamid.")
    assert sleeps.delays == [7.0]


async def test_retry_after_is_capped(graph: FakeGraph, sleeps: Sleeps) -> None:
    graph.faults.clear()
    graph.fail_with("/messages", 429, 130429, "Throughput", headers={"Retry-After": "3600"})
    async with GraphApiClient(
        graph.base_url, TOKEN, retry=RetryPolicy(max_delay=30), sleep=sleeps
    ) as client:
        await client.send_text(PHONE_ID, "+14155550100", "Hi")
    assert sleeps.delays == [30]


async def test_read_timeout_retries_a_read_but_never_a_send(
    graph: FakeGraph, sleeps: Sleeps
) -> None:
    graph.faults.clear()
    graph.requests.clear()
    timeout = httpx.Timeout(0.2)
    async with GraphApiClient(graph.base_url, TOKEN, timeout=timeout, sleep=sleeps) as client:
        graph.fail("/message_template_library", 200, {"data": []}, delay=1.0)
        assert await client.browse_library(LibraryFilters()) != []  # second try answered
        assert len(graph.seen("/message_template_library")) == 2
        graph.fail("/messages", 200, {"messages": [{"id": "wamid.late"}]}, delay=1.0)
        with pytest.raises(errors.PlatformUnavailable):
            await client.send_text(PHONE_ID, "+14155550100", "Hi")
    # The send may have reached the platform: repeating it could deliver it twice.
    assert len(graph.seen("/messages")) == 1


async def test_connection_refused_is_platform_unavailable(sleeps: Sleeps) -> None:
    async with GraphApiClient("http://127.0.0.1:9", TOKEN, sleep=sleeps) as client:
        with pytest.raises(errors.PlatformUnavailable):
            await client.send_text(PHONE_ID, "+14155550100", "Hi")
    assert len(sleeps.delays) == 3  # a connect error never sent anything: safe to retry


async def test_non_json_error_body_still_maps(client: GraphApiClient, graph: FakeGraph) -> None:
    graph.fail("/message_templates", 502, None, times=9)
    with pytest.raises(errors.PlatformUnavailable) as failure:
        await client.list_templates(WABA)
    assert failure.value.http_status == 502


async def test_phone_number_reads_the_node_with_the_channels_token(
    client: GraphApiClient, graph: FakeGraph
) -> None:
    graph.phone_numbers.clear()
    graph.add_phone_number(PHONE_ID, "+1 415-555-0142", token=TOKEN, verified_name="Acme")
    number = await client.phone_number(PHONE_ID)
    assert (number.id, number.display_phone_number, number.verified_name) == (
        PHONE_ID,
        "+1 415-555-0142",
        "Acme",
    )
    (seen,) = graph.seen(f"/v19.0/{PHONE_ID}")
    assert seen.method == "GET"
    assert seen.query == {"fields": "id,display_phone_number,verified_name"}
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"


async def test_phone_number_of_another_account_is_refused(
    client: GraphApiClient, graph: FakeGraph
) -> None:
    graph.phone_numbers.clear()
    graph.add_phone_number(PHONE_ID, token="EAAGsomeone-else")
    with pytest.raises(errors.InvalidParameter) as refused:
        await client.phone_number(PHONE_ID)
    assert (refused.value.code, refused.value.subcode) == (100, 33)
    assert not refused.value.retryable
    # A node that is not a phone number (no display_phone_number) is refused the same way.
    graph.add_phone_number("777", token=TOKEN)
    graph.phone_numbers["777"].display_phone_number = ""
    with pytest.raises(errors.InvalidParameter):
        await client.phone_number("777")
