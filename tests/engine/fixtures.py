"""Fixtures of the tests that run the whole stack (API, outbox, worker) on each database and
broker, with the fake providers (OpenAI, Anthropic, Groq) behind the conversation engine.

A test module takes them by name:

    backend = backend_fixture("agent_tests")       # its databases, named after the module
    engine = engine_fixture(engine_turn_deadline_seconds=10.0)   # the stack, these settings

and `providers` (import it) is the fake providers' server, one per module, reset before and
after every test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ENGINE_BACKENDS, engine_backend
from tests.engine.fakes import FakeProviders, running_providers
from tests.webhooks.test_delivery_engine import Engine, running_engine

Backend = tuple[str, str | None]


def backend_fixture(name: str) -> Callable[..., Iterator[Backend]]:
    """The module's `backend` fixture: each database (and broker) of ENGINE_BACKENDS, its
    files named after `name`."""

    @pytest.fixture(scope="module", params=ENGINE_BACKENDS)
    def backend(
        request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[Backend]:
        yield from engine_backend(request, tmp_path_factory, name)

    return backend


@pytest.fixture(scope="module")
def providers() -> Iterator[tuple[FakeProviders, str]]:
    with running_providers() as running:
        yield running


def engine_fixture(**settings: Any) -> Callable[..., AsyncIterator[Engine]]:
    """The module's `engine` fixture: the stack on `backend` with these settings, the fake
    providers reset before and after each test."""

    @pytest.fixture
    async def engine(
        backend: Backend, tmp_path: Path, providers: tuple[FakeProviders, str]
    ) -> AsyncIterator[Engine]:
        url, redis_url = backend
        providers[0].reset()
        async with running_engine(url, tmp_path, redis_url=redis_url, **settings) as running:
            yield running
        providers[0].reset()

    return engine


def stack_fixture(**settings: Any) -> Callable[..., AsyncIterator[Engine]]:
    """The module's `engine` fixture for tests that need no model: the stack on `backend`."""

    @pytest.fixture
    async def engine(backend: Backend, tmp_path: Path) -> AsyncIterator[Engine]:
        url, redis_url = backend
        async with running_engine(url, tmp_path, redis_url=redis_url, **settings) as running:
            yield running

    return engine
