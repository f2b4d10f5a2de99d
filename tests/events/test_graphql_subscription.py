"""`subscription { events }` over graphql-transport-ws, end to end.

Events travel the real path: REST write → event and outbox rows → in-process Dramatiq worker
(`events.fan_out`) → event stream → the websocket. The app owns its resources on a committed
database (SQLite file and PostgreSQL); the Redis variants set REDIS_URL, so the worker's publish
and the API's subscription meet in Redis pub/sub.

A subscription starts asynchronously after `subscribe`, so each test first publishes probe
events straight to the stream until one comes back (`Socket.ready`); from then on nothing is
missed. To show that something did *not* arrive, a barrier event is published afterwards: the
next event must be the barrier (the stream keeps per-organization order).
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_ws import AsyncWebSocketSession, WebSocketDisconnect, aconnect_ws
from httpx_ws.transport import ASGIWebSocketTransport
from redis.asyncio import Redis
from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.applications import Starlette

from app import resources as resources_module
from app.auth.service import revoke_api_key
from app.config import Settings
from app.core.clock import utcnow
from app.core.jsonutil import dumps
from app.db.engine import create_engine, create_sessionmaker
from app.events.models import Event
from app.graphql import socket as graphql_socket
from app.graphql import view as graphql_view
from app.integrations.whatsapp import payloads
from app.kit import outbox
from app.kit.event_stream import EventStream, SubscriptionQuota
from app.kit.outbox_models import OutboxJob
from app.main import create_app
from app.organizations.models import User
from app.organizations.service import create_user
from app.resources import Resources
from tests.conftest import (
    Tenant,
    TenantFactory,
    fresh_database,
    graphql,
    make_settings,
    service_unavailable,
)
from tests.conversations.conftest import APP_SECRET, post_signed
from tests.templates.conftest import WABA, create_channel
from workers.broker import InProcessWorker, install_job_engine

PROTOCOL = "graphql-transport-ws"
EVENTS = """subscription Events($types: [String!]) {
  events(types: $types) { id type createdAt organizationId livemode data }
}"""
CONTACT = {"phone_number": "+14155550100", "name": "Ada"}
PROBE_PREFIX = "evt_probe_"
WAIT_SECONDS = 10.0


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def committed_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with fresh_database(request.param, tmp_path_factory.mktemp("events"), "sb_events") as url:
        yield url


async def _redis_url() -> str:
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        service_unavailable("Redis", RuntimeError("TEST_REDIS_URL is not set"))
    assert url is not None
    redis = Redis.from_url(url)
    try:
        await redis.ping()
    except Exception as exc:
        service_unavailable("Redis", exc)
    finally:
        await redis.aclose()
    return url


class Socket:
    """One graphql-transport-ws connection, spoken by hand."""

    def __init__(self, ws: AsyncWebSocketSession, stream: EventStream) -> None:
        self.ws = ws
        self.stream = stream

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send_json(message)

    async def receive(self, wait: float = WAIT_SECONDS) -> dict[str, Any]:
        # receive_text: the protocol wants text frames, a binary one fails here.
        text = await self.ws.receive_text(timeout=wait)
        message: dict[str, Any] = json.loads(text)
        return message

    async def init(self, payload: dict[str, Any] | None) -> dict[str, Any]:
        message: dict[str, Any] = {"type": "connection_init"}
        if payload is not None:
            message["payload"] = payload
        await self.send(message)
        return await self.receive()

    async def subscribe(
        self, query: str = EVENTS, variables: dict[str, Any] | None = None, op: str = "1"
    ) -> None:
        await self.send(
            {"id": op, "type": "subscribe", "payload": {"query": query, "variables": variables}}
        )

    async def publish(
        self, tenant: Tenant, event_id: str, *, type: str = "lead.created", livemode: bool = False
    ) -> None:
        body = {
            "id": event_id,
            "type": type,
            "created_at": utcnow(),
            "organization_id": tenant.organization_id,
            "livemode": livemode,
            "data": {},
        }
        await self.stream.publish(tenant.organization_id, dumps(body))

    async def ready(
        self, tenant: Tenant, *, type: str = "lead.created", livemode: bool = False, op: str = "1"
    ) -> None:
        """Probes until the subscription relays one: it is registered from then on."""
        deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
        while asyncio.get_running_loop().time() < deadline:
            probe = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
            await self.publish(tenant, probe, type=type, livemode=livemode)
            try:
                message = await self.receive(wait=0.1)
            except TimeoutError:
                continue
            assert message["type"] == "next", message
            assert message["id"] == op
            assert message["payload"]["data"]["events"]["id"].startswith(PROBE_PREFIX)
            return
        pytest.fail("the subscription never started")

    async def next_event(self, op: str = "1") -> dict[str, Any]:
        """The next event of the subscription, probes left over from `ready` skipped."""
        while True:
            message = await self.receive()
            assert message["type"] == "next", message
            assert message["id"] == op
            assert "errors" not in message["payload"], message
            event: dict[str, Any] = message["payload"]["data"]["events"]
            if not event["id"].startswith(PROBE_PREFIX):
                return event

    async def next_event_of_any(self) -> tuple[str, dict[str, Any]]:
        """The next event of any operation of the socket (its id and the event), probes
        skipped."""
        while True:
            message = await self.receive()
            assert message["type"] == "next", message
            assert "errors" not in message["payload"], message
            event: dict[str, Any] = message["payload"]["data"]["events"]
            if not event["id"].startswith(PROBE_PREFIX):
                return message["id"], event

    async def nothing_before_barrier(
        self, tenant: Tenant, *, livemode: bool = False, type: str = "lead.created"
    ) -> None:
        barrier = f"evt_barrier_{uuid.uuid4().hex}"
        await self.publish(tenant, barrier, type=type, livemode=livemode)
        assert (await self.next_event())["id"] == barrier


@dataclass
class Harness:
    settings: Settings
    client: httpx.AsyncClient
    resources: Resources
    stream: EventStream
    sessionmaker: async_sessionmaker[AsyncSession]
    tenants: TenantFactory

    @asynccontextmanager
    async def socket(
        self, payload: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> AsyncIterator[Socket]:
        async with aconnect_ws(
            "/graphql", self.client, subprotocols=[PROTOCOL], headers=headers or {}
        ) as ws:
            assert ws.subprotocol == PROTOCOL
            yield Socket(ws, self.stream)

    @asynccontextmanager
    async def subscribed(
        self, tenant: Tenant, types: list[str] | None = None, *, livemode: bool = False
    ) -> AsyncIterator[Socket]:
        """A socket authenticated as `tenant` whose events subscription is live."""
        async with self.socket() as socket:
            assert await socket.init({"Authorization": f"Bearer {tenant.api_key}"}) == {
                "type": "connection_ack"
            }
            await socket.subscribe(variables={"types": types})
            await socket.ready(tenant, type=(types or ["lead.created"])[0], livemode=livemode)
            yield socket

    async def create_contact(self, tenant: Tenant, **fields: Any) -> dict[str, Any]:
        response = await self.client.post(
            "/api/v1/contacts", json={**CONTACT, **fields}, headers=tenant.headers
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


@asynccontextmanager
async def _client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app over HTTP and websockets. The transport's anyio task group must be
    left by the task that entered it, and pytest-asyncio tears fixtures down in another task:
    one task of its own holds it open."""
    opened: asyncio.Future[httpx.AsyncClient] = asyncio.get_running_loop().create_future()
    done = asyncio.Event()

    async def hold() -> None:
        async with (
            ASGIWebSocketTransport(app=app) as transport,
            httpx.AsyncClient(transport=transport, base_url="http://sb") as client,
        ):
            opened.set_result(client)
            await done.wait()

    holder = asyncio.create_task(hold())
    await asyncio.wait({holder, opened}, return_when=asyncio.FIRST_COMPLETED)
    try:
        yield opened.result()  # raises what `hold` raised, if it failed to open
    finally:
        done.set()
        await holder


