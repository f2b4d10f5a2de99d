"""Replies on a live channel share its send budget: each waits on the channel's send governor,
and the platform's throttling answers (130429, 131056) act on the governor, against the local
fake Graph API."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.exceptions import ConnectionError

from app.config import Settings
from app.kit.send_governor import LocalSendGovernor
from app.resources import Resources
from tests.conftest import Tenant, TenantFactory, make_settings
from tests.conversations.conftest import APP_SECRET, VERIFY_TOKEN
from tests.conversations.test_whatsapp_webhooks import CUSTOMER, PHONE_ID, open_conversation, reply
from tests.integrations.whatsapp.fake_graph import FakeGraph, running_fake_graph
from tests.templates.conftest import WABA

TOKEN = "EAAGlive-upstream-token"
MESSAGES = f"/{PHONE_ID}/messages"


class RecordingGovernor(LocalSendGovernor):
    """The in-process governor, noting what senders asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []

    async def acquire(self, channel_id: str, rate: int, wanted: int) -> int:
        self.calls.append(("acquire", channel_id, rate, wanted))
        return await super().acquire(channel_id, rate, wanted)

    async def hold(self, channel_id: str, seconds: float) -> None:
        self.calls.append(("hold", channel_id, seconds))
        await super().hold(channel_id, seconds)

    async def pair_limited(self, channel_id: str, recipient: str, seconds: float) -> None:
        self.calls.append(("pair_limited", channel_id, recipient, seconds))
        await super().pair_limited(channel_id, recipient, seconds)

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [call for call in self.calls if call[0] == name]


@pytest.fixture(scope="module")
def graph() -> Iterator[FakeGraph]:
    with running_fake_graph(TOKEN) as graph:
        yield graph


@pytest.fixture(autouse=True)
def clean_graph(graph: FakeGraph) -> None:
    graph.faults.clear()
    graph.messages.clear()
    graph.requests.clear()


@pytest.fixture
def settings(database_url: str, tmp_path: Path, graph: FakeGraph) -> Settings:
    return make_settings(
        database_url,
        tmp_path,
        whatsapp_app_secret=APP_SECRET,
        whatsapp_verify_token=VERIFY_TOKEN,
        graph_api_url=graph.base_url,
        send_max_wait_seconds=2.5,
    )


@pytest.fixture
def governor(resources: Resources) -> RecordingGovernor:
    resources.send_governor = RecordingGovernor()
    return resources.send_governor


@pytest.fixture
async def live(tenants: TenantFactory, acme: Tenant) -> Tenant:
    return await tenants.key(acme, ["full_access"], livemode=True)


@pytest.fixture
async def channel(client: httpx.AsyncClient, live: Tenant, graph: FakeGraph) -> dict[str, Any]:
    graph.add_phone_number(PHONE_ID)  # the token reads it: the channel is verified
    response = await client.post(
        "/api/v1/channels",
        json={
            "display_phone_number": "+14155550142",
            "phone_number_id": PHONE_ID,
            "business_account_id": WABA,
            "access_token": TOKEN,
            "messages_per_second": 1,
        },
        headers=live.headers,
    )
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


@dataclass
class Replies:
    """A live channel with an open conversation: what every test here replies through."""

    client: httpx.AsyncClient
    live: Tenant
    channel: dict[str, Any]
    graph: FakeGraph
    ticket_id: str

    async def send(self, text: str) -> httpx.Response:
        return await reply(self.client, self.live, self.ticket_id, text=text)

    async def raise_budget(self) -> None:
        await self.client.put(
            f"/api/v1/channels/{self.channel['id']}",
            json={"messages_per_second": 1000},
            headers=self.live.headers,
        )


@pytest.fixture
async def replies(
    client: httpx.AsyncClient,
    acme: Tenant,
    live: Tenant,
    channel: dict[str, Any],
    graph: FakeGraph,
) -> Replies:
    return Replies(client, live, channel, graph, await open_conversation(client, live))


async def test_replies_wait_for_the_channels_budget(
    replies: Replies, governor: RecordingGovernor
) -> None:
    started = time.monotonic()
    for text in ("one", "two", "three"):
        sent = await replies.send(text)
        assert (sent.status_code, sent.json()["status"]) == (201, "sent"), sent.text
    # One message per second on this channel (a burst of one): the third leaves 2 s after the
    # first, whatever else the machine is doing.
    assert time.monotonic() - started >= 2.0 - 0.02
    assert governor.named("acquire") == [("acquire", replies.channel["id"], 1, 1)] * 3
    assert [m["text"]["body"] for m in replies.graph.messages] == ["one", "two", "three"]


async def test_a_raised_budget_applies_to_the_next_reply(
    replies: Replies, governor: RecordingGovernor
) -> None:
    await replies.raise_budget()
    assert (await replies.send("fast")).json()["status"] == "sent"
    assert governor.named("acquire") == [("acquire", replies.channel["id"], 1000, 1)]


