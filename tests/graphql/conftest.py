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
async def planning_clients(
    resources: Resources, fast_executor: bool
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """The data served with SWITCHBOARD_GRAPHQL_PLANNING on and off, whatever the environment
    says, both on the executor of `fast_executor`."""
    on = client_with(resources, graphql_planning=True, graphql_fast_executor=fast_executor)
    off = client_with(resources, graphql_planning=False, graphql_fast_executor=fast_executor)
    async with on, off:
        yield on, off