@pytest.fixture(params=["local"])
async def harness(
    request: pytest.FixtureRequest, committed_url: str, tmp_path: Path
) -> AsyncIterator[Harness]:
    """The app and an in-process worker on a committed database; `redis` puts the stream,
    the broker and the rate limits on TEST_REDIS_URL, as REDIS_URL does in production."""
    redis_url = await _redis_url() if request.param == "redis" else None
    settings = make_settings(
        committed_url,
        tmp_path,
        redis_url=redis_url,
        outbox_sweep_seconds=0.05,
        outbox_redispatch_seconds=0.5,
        worker_threads=2,
        whatsapp_app_secret=APP_SECRET,
    )
    database = create_engine(committed_url, pool_size=2)
    # The test's own writes read first (e.g. a key's organization): on SQLite, a transaction
    # that upgrades to writing fails at once if the worker committed meanwhile.
    sessionmaker = create_sessionmaker(
        database.execution_options(sqlite_begin="IMMEDIATE")
        if database.dialect.name == "sqlite"
        else database
    )
    broker, _runtime = install_job_engine(settings)
    worker = InProcessWorker(broker, threads=settings.worker_threads)
    worker.start()
    app = create_app(settings)
    try:
        async with app.router.lifespan_context(app), _client(app) as client:
            yield Harness(
                settings,
                client,
                app.state.resources,
                app.state.resources.event_stream,
                sessionmaker,
                TenantFactory(sessionmaker),
            )
    finally:
        worker.stop()
        outbox.set_dispatcher(None)
        broker.close()
        async with sessionmaker() as session:  # jobs of this test must not run in the next
            await session.execute(delete(OutboxJob))
            await session.commit()
        await database.dispose()