async def test_throughput_exceeded_holds_the_channel_then_resends(
    replies: Replies, governor: RecordingGovernor
) -> None:
    replies.graph.fail_with(
        MESSAGES, 400, 130429, "(#130429) Rate limit hit", headers={"Retry-After": "0.7"}
    )
    started = time.monotonic()
    sent = await replies.send("hello")
    assert (sent.status_code, sent.json()["status"]) == (201, "sent"), sent.text
    assert time.monotonic() - started >= 0.7 - 0.02  # held for the platform's hint
    assert governor.named("hold") == [("hold", replies.channel["id"], 0.7)]
    assert len(replies.graph.seen(MESSAGES)) == 2  # refused once, accepted once
    assert len(replies.graph.messages) == 1


async def test_throughput_exceeded_without_a_hint_backs_off_exponentially(
    replies: Replies, governor: RecordingGovernor
) -> None:
    replies.graph.fail_with(MESSAGES, 400, 130429, "(#130429) Rate limit hit", times=2)
    sent = await replies.send("hello")
    holds = [seconds for _, _, seconds in governor.named("hold")]
    assert len(holds) == 2
    assert 0.9 <= holds[0] <= 1.0  # 1 s, then 2 s (with jitter)
    assert 1.8 <= holds[1] <= 2.0
    # 1 s + 2 s of holds is past the 2.5 s a reply may wait: stored failed with the reason.
    assert sent.status_code == 201
    assert sent.json()["status"] == "failed"
    assert "130429" in sent.json()["error"]
    assert len(replies.graph.seen(MESSAGES)) == 2
    assert replies.graph.messages == []


async def test_a_platform_outage_is_sent_again_then_accepted(
    replies: Replies, governor: RecordingGovernor
) -> None:
    """A reply leaves through the process's shared sender, retried as the Graph API client
    retries: a 503 is tried again after a backoff, and the customer gets one message."""
    replies.graph.fail(MESSAGES, 503, None)
    sent = await replies.send("after the outage")
    assert (sent.status_code, sent.json()["status"]) == (201, "sent"), sent.text
    assert len(replies.graph.seen(MESSAGES)) == 2
    assert [m["text"]["body"] for m in replies.graph.messages] == ["after the outage"]


async def test_a_refused_reply_is_not_sent_again(replies: Replies) -> None:
    replies.graph.fail_with(MESSAGES, 400, 131009, "(#131009) Parameter value is not valid")
    sent = await replies.send("hello")
    assert (sent.status_code, sent.json()["status"]) == (201, "failed"), sent.text
    assert "131009" in sent.json()["error"]
    assert len(replies.graph.seen(MESSAGES)) == 1


async def test_a_hold_delays_other_replies_on_the_channel(
    replies: Replies, governor: RecordingGovernor
) -> None:
    """A 130429 seen by a campaign holds the replies too: they share one governor."""
    await replies.raise_budget()
    await governor.hold(replies.channel["id"], 1.0)
    started = time.monotonic()
    assert (await replies.send("after")).json()["status"] == "sent"
    assert time.monotonic() - started >= 1.0 - 0.02


async def test_pair_rate_limited_waits_for_the_recipient_then_resends(
    replies: Replies, governor: RecordingGovernor
) -> None:
    replies.graph.fail_with(
        MESSAGES, 400, 131056, "(#131056) Pair rate limit hit", headers={"Retry-After": "0.5"}
    )
    started = time.monotonic()
    sent = await replies.send("hello")
    assert sent.json()["status"] == "sent", sent.text
    assert time.monotonic() - started >= 0.5 - 0.02
    assert governor.named("pair_limited") == [
        ("pair_limited", replies.channel["id"], CUSTOMER, 0.5)
    ]
    assert governor.named("hold") == []  # the channel itself was not held
    assert len(replies.graph.seen(MESSAGES)) == 2


async def test_a_recipient_past_its_pair_rate_fails_without_a_send(
    replies: Replies, governor: RecordingGovernor
) -> None:
    await governor.pair_limited(replies.channel["id"], CUSTOMER, 60.0)
    started = time.monotonic()
    sent = await replies.send("hello")
    assert time.monotonic() - started < 2.0  # known at once to be past the wait allowed
    assert sent.json()["status"] == "failed"
    assert "too many messages" in sent.json()["error"]
    assert replies.graph.seen(MESSAGES) == []


class UnreachableGovernor(LocalSendGovernor):
    async def recipient_waits(self, channel_id: str, recipients: Any) -> list[float]:
        raise ConnectionError("Error 111 connecting to redis:6379. Connection refused.")


async def test_an_unreachable_governor_fails_the_reply_without_a_send(
    replies: Replies, resources: Resources
) -> None:
    resources.send_governor = UnreachableGovernor()
    sent = await replies.send("hello")
    assert (sent.status_code, sent.json()["status"]) == (201, "failed")
    assert "send budget could not be checked" in sent.json()["error"]
    assert replies.graph.seen(MESSAGES) == []
