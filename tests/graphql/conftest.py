"""Clients of the app with GraphQL's fast paths set, whatever the environment says: the plans'
equivalence tests compare planning on and off, on either executor."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.graphql import planned, view
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The generated plan cases run on both executors on SQLite, and on the fast executor on
    PostgreSQL: an executor is the same code on either database, and the plans' SQL meets
    PostgreSQL through the fast-executor cases (a quarter of the suite's longest GraphQL
    module). tests/graphql/test_planned.py keeps the whole matrix."""
    skipped = [
        item
        for item in items
        if item.nodeid.startswith("tests/graphql/test_planned_generated.py::")
        and "postgresql-graphql-core-executor" in item.nodeid
    ]
    if skipped:
        config.hook.pytest_deselected(items=skipped)
        kept = set(map(id, skipped))
        items[:] = [item for item in items if id(item) not in kept]


@pytest.fixture
def plan_answers(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per GraphQL request from here on: whether a compiled plan answered it."""
    answered: list[bool] = []
    original_run = planned.run_plan

    async def spy(*args: Any) -> Any:
        result = await original_run(*args)
        answered.append(result is not None)
        return result

    monkeypatch.setattr(view, "run_plan", spy)
    return answered