both_streams = pytest.mark.parametrize("harness", ["local", "redis"], indirect=True)


@both_streams
async def test_a_contact_created_over_rest_streams_as_lead_created(harness: Harness) -> None:
    tenant = await harness.tenants.organization()
    async with harness.subscribed(tenant) as socket:
        contact = await harness.create_contact(tenant)
        event = await socket.next_event()

    assert event["type"] == "lead.created"
    assert event["data"] == contact  # the resource exactly as REST returned it
    assert event["organizationId"] == tenant.organization_id
    assert event["livemode"] is False
    assert event["createdAt"].endswith("Z")
    async with harness.sessionmaker() as session:
        stored = await session.get(Event, event["id"])  # the committed event, not a copy
    assert stored is not None
    assert stored.type == "lead.created"


@both_streams
async def test_a_message_the_platform_brings_streams_from_the_webhooks_own_fan_out(
    harness: Harness,
) -> None:
    """The platform's webhook fans its events out itself: the stream hears them from the API
    process once the webhook commits, not from a worker's fan-out job."""
    tenant = await harness.tenants.organization()
    # The database lives for the module: each run's number of its own.
    channel = await create_channel(harness.client, tenant, str(10**14 + uuid.uuid4().int % 10**14))
    message = payloads.inbound_text(
        WABA,
        channel["phone_number_id"],
        channel["display_phone_number"],
        "wamid.streamed",
        "+14155550100",
        "Is my order on its way?",
        profile_name="Ada",
    )
    async with harness.subscribed(tenant, ["message.received"]) as socket:
        response = await post_signed(harness.client, message)
        assert response.status_code == 200, response.text
        event = await socket.next_event()
    assert event["type"] == "message.received"
    assert event["organizationId"] == tenant.organization_id
    assert (event["data"]["platform_message_id"], event["data"]["text"]) == (
        "wamid.streamed",
        "Is my order on its way?",
    )


@both_streams
async def test_types_keeps_only_the_named_events(harness: Harness) -> None:
    tenant = await harness.tenants.organization()
    async with harness.subscribed(tenant, ["lead.updated"]) as socket:
        contact = await harness.create_contact(tenant)  # lead.created: not wanted
        updated = await harness.client.put(
            f"/api/v1/contacts/{contact['id']}", json={"name": "Grace"}, headers=tenant.headers
        )
        assert updated.status_code == 200, updated.text
        event = await socket.next_event()
    assert event["type"] == "lead.updated"
    assert event["data"] == updated.json()


