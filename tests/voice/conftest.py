"""Live calls end to end: the service on a real socket (API, media streams, an in-process job
worker) on a committed SQLite file or PostgreSQL database, a fake carrier (REST), fake
speech providers and fake LLM providers on their own sockets, and a media-stream client
playing the carrier's part."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.auth.service import create_api_key
from app.calls.telephony import INCOMING_PATH
from app.config import Settings
from app.db.engine import create_engine, create_sessionmaker
from app.kit import outbox
from app.kit.outbox import OutboxJob
from app.main import create_app
from tests.calls.fake_carrier import (
    ACCOUNT_SID,
    AUTH_TOKEN,
    FakeCarrier,
    RunningCarrier,
    signed_status,
)
from tests.conftest import TEST_SECRET, Tenant, TenantFactory, fresh_database
from tests.engine.fakes import FakeProviders, running_providers
from tests.voice.fakes import FakeSpeech, running_speech
from tests.voice.media_client import MediaStreamClient
from tests.webhooks.test_delivery_engine import engine_settings
from workers.broker import InProcessWorker, install_job_engine

TOKEN_PATTERN = re.compile(r'<Parameter name="token" value="([^"]+)"/>')
URL_PATTERN = re.compile(r'<Stream url="([^"]+)">')
CALLER = "+14155550142"
SERVICE_NUMBER = "+14155550100"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def committed_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with fresh_database(request.param, tmp_path_factory.mktemp("voice"), "sb_voice") as url:
        yield url


@pytest.fixture(scope="module")
def carrier() -> Iterator[RunningCarrier]:
    with RunningCarrier() as running:
        yield running


@pytest.fixture(scope="module")
def speech_server() -> Iterator[tuple[FakeSpeech, str]]:
    with running_speech() as served:
        yield served


@pytest.fixture(scope="module")
def llm_server() -> Iterator[tuple[FakeProviders, str]]:
    with running_providers() as served:
        yield served


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Voice:
    settings: Settings
    url: str
    client: httpx.AsyncClient
    sessionmaker: async_sessionmaker[AsyncSession]
    tenants: TenantFactory
    carrier: FakeCarrier
    speech: FakeSpeech
    speech_url: str
    llm: FakeProviders
    llm_url: str

    async def live_tenant(self) -> Tenant:
        tenant = await self.tenants.organization()
        async with self.sessionmaker() as session:
            if session.get_bind().dialect.name == "sqlite":
                await session.connection(execution_options={"sqlite_begin": "IMMEDIATE"})
            created = await create_api_key(
                session,
                tenant.organization_id,
                name="live",
                scopes=["full_access"],
                secret_key=TEST_SECRET,
                livemode=True,
            )
            await session.commit()
        return Tenant(tenant.organization_id, created.secret, created.key.id)

    async def agent(self, tenant: Tenant, **config: Any) -> str:
        body = {"welcome_message": "Hi.", **config}
        response = await self.client.post(
            "/api/v1/agents", json={"name": "Ava", "agent_config": body}, headers=tenant.headers
        )
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    async def credential(self, tenant: Tenant, provider: str, api_key: str, base_url: str) -> None:
        response = await self.client.put(
            f"/api/v1/provider-credentials/{provider}",
            json={"api_key": api_key, "base_url": base_url},
            headers=tenant.headers,
        )
        assert response.status_code == 200, response.text

    async def ears(self, tenant: Tenant, key: str, *lines: str) -> None:
        """The organization's Deepgram key (on the fake), which will hear `lines`."""
        self.speech.scripts[key] = list(lines)
        await self.credential(tenant, "deepgram", key, self.speech_url)

    async def dispatch(self, tenant: Tenant, agent_id: str, to: str = CALLER) -> httpx.Response:
        return await self.client.post(
            "/api/v1/calls",
            json={"agent_id": agent_id, "to_number": to, "from_number": SERVICE_NUMBER},
            headers=tenant.headers,
        )

    async def place(self, tenant: Tenant, agent_id: str) -> tuple[str, dict[str, Any]]:
        """An outbound live call, placed with the fake carrier: (call log id, the carrier's
        call with its TwiML)."""
        response = await self.dispatch(tenant, agent_id)
        assert response.status_code == 201, response.text
        call_log_id = str(response.json()["id"])
        deadline = time.monotonic() + 15
        while True:
            with self.carrier.lock:
                placed = [
                    c
                    for c in self.carrier.calls.values()
                    if call_log_id in c.get("status_callback", "")
                ]
            if placed:
                return call_log_id, placed[0]
            assert time.monotonic() < deadline, "the call was never placed"
            await asyncio.sleep(0.02)

    async def answer(
        self, placed: dict[str, Any], *, headers: dict[str, str] | None = None
    ) -> MediaStreamClient:
        """The callee answers: the carrier opens the media stream its TwiML names."""
        twiml = placed["twiml"]
        url = URL_PATTERN.search(twiml)
        token = TOKEN_PATTERN.search(twiml)
        assert url, twiml
        assert token, twiml
        client = MediaStreamClient(url.group(1), call_sid=placed["sid"])
        self.carrier.update_hooks.append(client.carrier_ended(asyncio.get_running_loop()))
        await client.open(token.group(1), headers=headers)
        return client

    async def ring(self, to: str = SERVICE_NUMBER) -> tuple[str, str]:
        """An inbound call to `to`: (the TwiML answered, the carrier's call SID)."""
        sid = "CA" + f"{time.monotonic_ns():032x}"
        self.carrier.add_call(sid, to, CALLER)
        url = self.settings.telephony_public_url.rstrip("/") + INCOMING_PATH  # type: ignore[union-attr]
        form, headers = signed_status(url, {"CallSid": sid, "From": CALLER, "To": to})
        response = await self.client.post(INCOMING_PATH, data=form, headers=headers)
        assert response.status_code == 200, response.text
        return response.text, sid

    async def call_log(self, tenant: Tenant, call_log_id: str) -> dict[str, Any]:
        response = await self.client.get(f"/api/v1/call-logs/{call_log_id}", headers=tenant.headers)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def ended(self, tenant: Tenant, call_log_id: str, seconds: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + seconds
        while True:
            log = await self.call_log(tenant, call_log_id)
            if log["status"] != "in-progress":
                return log
            assert time.monotonic() < deadline, f"call still in progress: {log}"
            await asyncio.sleep(0.05)


class _Served:
    """The service on a fixed loopback port, in a thread of its own."""

    def __init__(self, app: Any, port: int) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            assert self.thread.is_alive(), "server did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


@asynccontextmanager
async def running_voice(
    url: str,
    tmp_path: Path,
    carrier: RunningCarrier,
    speech: tuple[FakeSpeech, str],
    llm: tuple[FakeProviders, str],
    **overrides: Any,
) -> AsyncIterator[Voice]:
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    settings = engine_settings(
        url,
        tmp_path,
        telephony_api_url=carrier.url,
        telephony_account_sid=ACCOUNT_SID,
        telephony_auth_token=AUTH_TOKEN,
        telephony_public_url=public,
        storage_url=f"file://{tmp_path / 'objects'}",
        **overrides,
    )
    database = create_engine(url, pool_size=2)
    sessionmaker = create_sessionmaker(database)
    broker, _runtime = install_job_engine(settings)
    worker = InProcessWorker(broker, threads=settings.worker_threads)
    worker.start()
    served = _Served(create_app(settings), port)
    served.start()
    carrier.carrier.update_hooks.clear()
    carrier.carrier.update_delay = 0.0
    speech[0].reset()
    llm[0].reset()
    try:
        async with httpx.AsyncClient(base_url=public, timeout=20) as client:
            yield Voice(
                settings,
                public,
                client,
                sessionmaker,
                TenantFactory(sessionmaker),
                carrier.carrier,
                speech[0],
                speech[1],
                llm[0],
                llm[1],
            )
    finally:
        served.stop()
        worker.stop()
        outbox.set_dispatcher(None)
        broker.close()
        async with sessionmaker() as session:
            await session.execute(delete(OutboxJob))
            await session.commit()
        await database.dispose()


@pytest.fixture
async def voice(
    committed_url: str,
    tmp_path: Path,
    carrier: RunningCarrier,
    speech_server: tuple[FakeSpeech, str],
    llm_server: tuple[FakeProviders, str],
) -> AsyncIterator[Voice]:
    async with running_voice(committed_url, tmp_path, carrier, speech_server, llm_server) as v:
        yield v


async def events_of(voice: Voice, call_log_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The events recorded about a call, oldest first."""
    from sqlalchemy import select

    from app.events.models import Event

    async with voice.sessionmaker() as session:
        rows = (
            await session.execute(select(Event.type, Event.data).order_by(Event.created_at))
        ).all()
    return [
        (kind, data)
        for kind, data in rows
        if isinstance(data, dict)
        and (data.get("call_log_id") == call_log_id or data.get("id") == call_log_id)
    ]


@pytest.fixture
async def strict_voice(
    committed_url: str,
    tmp_path: Path,
    carrier: RunningCarrier,
    speech_server: tuple[FakeSpeech, str],
    llm_server: tuple[FakeProviders, str],
) -> AsyncIterator[Voice]:
    """Short limits: 1.5 s of caller silence ends a call, one live call per organization."""
    async with running_voice(
        committed_url,
        tmp_path,
        carrier,
        speech_server,
        llm_server,
        voice_silence_timeout_seconds=1.5,
        voice_max_concurrent_calls=1,
    ) as v:
        yield v
