"""Quick reply fixtures: the API with its cache in Redis (TEST_REDIS_URL), and helpers."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from app.main import create_app
from app.resources import Resources
from tests.conftest import GRAPHQL, Tenant, service_unavailable

BASE = "/api/v1/quick-replies"
EXPAND = "query($shortcut: String!) { quickReplyExpansion(shortcut: $shortcut) }"


async def create(
    client: httpx.AsyncClient, tenant: Tenant, shortcut: str = "/hi", content: str = "Hello!"
) -> dict[str, Any]:
    response = await client.post(
        BASE, json={"shortcut": shortcut, "content": content}, headers=tenant.headers
    )
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


async def expand(client: httpx.AsyncClient, tenant: Tenant, shortcut: str) -> str | None:
    response = await client.post(
        GRAPHQL,
        json={"query": EXPAND, "variables": {"shortcut": shortcut}},
        headers=tenant.headers,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert "errors" not in body, body
    return body["data"]["quickReplyExpansion"]  # type: ignore[no-any-return]


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    """A client on TEST_REDIS_URL. Nothing is flushed: every key these tests write is under an
    organization created by the test, so they cannot meet another test's keys."""
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        service_unavailable("Redis", RuntimeError("TEST_REDIS_URL is not set"))
    assert url is not None
    client = Redis.from_url(url)
    try:
        await client.ping()
    except Exception as exc:
        await client.aclose()
        service_unavailable("Redis", exc)
    yield client
    await client.aclose()


@pytest.fixture
async def redis_client(resources: Resources, redis: Redis) -> AsyncIterator[httpx.AsyncClient]:
    """The API of `client`, in the same transaction, with REDIS_URL's cache."""
    app = create_app(resources=dataclasses.replace(resources, redis=redis))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client