@both_streams
async def test_another_organization_receives_nothing(harness: Harness) -> None:
    acme = await harness.tenants.organization("Acme")
    globex = await harness.tenants.organization("Globex")
    async with harness.subscribed(acme) as mine, harness.subscribed(globex) as theirs:
        contact = await harness.create_contact(acme)
        assert (await mine.next_event())["data"] == contact
        # Published after Acme's event reached Acme: had Globex been sent it, it came first.
        await theirs.nothing_before_barrier(globex)


async def test_a_key_sees_only_events_of_its_mode(harness: Harness) -> None:
    acme = await harness.tenants.organization()
    live = await harness.tenants.key(acme, ["full_access"], livemode=True)
    async with (
        harness.subscribed(acme) as test_socket,
        harness.subscribed(live, livemode=True) as live_socket,
    ):
        test_contact = await harness.create_contact(acme)
        assert (await test_socket.next_event())["data"] == test_contact
        await live_socket.nothing_before_barrier(acme, livemode=True)

        live_contact = await harness.create_contact(live, phone_number="+14155550101")
        event = await live_socket.next_event()
        assert event["data"] == live_contact
        assert event["livemode"] is True
        await test_socket.nothing_before_barrier(acme)


async def test_events_about_live_data_never_reach_a_test_key(harness: Harness) -> None:
    """An event takes the mode of the resource it is about, whoever acted: a live key's
    ticket is live (the test key's stream leaves it out), and a live key closing a test-mode
    ticket emits a test-mode event."""
    acme = await harness.tenants.organization()
    live = await harness.tenants.key(acme, ["full_access"], livemode=True)
    contact = await harness.create_contact(acme)
    tickets = "/api/v1/inbox/tickets"
    async with (
        harness.subscribed(acme, ["ticket.created", "ticket.resolved"]) as test_socket,
        harness.subscribed(
            live, ["ticket.created", "ticket.resolved"], livemode=True
        ) as live_socket,
    ):
        body = {"contact_id": contact["id"]}
        live_ticket = await harness.client.post(
            tickets, json=body, headers={**live.headers, "organization_id": acme.organization_id}
        )
        assert live_ticket.json()["livemode"] is True
        event = await live_socket.next_event()
        assert (event["type"], event["data"]["id"]) == ("ticket.created", live_ticket.json()["id"])
        await test_socket.nothing_before_barrier(acme, type="ticket.created")

        test_ticket = await harness.client.post(
            tickets, json=body, headers={**acme.headers, "organization_id": acme.organization_id}
        )
        assert test_ticket.json()["livemode"] is False
        assert test_ticket.json()["id"] != live_ticket.json()["id"]  # one per mode
        assert (await test_socket.next_event())["data"]["id"] == test_ticket.json()["id"]
        closed = await harness.client.post(
            f"{tickets}/{test_ticket.json()['id']}/close", headers=live.headers
        )
        assert closed.status_code == 200
        event = await test_socket.next_event()
        assert (event["type"], event["livemode"]) == ("ticket.resolved", False)
        await live_socket.nothing_before_barrier(acme, type="ticket.created", livemode=True)


async def test_a_webhooks_admin_key_may_subscribe(harness: Harness) -> None:
    acme = await harness.tenants.organization()
    admin = await harness.tenants.key(acme, ["webhooks:admin"])
    async with harness.subscribed(admin) as socket:
        contact = await harness.create_contact(acme)
        assert (await socket.next_event())["data"] == contact


async def test_a_key_without_the_scope_gets_an_error(harness: Harness) -> None:
    acme = await harness.tenants.organization()
    reader = await harness.tenants.key(acme, ["agents:read"])
    async with harness.socket() as socket:
        assert (await socket.init({"Authorization": f"Bearer {reader.api_key}"}))[
            "type"
        ] == "connection_ack"
        await socket.subscribe()
        message = await socket.receive()
    assert message["type"] == "error"
    [error] = message["payload"]
    assert error["message"] == "This credential does not have the required scope: webhooks:admin"
    assert error["extensions"]["code"] == "insufficient_scope"


