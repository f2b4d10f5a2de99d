"""Every route's request body is bounded before anything reads it (app/kit/body.py).

The platform callbacks are anonymous: a 256 MiB chunked body to /webhooks/whatsapp used to be
read whole before its size and signature were judged, and /webhooks/telephony/* never looked at
the length. Here each route gets an oversized body, announced (Content-Length) or chunked, and
the test counts what the app pulled from `receive`: nothing for an announced one, at most the
limit plus one chunk for a chunked one, and the answer is 413.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.calls.telephony import INCOMING_PATH, STATUS_PATH
from app.config import Settings
from app.kit.body import PLATFORM_CALLBACK_MAX_BYTES
from tests.calls.fake_carrier import ACCOUNT_SID, AUTH_TOKEN
from tests.conftest import Tenant, make_settings

MIB = 1024 * 1024
CHUNK = 64 * 1024
# What the old code read of a chunked body before judging it: all of it. 4 MiB keeps the test
# fast and still four times over every limit below.
CHUNKED_TOTAL = 4 * MIB
ANNOUNCED = 256 * MIB

CALLBACKS = ["/webhooks/whatsapp", STATUS_PATH, INCOMING_PATH]
CALLBACK_HEADERS = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    # With the carrier's token set, the carrier callbacks read their body (to check it).
    return make_settings(
        database_url,
        tmp_path,
        telephony_account_sid=ACCOUNT_SID,
        telephony_auth_token=AUTH_TOKEN,
        knowledge_max_upload_bytes=3 * MIB,
    )


class Body:
    """A request body produced on demand, counting what the app pulled."""

    def __init__(self, total: int, prefix: bytes = b"") -> None:
        self.total = total
        self.prefix = prefix
        self.pulled = 0

    async def chunks(self) -> AsyncIterator[bytes]:
        if self.prefix:
            self.pulled += len(self.prefix)
            yield self.prefix
        remaining = self.total
        while remaining > 0:
            size = min(CHUNK, remaining)
            remaining -= size
            self.pulled += size
            yield b"x" * size


async def chunked(
    client: httpx.AsyncClient, path: str, body: Body, headers: dict[str, str]
) -> httpx.Response:
    # An async iterable without a length: httpx sends it chunked, as curl does with `-T -`.
    return await client.post(path, content=body.chunks(), headers=headers)


async def announced(
    client: httpx.AsyncClient, path: str, body: Body, headers: dict[str, str]
) -> httpx.Response:
    return await client.post(
        path, content=body.chunks(), headers={**headers, "Content-Length": str(ANNOUNCED)}
    )


Sender = Callable[
    [httpx.AsyncClient, str, Body, dict[str, str]], Coroutine[Any, Any, httpx.Response]
]


def too_large(limit: int) -> dict[str, str]:
    return {"detail": f"Request body is larger than the limit of {limit} bytes"}


@pytest.mark.parametrize("path", CALLBACKS)
@pytest.mark.parametrize(
    ("send", "most_pulled"),
    [(chunked, PLATFORM_CALLBACK_MAX_BYTES + CHUNK), (announced, 0)],
    ids=["chunked", "announced"],
)
async def test_a_body_over_1_mib_is_refused_on_callbacks_before_it_is_read(
    client: httpx.AsyncClient, path: str, send: Sender, most_pulled: int
) -> None:
    body = Body(CHUNKED_TOTAL)
    response = await send(client, path, body, CALLBACK_HEADERS)
    assert response.status_code == 413
    assert response.json() == too_large(PLATFORM_CALLBACK_MAX_BYTES)
    assert response.headers["connection"] == "close"
    # An announced body is refused unread; of a chunked one, the message that passed the
    # limit is the last one pulled.
    assert body.pulled <= most_pulled


async def test_rest_and_graphql_cut_chunked_bodies_at_their_limit(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    json_headers = {**acme.headers, "Content-Type": "application/json"}
    rest = Body(CHUNKED_TOTAL, b'{"phone_number": "+14155550100", "name": "')
    response = await chunked(client, "/api/v1/contacts", rest, json_headers)
    assert response.status_code == 413
    assert response.json() == too_large(MIB)
    assert rest.pulled <= MIB + CHUNK

    agents = Body(CHUNKED_TOTAL, b'{"name": "')
    response = await chunked(client, "/api/v1/agents", agents, json_headers)
    assert response.status_code == 413
    assert response.json() == {"error": 413, "message": too_large(MIB)["detail"]}
    assert agents.pulled <= MIB + CHUNK

    graphql = Body(CHUNKED_TOTAL, b'{"query": "')
    response = await chunked(client, "/graphql", graphql, json_headers)
    assert response.status_code == 413
    assert response.json() == {
        "errors": [{"message": too_large(MIB)["detail"], "extensions": {"code": "body_too_large"}}]
    }
    assert graphql.pulled <= MIB + CHUNK


async def test_rest_and_graphql_refuse_announced_bodies_unread(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    json_headers = {**acme.headers, "Content-Type": "application/json"}
    for path in ("/api/v1/contacts", "/graphql"):
        body = Body(CHUNKED_TOTAL)
        response = await announced(client, path, body, json_headers)
        assert response.status_code == 413, path
        assert body.pulled == 0
    # Anonymous callers are refused before any credential is looked at.
    body = Body(CHUNKED_TOTAL)
    response = await announced(client, "/graphql", body, {"Content-Type": "application/json"})
    assert response.status_code == 413
    assert body.pulled == 0


async def test_routes_that_take_no_body_are_bounded_too(client: httpx.AsyncClient) -> None:
    body = Body(CHUNKED_TOTAL)
    response = await client.request("GET", "/healthz", content=body.chunks())
    assert response.status_code == 200  # the route never reads it: nothing was pulled
    assert body.pulled == 0
    body = Body(CHUNKED_TOTAL)
    response = await client.request("POST", "/healthz", content=body.chunks())
    assert response.status_code == 405
    assert body.pulled <= MIB + CHUNK


async def test_an_upload_streams_up_to_its_own_larger_limit(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    """Uploads keep their limit (3 MiB here), chunked or announced, and 413 beyond it."""
    boundary = b"b0undary"
    head = (
        b"--" + boundary + b"\r\n"
        b'Content-Disposition: form-data; name="file"; filename="notes.txt"\r\n\r\n'
    )
    tail = b"\r\n--" + boundary + b"--\r\n"
    headers = {**acme.headers, "Content-Type": f"multipart/form-data; boundary={boundary.decode()}"}

    async def upload(size: int) -> AsyncIterator[bytes]:
        yield head
        for _ in range(size // CHUNK):
            yield b"a" * CHUNK
        yield tail

    accepted = await client.post(
        "/api/v1/knowledge-base/upload", content=upload(2 * MIB), headers=headers
    )
    assert accepted.status_code == 201, accepted.text
    download = await client.get(
        f"/api/v1/knowledge-base/{accepted.json()['id']}/download", headers=acme.headers
    )
    assert len(download.content) == 2 * MIB

    refused = await client.post(
        "/api/v1/knowledge-base/upload", content=upload(5 * MIB), headers=headers
    )
    assert refused.status_code == 413
    assert refused.json() == {"detail": "The file is larger than the upload limit of 3 MiB"}

    announced_upload = await client.post(
        "/api/v1/knowledge-base/upload",
        content=upload(0),
        headers={**headers, "Content-Length": str(4 * MIB)},
    )
    assert announced_upload.status_code == 413
    assert announced_upload.json() == {
        "detail": "The file is larger than the upload limit of 3 MiB"
    }
