"""Clients of the app with GraphQL's fast paths set, whatever the environment says: the plans'
equivalence tests compare planning on and off, on either executor."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from app.resources import Resources
from tests.conftest import client_with


@pytest.fixture(params=[True, False], ids=["fast-executor", "graphql-core-executor"])
def fast_executor(request: pytest.FixtureRequest) -> bool:
    """The executor behind both sides (app/graphql/execution.py, on or off)."""
    return bool(request.param)


@pytest.fixture
async def planned_client(
    resources: Resources, fast_executor: bool
) -> AsyncIterator[httpx.AsyncClient]:
    """The data served with SWITCHBOARD_GRAPHQL_PLANNING on, whatever the environment says."""
    async with client_with(
        resources, graphql_planning=True, graphql_fast_executor=fast_executor
    ) as client:
        yield client


@pytest.fixture
async def unplanned_client(
    resources: Resources, fast_executor: bool
) -> AsyncIterator[httpx.AsyncClient]:
    """The same data served with SWITCHBOARD_GRAPHQL_PLANNING off."""
    async with client_with(
        resources, graphql_planning=False, graphql_fast_executor=fast_executor
    ) as client:
        yield client