async def test_unknown_event_types_are_named_in_the_error(harness: Harness) -> None:
    acme = await harness.tenants.organization()
    async with harness.socket() as socket:
        await socket.init({"Authorization": f"Bearer {acme.api_key}"})
        await socket.subscribe(variables={"types": ["lead.created", "lead.exploded"]})
        unknown = await socket.receive()
        await socket.subscribe(variables={"types": []}, op="2")
        empty = await socket.receive()
    assert unknown["type"] == "error"
    assert unknown["id"] == "1"
    [error] = unknown["payload"]
    assert error["message"].startswith("Unknown event type(s): lead.exploded. Allowed types: ")
    assert "lead.created, lead.updated" in error["message"]
    assert error["extensions"] == {"code": "invalid_input", "field": "types"}
    assert empty["type"] == "error"
    assert empty["id"] == "2"
    assert "at least one event" in empty["payload"][0]["message"]


def _bearer(tenant: Tenant) -> dict[str, str]:
    return {"Authorization": f"Bearer {tenant.api_key}"}


@pytest.mark.parametrize(
    "payload",
    [
        None,
        {},
        {"Authorization": "Bearer service_sk_test_00000000000000000000000000000000"},
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": 42},
    ],
    ids=["no-payload", "empty", "unknown-key", "bad-jwt", "not-bearer", "not-a-string"],
)
async def test_a_bad_or_missing_credential_closes_4403(
    harness: Harness, payload: dict[str, Any] | None
) -> None:
    async with harness.socket() as socket:
        with pytest.raises(WebSocketDisconnect) as closed:
            await socket.init(payload)
    assert (closed.value.code, closed.value.reason) == (4403, "Forbidden")


async def test_a_revoked_key_or_another_organization_closes_4403(harness: Harness) -> None:
    acme = await harness.tenants.organization("Acme")
    globex = await harness.tenants.organization("Globex")
    revoked = await harness.tenants.key(acme, ["full_access"])
    async with harness.sessionmaker() as session:
        await revoke_api_key(session, None, revoked.key_id)
        await session.commit()
    for payload in (
        _bearer(revoked),
        {**_bearer(acme), "organization_id": globex.organization_id},
    ):
        async with harness.socket() as socket:
            with pytest.raises(WebSocketDisconnect) as closed:
                await socket.init(payload)
        assert closed.value.code == 4403


async def test_the_credential_may_come_lower_case_or_in_the_upgrade_request(
    harness: Harness,
) -> None:
    acme = await harness.tenants.organization()
    ack = {"type": "connection_ack"}
    async with harness.socket() as socket:
        assert await socket.init({"authorization": f"Bearer {acme.api_key}"}) == ack
    async with harness.socket(headers=acme.headers) as socket:
        assert await socket.init(None) == ack
        await socket.subscribe()
        await socket.ready(acme)
        contact = await harness.create_contact(acme)
        assert (await socket.next_event())["data"] == contact


