"""GraphQL websockets: messages over 1 MiB close the socket (1009) before anything parses them,
and a socket that never sends `connection_init` is closed (4408).

The issue's reproduction was five 15 MiB `connection_init` frames from an anonymous client, each
parsed as JSON on the event loop; here a 2 MiB one (scaled down), before and after the
handshake. uvicorn refuses them earlier under `switchboard serve` (tests/test_cli.py); this is
the app's own limit, which holds whatever server runs it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
from httpx_ws import WebSocketDisconnect, aconnect_ws

from app.graphql import view as graphql_view
from app.kit.body import WEBSOCKET_MAX_MESSAGE_BYTES
from app.main import create_app
from app.resources import Resources
from tests.conftest import Tenant
from tests.events.test_graphql_subscription import PROTOCOL, _client

WAIT_SECONDS = 5.0


@pytest.fixture
async def ws_client(
    resources: Resources, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setattr(graphql_view, "CONNECTION_INIT_TIMEOUT", timedelta(seconds=0.3))
    async with _client(create_app(resources=resources)) as client:
        yield client


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every websocket message Strawberry parsed."""
    sizes: list[int] = []
    decode = graphql_view.StrawberryView.decode_json

    def counting(self: graphql_view.StrawberryView, data: str | bytes) -> object:
        sizes.append(len(data))
        return decode(self, data)

    monkeypatch.setattr(graphql_view.StrawberryView, "decode_json", counting)
    return sizes


def connection_init(padding: int, authorization: str = "Bearer service_sk_test_nobody") -> str:
    return json.dumps(
        {
            "type": "connection_init",
            "payload": {"Authorization": authorization, "pad": "x" * padding},
        }
    )


async def test_an_oversized_connection_init_closes_1009_unparsed(
    ws_client: httpx.AsyncClient, parsed: list[int]
) -> None:
    async with aconnect_ws("/graphql", ws_client, subprotocols=[PROTOCOL]) as ws:
        await ws.send_text(connection_init(2 * WEBSOCKET_MAX_MESSAGE_BYTES))
        with pytest.raises(WebSocketDisconnect) as closed:
            await ws.receive_text(timeout=WAIT_SECONDS)
    assert closed.value.code == 1009
    assert parsed == []


async def test_multibyte_text_is_measured_in_bytes(
    ws_client: httpx.AsyncClient, parsed: list[int]
) -> None:
    # 400,000 characters of 3 bytes each: 1.2 MB on the wire, under a million characters.
    async with aconnect_ws("/graphql", ws_client, subprotocols=[PROTOCOL]) as ws:
        await ws.send_text(
            json.dumps({"type": "connection_init", "pad": "€" * 400_000}, ensure_ascii=False)
        )
        with pytest.raises(WebSocketDisconnect) as closed:
            await ws.receive_text(timeout=WAIT_SECONDS)
    assert closed.value.code == 1009
    assert parsed == []


async def test_an_oversized_message_after_the_handshake_closes_1009(
    ws_client: httpx.AsyncClient, acme: Tenant, parsed: list[int]
) -> None:
    async with aconnect_ws("/graphql", ws_client, subprotocols=[PROTOCOL]) as ws:
        # Messages up to the limit are taken: this init is just under it.
        await ws.send_text(
            connection_init(WEBSOCKET_MAX_MESSAGE_BYTES - 200, f"Bearer {acme.api_key}")
        )
        assert json.loads(await ws.receive_text(timeout=WAIT_SECONDS)) == {"type": "connection_ack"}
        query = "subscription { events { id } }" + " " * (2 * WEBSOCKET_MAX_MESSAGE_BYTES)
        await ws.send_text(
            json.dumps({"id": "1", "type": "subscribe", "payload": {"query": query}})
        )
        with pytest.raises(WebSocketDisconnect) as closed:
            await ws.receive_text(timeout=WAIT_SECONDS)
    assert closed.value.code == 1009
    assert len(parsed) == 1  # the init only
    assert parsed[0] <= WEBSOCKET_MAX_MESSAGE_BYTES


async def test_an_oversized_binary_message_closes_1009(ws_client: httpx.AsyncClient) -> None:
    async with aconnect_ws("/graphql", ws_client, subprotocols=[PROTOCOL]) as ws:
        await ws.send_bytes(b"x" * (WEBSOCKET_MAX_MESSAGE_BYTES + 1))
        with pytest.raises(WebSocketDisconnect) as closed:
            await ws.receive_text(timeout=WAIT_SECONDS)
    assert closed.value.code == 1009


async def test_a_socket_without_connection_init_is_closed_4408(
    ws_client: httpx.AsyncClient,
) -> None:
    async with aconnect_ws("/graphql", ws_client, subprotocols=[PROTOCOL]) as ws:
        # Pings do not keep it open: only connection_init stops the clock.
        await ws.send_text(json.dumps({"type": "ping"}))
        assert json.loads(await ws.receive_text(timeout=WAIT_SECONDS)) == {"type": "pong"}
        with pytest.raises(WebSocketDisconnect) as closed:
            await ws.receive_text(timeout=WAIT_SECONDS)
    assert (closed.value.code, closed.value.reason) == (4408, "Connection initialisation timeout")
