"""Sends through the shared aiohttp sender (`BulkGraphApiClient`) against the local fake
platform: a conversation reply's client retries what `GraphApiClient` retries (a send that
never left, the platform's retryable refusals) and nothing that may have been delivered; a
campaign run's client retries nothing; throttling is always the caller's send governor's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from app.integrations.whatsapp import errors
from app.integrations.whatsapp.bulk import (
    BulkGraphApiClient,
    BulkMessageSender,
    MaybeSent,
    NeverSent,
)
from app.integrations.whatsapp.client import RetryPolicy
from tests.integrations.whatsapp.fake_graph import FakeGraph, running_fake_graph
from tests.integrations.whatsapp.test_graph_client import PHONE_ID, TOKEN, Sleeps

TO = "+14155550100"


@pytest.fixture(scope="module")
def graph() -> Iterator[FakeGraph]:
    with running_fake_graph(TOKEN) as graph:
        yield graph


@pytest.fixture
def sleeps(graph: FakeGraph) -> Sleeps:
    graph.faults.clear()
    graph.requests.clear()
    return Sleeps()


@pytest.fixture
async def sender(graph: FakeGraph) -> AsyncIterator[BulkMessageSender]:
    sender = BulkMessageSender(graph.base_url, timeout_seconds=0.3)
    yield sender
    await sender.aclose()


def replies(sender: BulkMessageSender, sleeps: Sleeps) -> BulkGraphApiClient:
    return BulkGraphApiClient(sender, TOKEN, retry=RetryPolicy(attempts=3), sleep=sleeps)


async def test_a_reply_is_sent_again_after_a_5xx(
    graph: FakeGraph, sender: BulkMessageSender, sleeps: Sleeps
) -> None:
    graph.fail("/messages", 503, None, times=2)
    sent = await replies(sender, sleeps).send_text(PHONE_ID, TO, "Hi")
    assert sent.message_id.startswith("wamid.")
    assert len(graph.seen("/messages")) == 3
    assert len(sleeps.delays) == 2


async def test_a_campaign_send_is_not_sent_again(
    graph: FakeGraph, sender: BulkMessageSender, sleeps: Sleeps
) -> None:
    graph.fail("/messages", 503, None)
    client = BulkGraphApiClient(sender, TOKEN, sleep=sleeps)
    with pytest.raises(errors.PlatformUnavailable):
        await client.send_text(PHONE_ID, TO, "Hi")
    assert len(graph.seen("/messages")) == 1
    assert sleeps.delays == []


@pytest.mark.parametrize(
    ("code", "message", "raised"),
    [
        (131009, "(#131009) Parameter value is not valid", errors.InvalidParameter),
        # Throttling goes to the caller's send governor: never slept on here.
        (130429, "(#130429) Rate limit hit", errors.ThroughputExceeded),
    ],
)
async def test_a_refusal_that_is_not_retried_here_is_raised_at_once(
    graph: FakeGraph,
    sender: BulkMessageSender,
    sleeps: Sleeps,
    code: int,
    message: str,
    raised: type[errors.WhatsAppError],
) -> None:
    graph.fail_with("/messages", 400, code, message)
    with pytest.raises(raised):
        await replies(sender, sleeps).send_text(PHONE_ID, TO, "Hi")
    assert len(graph.seen("/messages")) == 1
    assert sleeps.delays == []


async def test_a_send_whose_answer_never_came_is_never_sent_again(
    graph: FakeGraph, sender: BulkMessageSender, sleeps: Sleeps
) -> None:
    graph.fail("/messages", 200, {"messages": [{"id": "wamid.late"}]}, delay=1.0)
    with pytest.raises(MaybeSent):
        await replies(sender, sleeps).send_text(PHONE_ID, TO, "Hi")
    # It may have reached the platform: repeating it could deliver it twice.
    assert len(graph.seen("/messages")) == 1
    assert sleeps.delays == []


async def test_a_send_that_never_left_is_tried_again(sleeps: Sleeps) -> None:
    sender = BulkMessageSender("http://127.0.0.1:9")
    try:
        with pytest.raises(NeverSent):
            await replies(sender, sleeps).send_text(PHONE_ID, TO, "Hi")
    finally:
        await sender.aclose()
    assert len(sleeps.delays) == 2  # attempts 1 and 2 waited; the third gave up