async def test_a_gateway_failure_closes_4500(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def unreachable(*_args: Any) -> None:
        raise ConnectionError("rate limiter unreachable")

    monkeypatch.setattr(graphql_view, "authenticate", unreachable)
    async with harness.socket() as socket:
        with pytest.raises(WebSocketDisconnect) as closed:
            await socket.init({"Authorization": "Bearer service_sk_test_whatever"})
    assert (closed.value.code, closed.value.reason) == (4500, "Internal server error")


async def test_queries_and_mutations_stay_on_post(harness: Harness) -> None:
    acme = await harness.tenants.organization()
    async with harness.socket() as socket:
        await socket.init(_bearer(acme))
        await socket.subscribe(query="{ viewer { organizationId } }")
        query = await socket.receive()
        await socket.subscribe(query='mutation { deleteContact(id: "x") { deletedId } }', op="2")
        mutation = await socket.receive()
    for message in (query, mutation):
        assert message["type"] == "error"
        assert message["payload"][0]["message"] == graphql_view.NOT_A_SUBSCRIPTION


async def test_a_subscription_needs_connection_init_first(harness: Harness) -> None:
    async with harness.socket() as socket:
        await socket.subscribe()
        with pytest.raises(WebSocketDisconnect) as closed:
            await socket.receive()
    assert closed.value.code == 4401


async def test_a_revoked_key_stops_receiving_events(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(graphql_socket, "RECHECK_SECONDS", 0.0)
    acme = await harness.tenants.organization()
    doomed = await harness.tenants.key(acme, ["full_access"])
    async with harness.subscribed(doomed) as socket:
        async with harness.sessionmaker() as session:
            await revoke_api_key(session, None, doomed.key_id)
            await session.commit()

        async def refused() -> bool:  # the API's key cache has heard of the revocation
            response = await harness.client.get("/api/v1/contacts", headers=doomed.headers)
            return response.status_code == 401

        deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
        while not await refused():
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)
        await harness.create_contact(acme)
        message = await socket.receive()
        while message["type"] == "next" and "errors" not in message["payload"]:
            assert message["payload"]["data"]["events"]["id"].startswith(PROBE_PREFIX)
            message = await socket.receive()
        assert message["payload"]["errors"][0]["message"] == "This API key has been revoked"
        assert message["payload"]["errors"][0]["extensions"]["code"] == "unauthenticated"
        assert await socket.receive() == {"id": "1", "type": "complete"}


async def test_a_subscription_over_post_is_refused(client: httpx.AsyncClient, acme: Tenant) -> None:
    response = await client.post("/graphql", json={"query": EVENTS}, headers=acme.headers)
    assert response.status_code == 400
    assert response.json() == {
        "errors": [
            {
                "message": graphql_socket.SUBSCRIPTIONS_OVER_WEBSOCKET,
                "extensions": {"code": "bad_request"},
            }
        ]
    }
    # Queries are unaffected.
    body = await graphql(client, "{ viewer { organizationId } }", headers=acme.headers)
    assert body["data"]["viewer"]["organizationId"] == acme.organization_id


class BrokenStream:
    """A stream whose connection drops, with a message that must not reach clients."""

    async def publish(self, organization_id: str, body: bytes) -> None:
        raise AssertionError("not used")

    async def publish_many(self, messages: list[tuple[str, bytes]]) -> None:
        raise AssertionError("not used")

    async def subscribe(self, organization_id: str) -> AsyncIterator[dict[str, Any]]:
        raise ConnectionError("redis://internal-host:6379 went away")
        yield {}  # a generator, like the real streams

    async def aclose(self) -> None:
        pass


async def test_a_broken_stream_ends_the_subscription_without_details(harness: Harness) -> None:
    acme = await harness.tenants.organization()
    harness.resources.event_stream = BrokenStream()
    async with harness.socket() as socket:
        await socket.init(_bearer(acme))
        await socket.subscribe()
        message = await socket.receive()
        assert await socket.receive() == {"id": "1", "type": "complete"}
    assert message["type"] == "next"
    [error] = message["payload"]["errors"]
    assert error["message"] == "The event stream was interrupted; subscribe again"
    assert "internal-host" not in json.dumps(message)


async def test_a_socket_context_holds_no_session_open(resources: Resources, acme: Tenant) -> None:
    """Each use gets a session of its own, closed after it: a socket may stay open for hours."""
    context = graphql_socket.SocketContext(
        request=None,  # type: ignore[arg-type]
        resources=resources,
        session=resources.sessionmaker(),
        subject=None,
    )
    async with context.unit_of_work() as session:
        user = await create_user(session, acme.organization_id, "ws@acme.test", "long password 1")
    async with context.db() as first, context.db() as second:
        assert first is not second
        assert context.session not in (first, second)
        assert (await first.get(User, user.id)) is not None  # the unit of work was committed
    assert not first.in_transaction()
    assert not context.session.in_transaction()


# --- one tenant's subscriptions never stop another's ------------------------------------------


async def _ready_all(socket: Socket, tenant: Tenant, ops: list[str]) -> None:
    """Probes until every operation of the socket relayed one (they start asynchronously)."""
    waiting = set(ops)
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while waiting:
        assert asyncio.get_running_loop().time() < deadline, f"never started: {waiting}"
        await socket.publish(tenant, f"{PROBE_PREFIX}{uuid.uuid4().hex}")
        try:
            while True:
                message = await socket.receive(wait=0.1)
                assert message["type"] == "next", message
                waiting.discard(message["id"])
        except TimeoutError:
            pass


async def _drain(socket: Socket) -> None:
    """Reads whatever probes are still on their way."""
    try:
        while True:
            await socket.receive(wait=0.2)
    except TimeoutError:
        pass


@pytest.fixture
def small_listening_pool(monkeypatch: pytest.MonkeyPatch) -> int:
    """The API's pub/sub client with a pool of 4 connections (100 by default): the issue's
    10 sockets x 10 subscriptions, scaled down to 2 x 4."""
    size = 4
    build = resources_module.listening_client

    def small(settings: Settings) -> Redis | None:
        client = build(settings)
        if client is not None:
            client.connection_pool.max_connections = size
        return client

    monkeypatch.setattr(resources_module, "listening_client", small)
    return size


@pytest.mark.parametrize("harness", ["redis"], indirect=True)
async def test_one_organizations_subscriptions_never_stop_anothers(
    small_listening_pool: int, harness: Harness
) -> None:
    org_a = await harness.tenants.organization("Org A")
    org_b = await harness.tenants.organization("Org B")
    ops = [str(op) for op in range(1, small_listening_pool + 1)]
    async with harness.socket() as first, harness.socket() as second:
        for socket in (first, second):
            assert await socket.init(_bearer(org_a)) == {"type": "connection_ack"}
            for op in ops:
                await socket.subscribe(op=op)
            await _ready_all(socket, org_a, ops)
        async with harness.subscribed(org_b) as theirs:
            contact = await harness.create_contact(org_b)
            assert (await theirs.next_event())["data"] == contact
        await _drain(first)
        await _drain(second)
        # Org A's eight subscriptions still run, over the one connection too.
        contact_a = await harness.create_contact(org_a, phone_number="+14155550109")
        for socket in (first, second):
            seen = {}
            while len(seen) < len(ops):
                event = await socket.next_event_of_any()
                seen[event[0]] = event[1]
            assert {event["data"]["id"] for event in seen.values()} == {contact_a["id"]}


@both_streams
async def test_an_organization_at_its_subscription_cap_is_refused_alone(harness: Harness) -> None:
    harness.resources.subscriptions = SubscriptionQuota(2)
    org_a = await harness.tenants.organization("Org A")
    org_b = await harness.tenants.organization("Org B")
    async with harness.socket() as socket:
        await socket.init(_bearer(org_a))
        await socket.subscribe(op="1")
        await socket.subscribe(op="2")
        await _ready_all(socket, org_a, ["1", "2"])
        await _drain(socket)
        await socket.subscribe(op="3")
        refused = await socket.receive()
        assert refused["id"] == "3"
        [error] = refused["payload"]["errors"]
        assert error["extensions"] == {"code": "too_many_subscriptions"}
        assert error["message"] == (
            "The organization has 2 open subscriptions on this server, the most it may; "
            "close one first"
        )
        assert await socket.receive() == {"id": "3", "type": "complete"}

        # Another organization is not concerned.
        async with harness.subscribed(org_b) as theirs:
            contact = await harness.create_contact(org_b)
            assert (await theirs.next_event())["data"] == contact

        # A subscription that ends gives its place back.
        await socket.send({"id": "1", "type": "complete"})
        deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
        while harness.resources.subscriptions.open_count(org_a.organization_id) > 1:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        await _drain(socket)
        await socket.subscribe(op="4")
        await _ready_all(socket, org_a, ["4"])
    assert harness.resources.subscriptions.open_count(org_a.organization_id) == 0
