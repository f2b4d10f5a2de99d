"""Schemathesis against /api/v1/openapi.json, served by a real uvicorn on each backend.

Every operation is fuzzed with positive and negative data under a full_access key, then with a
key lacking the scope (403 expected) and with no or bad credentials (401 expected). Each
response must not be a 5xx and must conform to the document: status code, content type and
body schema. Failures are collected across operations and reported together, each with a
curl command that reproduces it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import time
import urllib.parse
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import httpx
import jsonschema_rs
import orjson
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import AcceptedNegativeData, FailureGroup
from schemathesis.core.parameters import ParameterLocation
from schemathesis.core.result import Ok
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy.engine import make_url

from app.auth.service import create_api_key
from app.calls.schemas import CallLogRecord
from app.calls.service import record_call_log
from app.db.engine import create_engine, create_sessionmaker
from app.integrations.whatsapp import payloads as whatsapp_payloads
from app.main import create_app
from app.organizations.service import create_organization, create_user
from app.templates.models import MessageTemplate
from tests.conftest import TEST_SECRET, fresh_database, make_settings
from tests.live_server import ServerThread

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# With a credential that may do everything, the document must also say exactly what the server
# accepts: a request it calls valid is not refused, one it calls invalid is not accepted.
AGREEMENT_CHECKS = [*CHECKS, positive_data_acceptance, negative_data_rejection]
# Per pass (each test starts its own): a safety cap against a hung server, far above the
# ~35 s a whole run takes on a quiet machine (a loaded one must not cut the fuzzing short,
# nor leave a later pass with nothing to send).
TIME_BUDGET_SECONDS = 600.0
# Operations the fuzzer cannot be expected to make succeed: a reply needs a ticket with a
# channel and an open 24-hour window and exactly one of text or template; a template delete
# needs a seeded template no earlier case deleted; an upload needs a file whose extension and
# bytes agree. Their own tests cover their success paths.
SUCCESS_NEEDS_STATE = frozenset(
    {
        "POST /api/v1/inbox/tickets/{ticket_id}/messages",
        "DELETE /api/v1/templates/{template_id}",
        "POST /api/v1/knowledge-base/upload",
        # Two path ids that must name a run of that agent; one generated id fills both.
        "GET /api/v1/agents/{agent_id}/tests/{test_id}",
        # A finished call with a transcript whose agent defines analysis settings.
        "POST /api/v1/call-logs/{call_log_id}/analyze",
        # An import needs a CSV file with a header row of known columns.
        "POST /api/v1/contacts/imports",
        # An import id must name an import of the organization; none is seeded.
        "GET /api/v1/contacts/imports/{import_id}",
        "GET /api/v1/contacts/imports/{import_id}/errors.csv",
    }
)
# Examples per operation (and generation mode, with the scope). `make test` keeps the suite
# within its time budget; `FUZZ_SCALE=4 pytest tests/test_openapi_fuzz.py` fuzzes deeper.
FUZZ_SCALE = float(os.environ.get("FUZZ_SCALE", "1"))


def _examples(count: int) -> int:
    return max(1, round(count * FUZZ_SCALE))


EXAMPLES_WITH_SCOPE = _examples(14)
EXAMPLES_WITHOUT_SCOPE = _examples(4)
EXAMPLES_WITHOUT_CREDENTIALS = _examples(4)
EXAMPLES_WITHOUT_OPTIONAL_HEADERS = _examples(3)
# Writes last, deletes at the very end, so reads and updates meet the rows seeded first.
METHOD_ORDER = {"GET": 0, "POST": 1, "PUT": 2, "PATCH": 3, "DELETE": 4}


# --------------------------------------------------------------------------- the live server


@dataclass
class Target:
    backend: str
    base_url: str
    organization_id: str
    full_access_key: str
    agents_read_key: str
    # Lacks both agents scopes: the 403 pass of the agents routes.
    webhooks_admin_key: str
    # Contacts of the caller's organization, and of another one (must answer 404).
    contact_ids: list[str]
    foreign_contact_ids: list[str]
    # Webhook subscriptions likewise (path parameter `webhook_id`).
    webhook_ids: list[str]
    foreign_webhook_ids: list[str]
    # Agents likewise (path parameter `agent_id`).
    agent_ids: list[str]
    foreign_agent_ids: list[str]
    deadline: float
    budget_exhausted: list[str] = field(default_factory=list)
    # Call logs have no REST create (calls arrive with the voice issue): seeded by the service.
    call_log_ids: list[str] = field(default_factory=list)
    foreign_call_log_ids: list[str] = field(default_factory=list)
    # Inbox tickets (path parameter `ticket_id`), and the users tickets can be assigned to.
    ticket_ids: list[str] = field(default_factory=list)
    foreign_ticket_ids: list[str] = field(default_factory=list)
    user_ids: list[str] = field(default_factory=list)
    # Channels and quick replies (path parameters `channel_id`, `quick_reply_id`).
    channel_ids: list[str] = field(default_factory=list)
    foreign_channel_ids: list[str] = field(default_factory=list)
    quick_reply_ids: list[str] = field(default_factory=list)
    foreign_quick_reply_ids: list[str] = field(default_factory=list)
    document_ids: list[str] = field(default_factory=list)
    foreign_document_ids: list[str] = field(default_factory=list)
    # Message templates (path parameter `template_id`; library entries by name).
    template_ids: list[str] = field(default_factory=list)
    foreign_template_ids: list[str] = field(default_factory=list)
    # Tickets of a WhatsApp conversation (a channel, an open 24-hour window): replies work.
    conversation_ticket_ids: list[str] = field(default_factory=list)
    # Agent phone number assignments (path parameter `phone_number_id`).
    phone_number_ids: list[str] = field(default_factory=list)
    foreign_phone_number_ids: list[str] = field(default_factory=list)
    # An APPROVED template and campaigns in each state a move starts from (`campaign_id`).
    approved_template_ids: list[str] = field(default_factory=list)
    campaign_ids: list[str] = field(default_factory=list)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def database_url_for_fuzz(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A freshly migrated database of its own (the fuzzer commits; nothing is rolled back)."""
    with fresh_database(request.param, tmp_path_factory.mktemp("fuzz"), "sb_fuzz") as url:
        yield url


async def _seed_credentials(database_url: str) -> dict[str, str]:
    engine = create_engine(database_url, null_pool=True)
    try:
        async with create_sessionmaker(engine)() as session:
            acme = await create_organization(session, "Fuzz Acme")
            full = await create_api_key(
                session, acme.id, name="fuzz", scopes=["full_access"], secret_key=TEST_SECRET
            )
            scoped = await create_api_key(
                session, acme.id, name="fuzz-agents", scopes=["agents:read"], secret_key=TEST_SECRET
            )
            webhooks_admin = await create_api_key(
                session,
                acme.id,
                name="fuzz-webhooks",
                scopes=["webhooks:admin"],
                secret_key=TEST_SECRET,
            )
            globex = await create_organization(session, "Fuzz Globex")
            other = await create_api_key(
                session, globex.id, name="other", scopes=["full_access"], secret_key=TEST_SECRET
            )
            await session.commit()
    finally:
        await engine.dispose()
    return {
        "organization_id": acme.id,
        "full_access": full.secret,
        "agents_read": scoped.secret,
        "webhooks_admin": webhooks_admin.secret,
        "other_org": other.secret,
    }


def _seed_contacts(base_url: str, api_key: str, count: int) -> list[str]:
    ids = []
    with httpx.Client(base_url=base_url, headers=_bearer(api_key), timeout=10) as http:
        for number in range(count):
            response = http.post(
                "/api/v1/contacts",
                json={
                    "phone_number": f"+1415555{number:04d}",
                    "name": f"Seed {number}",
                    "tags": ["seed", f"n{number}"],
                    "custom_fields": {"plan": "pro", "seats": number},
                },
            )
            assert response.status_code == 200, response.text
            ids.append(response.json()["id"])
    return ids


def _seed_webhooks(base_url: str, api_key: str, count: int) -> list[str]:
    ids = []
    with httpx.Client(base_url=base_url, headers=_bearer(api_key), timeout=10) as http:
        for number in range(count):
            # A public IP literal: the SSRF guard accepts it without a DNS lookup.
            response = http.post(
                "/api/v1/webhooks",
                json={"url": f"https://93.184.216.34/seed/{number}", "events": ["lead.created"]},
            )
            assert response.status_code == 200, response.text
            ids.append(response.json()["id"])
    return ids


async def _seed_call_logs(database_url: str, organization_id: str | None, count: int) -> list[str]:
    """Call logs of `organization_id`, or of a new organization when None (foreign ones)."""
    engine = create_engine(database_url, null_pool=True)
    try:
        async with create_sessionmaker(engine)() as session:
            if organization_id is None:
                organization_id = (await create_organization(session, "Fuzz Initech")).id
            owner = SimpleNamespace(organization_id=organization_id, livemode=False)
            ids = []
            for number in range(count):
                record = CallLogRecord(
                    call_id=f"CA-seed-{number}",
                    from_number="+14155550100",
                    to_number=f"+1415555{number:04d}",
                    direction="outbound",
                    status="completed",
                    transcript=[{"speaker": "agent", "text": "Hello", "timestamp": 0.5}],
                )
                ids.append((await record_call_log(session, owner, record)).id)
            await session.commit()
    finally:
        await engine.dispose()
    return ids


def _seed_tickets(base_url: str, api_key: str, contact_ids: list[str]) -> list[str]:
    """An open ticket for each of these contacts (creation needs the organization_id header)."""
    ids = []
    with httpx.Client(base_url=base_url, headers=_bearer(api_key), timeout=10) as http:
        for contact_id in contact_ids:
            organization_id = http.get(f"/api/v1/contacts/{contact_id}").json()["organization_id"]
            response = http.post(
                "/api/v1/inbox/tickets",
                json={"contact_id": contact_id},
                headers={"organization_id": organization_id},
            )
            assert response.status_code == 201, response.text
            ids.append(response.json()["id"])
    return ids


async def _seed_user(database_url: str, organization_id: str) -> str:
    engine = create_engine(database_url, null_pool=True)
    try:
        async with create_sessionmaker(engine)() as session:
            user = await create_user(session, organization_id, "agent@fuzz.test", "fuzz-password-1")
            await session.commit()
    finally:
        await engine.dispose()
    return user.id


def _seed_created(
    base_url: str, api_key: str, path: str, bodies: list[dict[str, Any]]
) -> list[str]:
    ids = []
    with httpx.Client(base_url=base_url, headers=_bearer(api_key), timeout=10) as http:
        for body in bodies:
            response = http.post(path, json=body)
            assert response.status_code == 201, response.text
            ids.append(response.json()["id"])
    return ids


def _seed_channels(base_url: str, api_key: str, count: int, first: int = 0) -> list[str]:
    """`count` channels, numbers `first` on (a number id belongs to one organization)."""
    bodies = [
        {
            "display_phone_number": f"+1415555{number:04d}",
            "phone_number_id": f"seed{number}",
            "business_account_id": "waba1",
            "access_token": f"seed-token-{number}",
        }
        for number in range(first, first + count)
    ]
    return _seed_created(base_url, api_key, "/api/v1/channels", bodies)


def _seed_templates(base_url: str, api_key: str, channel_id: str, count: int) -> list[str]:
    bodies = [
        {
            "channel_id": channel_id,
            "name": f"seed_template_{number}",
            "language": "en_US",
            "category": "UTILITY",
            "components": [{"type": "BODY", "text": f"Seed {number}"}],
        }
        for number in range(count)
    ]
    return _seed_created(base_url, api_key, "/api/v1/templates", bodies)


def _seed_conversation(base_url: str, app_secret: str, phone_number_id: str) -> None:
    """An inbound WhatsApp message (signed as the platform signs it): a ticket on a channel
    whose 24-hour window is open, so replies can succeed."""
    body = orjson.dumps(
        whatsapp_payloads.inbound_text(
            "waba1",
            phone_number_id,
            "+14155550000",
            f"wamid.seed{phone_number_id}",
            "+14155550199",
            "Hello",
        )
    )
    signature = whatsapp_payloads.sign(app_secret, body)
    response = httpx.post(
        f"{base_url}/webhooks/whatsapp",
        content=body,
        headers={whatsapp_payloads.SIGNATURE_HEADER: signature},
        timeout=10,
    )
    assert response.status_code == 200, response.text


async def _seed_template(database_url: str, organization_id: str, channel_id: str) -> str:
    """An APPROVED test-mode template, as the simulator settles one (campaigns need one)."""
    engine = create_engine(database_url, null_pool=True)
    try:
        async with create_sessionmaker(engine)() as session:
            template = MessageTemplate(
                organization_id=organization_id,
                channel_id=channel_id,
                business_account_id="waba1",
                platform_template_id="1000",
                name="seed_template",
                language="en_US",
                category="UTILITY",
                status="APPROVED",
                components=[{"type": "BODY", "text": "Hello"}],
                quality_score="GREEN",
                livemode=False,
            )
            session.add(template)
            await session.commit()
            return template.id
    finally:
        await engine.dispose()


def _seed_campaigns(base_url: str, api_key: str, channel_id: str, template_id: str) -> list[str]:
    """Drafts, scheduled (far future) and paused campaigns: every move has a campaign to
    start from, several times over (the fuzzer deletes and cancels some)."""
    body = {
        "name": "Seed",
        "chat_phone_number_id": channel_id,
        "message_template_id": template_id,
        "audience_type": "all",
        "scheduled_at": "2099-01-01T00:00:00Z",
    }
    ids = _seed_created(base_url, api_key, "/api/v1/campaigns", [body] * 24)
    with httpx.Client(base_url=base_url, headers=_bearer(api_key), timeout=10) as http:
        for index, campaign_id in enumerate(ids[8:]):
            assert http.post(f"/api/v1/campaigns/{campaign_id}/launch").status_code == 200
            if index % 2:
                assert http.post(f"/api/v1/campaigns/{campaign_id}/pause").status_code == 200
    return ids


def _seed_quick_replies(base_url: str, api_key: str, count: int) -> list[str]:
    bodies = [{"shortcut": f"/seed{n}", "content": f"Seed {n}"} for n in range(count)]
    return _seed_created(base_url, api_key, "/api/v1/quick-replies", bodies)


def _seed_documents(base_url: str, api_key: str, count: int) -> list[str]:
    ids = []
    with httpx.Client(base_url=base_url, headers=_bearer(api_key), timeout=10) as http:
        for number in range(count):
            files = {"file": (f"seed{number}.txt", f"Seed document {number}".encode())}
            response = http.post("/api/v1/knowledge-base/upload", files=files)
            assert response.status_code == 201, response.text
            ids.append(response.json()["id"])
    return ids


def _seed_agents(base_url: str, api_key: str, count: int) -> list[str]:
    ids = []
    with httpx.Client(base_url=base_url, headers=_bearer(api_key), timeout=10) as http:
        for number in range(count):
            response = http.post(
                "/api/v1/agents",
                json={
                    "name": f"Seed agent {number}",
                    "agent_config": {"voice_settings": {"voice_id": f"v{number}", "name": "Seed"}},
                },
            )
            assert response.status_code == 201, response.text
            ids.append(response.json()["id"])
    return ids


def _seed_phone_numbers(
    base_url: str, api_key: str, agent_ids: list[str], count: int, first: int = 800
) -> list[str]:
    ids = []
    with httpx.Client(base_url=base_url, headers=_bearer(api_key), timeout=10) as http:
        for number in range(count):
            response = http.post(
                "/api/v1/phone-numbers",
                json={"phone_number": f"+1415555{first + number:04d}", "agent_id": agent_ids[0]},
            )
            assert response.status_code == 201, response.text
            ids.append(response.json()["id"])
    return ids


def _bearer(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


@pytest.fixture(scope="module")
def target(
    database_url_for_fuzz: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    backend = make_url(database_url_for_fuzz).get_backend_name()
    keys = asyncio.run(_seed_credentials(database_url_for_fuzz))
    call_log_ids = asyncio.run(_seed_call_logs(database_url_for_fuzz, keys["organization_id"], 5))
    foreign_call_log_ids = asyncio.run(_seed_call_logs(database_url_for_fuzz, None, 1))
    user_id = asyncio.run(_seed_user(database_url_for_fuzz, keys["organization_id"]))
    settings_ = make_settings(database_url_for_fuzz, tmp_path_factory.mktemp(f"fuzz-{backend}"))
    server = ServerThread(create_app(settings=settings_))
    base_url = server.start()
    try:
        target = Target(
            backend=backend,
            base_url=base_url,
            organization_id=keys["organization_id"],
            full_access_key=keys["full_access"],
            agents_read_key=keys["agents_read"],
            webhooks_admin_key=keys["webhooks_admin"],
            contact_ids=_seed_contacts(base_url, keys["full_access"], 5),
            foreign_contact_ids=_seed_contacts(base_url, keys["other_org"], 1),
            webhook_ids=_seed_webhooks(base_url, keys["full_access"], 5),
            foreign_webhook_ids=_seed_webhooks(base_url, keys["other_org"], 1),
            agent_ids=_seed_agents(base_url, keys["full_access"], 5),
            foreign_agent_ids=_seed_agents(base_url, keys["other_org"], 1),
            deadline=time.monotonic() + TIME_BUDGET_SECONDS,
            call_log_ids=call_log_ids,
            foreign_call_log_ids=foreign_call_log_ids,
        )
        # Two contacts keep no open ticket, so creating one can answer 201 as well as 200.
        target.ticket_ids = _seed_tickets(base_url, keys["full_access"], target.contact_ids[:3])
        target.foreign_ticket_ids = _seed_tickets(
            base_url, keys["other_org"], target.foreign_contact_ids
        )
        target.user_ids = [user_id]
        target.channel_ids = _seed_channels(base_url, keys["full_access"], 5)
        target.foreign_channel_ids = _seed_channels(base_url, keys["other_org"], 1, first=100)
        target.quick_reply_ids = _seed_quick_replies(base_url, keys["full_access"], 5)
        target.foreign_quick_reply_ids = _seed_quick_replies(base_url, keys["other_org"], 1)
        target.document_ids = _seed_documents(base_url, keys["full_access"], 5)
        target.foreign_document_ids = _seed_documents(base_url, keys["other_org"], 1)
        target.template_ids = _seed_templates(
            base_url, keys["full_access"], target.channel_ids[0], 5
        )
        target.foreign_template_ids = _seed_templates(
            base_url, keys["other_org"], target.foreign_channel_ids[0], 1
        )
        _seed_conversation(base_url, settings_.whatsapp_app_secret_value(), "seed0")
        with httpx.Client(base_url=base_url, headers=_bearer(keys["full_access"])) as http:
            tickets = http.get("/api/v1/inbox/tickets", params={"limit": 100}).json()["data"]
        target.conversation_ticket_ids = [t["id"] for t in tickets if t["chat_phone_number_id"]]
        # On an agent of their own: the fuzzer deletes the agents seeded first (and so, by cascade,
        # their numbers) before it reaches DELETE /phone-numbers/{id}.
        target.phone_number_ids = _seed_phone_numbers(
            base_url, keys["full_access"], _seed_agents(base_url, keys["full_access"], 1), 5
        )
        target.foreign_phone_number_ids = _seed_phone_numbers(
            base_url, keys["other_org"], target.foreign_agent_ids, 1, first=900
        )
        target.approved_template_ids = [
            asyncio.run(
                _seed_template(
                    database_url_for_fuzz, keys["organization_id"], target.channel_ids[0]
                )
            )
        ]
        target.campaign_ids = _seed_campaigns(
            base_url, keys["full_access"], target.channel_ids[0], target.approved_template_ids[0]
        )
        yield target
    finally:
        server.stop()


@pytest.fixture(scope="module")
def schema(target: Target) -> Any:
    loaded = schemathesis.openapi.from_url(f"{target.base_url}/api/v1/openapi.json")
    loaded.validate()
    return loaded


# --------------------------------------------------------------------------- the fuzzer


@dataclass
class Report:
    """First example of every distinct failure per operation, and the statuses seen."""

    failures: dict[tuple[str, str], str] = field(default_factory=dict)
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)

    def add(self, operation: str, title: str, example: str) -> None:
        self.failures.setdefault((operation, title), example)

    def seen(self, operation: str) -> dict[int, int]:
        return {status: n for (label, status), n in self.statuses.items() if label == operation}

    def fail_if_any(self, what: str) -> None:
        if not self.failures:
            return
        lines = [f"{len(self.failures)} distinct failure(s) {what}:"]
        for (operation, title), example in sorted(self.failures.items()):
            lines.append(f"\n=== {operation}: {title}\n{example.strip()}")
        pytest.fail("\n".join(lines), pytrace=False)


def _label(operation: Any) -> str:
    return f"{operation.method.upper()} {operation.path}"


def _operations(schema: Any) -> list[Any]:
    results = list(schema.get_all_operations())
    errors = [str(result.err()) for result in results if not isinstance(result, Ok)]
    assert not errors, errors
    operations = [result.ok() for result in results if isinstance(result, Ok)]
    assert operations, "the OpenAPI document has no operations"
    return sorted(operations, key=lambda op: (METHOD_ORDER.get(op.method.upper(), 9), op.path))


def _with_valid_phone(case: Any, phone: str) -> Any:
    """Most generated phone numbers are (rightly) refused with 400; some must get through."""
    if isinstance(case.body, dict):
        for name in ("phone_number", "display_phone_number", "to_number", "from_number"):
            if name in case.body:
                case.body[name] = phone
    return case


def _with_valid_url(case: Any, url: str) -> Any:
    """Generated webhook URLs name hosts that do not resolve (400); some must get through."""
    if isinstance(case.body, dict) and "url" in case.body:
        case.body["url"] = url
    return case


def _with_seeded_references(case: Any, target: Target, pick: int) -> Any:
    """Generated contact_id / user_id values name nothing (404); some must name seeded rows."""
    if isinstance(case.body, dict):
        if "contact_id" in case.body and target.contact_ids:
            case.body["contact_id"] = target.contact_ids[pick % len(target.contact_ids)]
        if "agent_id" in case.body and target.agent_ids:
            case.body["agent_id"] = target.agent_ids[pick % len(target.agent_ids)]
        if "user_id" in case.body and target.user_ids:
            case.body["user_id"] = target.user_ids[pick % len(target.user_ids)]
        if "channel_id" in case.body and target.channel_ids:
            case.body["channel_id"] = target.channel_ids[pick % len(target.channel_ids)]
        if "template_name" in case.body or ("text" in case.body and "channel_id" not in case.body):
            # A reply is text or a template, not both: some must be plain text.
            case.body.pop("template_name", None)
            case.body["text"] = str(case.body.get("text") or "Hello").lstrip("/") or "Hello"
        if "name" in case.body and "channel_id" in case.body:
            # Template names: lowercase, digits and underscores, unique per language.
            case.body["name"] = f"fuzz_{uuid.uuid4().hex[:12]}"
        if "chat_phone_number_id" in case.body and target.channel_ids:
            case.body["chat_phone_number_id"] = target.channel_ids[0]
        if "message_template_id" in case.body and target.approved_template_ids:
            case.body["message_template_id"] = target.approved_template_ids[0]
        if isinstance(case.body.get("audience_contact_ids"), list) and target.contact_ids:
            case.body["audience_contact_ids"] = target.contact_ids[:1]
    body_keys = case.body if isinstance(case.body, dict) else {}
    if isinstance(case.headers, dict) and ("channel_id" in body_keys or "text" in body_keys):
        # A generated Idempotency-Key is reused across cases: a fresh body would meet the
        # stored answer of another and be refused, so the aimed template writes go without.
        case.headers.pop("Idempotency-Key", None)
    if isinstance(case.query, dict) and "channel_id" in case.query and target.channel_ids:
        case.query["channel_id"] = target.channel_ids[pick % len(target.channel_ids)]
    return case


def _seeded_ids(operation: Any, target: Target) -> list[str]:
    if "{provider}" in operation.path:
        return ["openai", "anthropic", "cal_com", "google_calendar", "mistral"]
    if "{webhook_id}" in operation.path:
        return [*target.webhook_ids, *target.foreign_webhook_ids]
    if "{agent_id}" in operation.path:
        return [*target.agent_ids, *target.foreign_agent_ids]
    if "{call_log_id}" in operation.path:
        return [*target.call_log_ids, *target.foreign_call_log_ids]
    if operation.path.endswith("/{ticket_id}/messages"):
        return [*target.conversation_ticket_ids, *target.foreign_ticket_ids]
    if "{ticket_id}" in operation.path:
        return [*target.ticket_ids, *target.foreign_ticket_ids]
    if "{channel_id}" in operation.path:
        return [*target.channel_ids, *target.foreign_channel_ids]
    if "{quick_reply_id}" in operation.path:
        return [*target.quick_reply_ids, *target.foreign_quick_reply_ids]
    if "{campaign_id}" in operation.path:
        return target.campaign_ids
    if "{phone_number_id}" in operation.path:
        return [*target.phone_number_ids, *target.foreign_phone_number_ids]
    if "{document_id}" in operation.path:
        return [*target.document_ids, *target.foreign_document_ids]
    if "/library/{template_id}" in operation.path:
        return ["payment_reminder", "7300000000000005"]
    if "{template_id}" in operation.path:
        return [*target.template_ids, *target.foreign_template_ids]
    return [*target.contact_ids, *target.foreign_contact_ids]


def _strategies(
    operation: Any, target: Target, mode: GenerationMode, *, generated_ids: bool = True
) -> Any:
    """What schemathesis generates, and the same aimed at real data: the caller's own
    organization_id header, seeded ids (own, another organization's, unknown) and, for
    positive writes, valid phone numbers (a random one is, rightly, nearly always a 400).
    `generated_ids=False` keeps path ids to routable values only."""
    path_names = [parameter.name for parameter in operation.path_parameters]
    own_org = {"organization_id": target.organization_id}
    generated = []
    if generated_ids or not path_names:
        generated.append(operation.as_strategy(generation_mode=mode))
    aimed = []
    if path_names:
        for object_id in [*_seeded_ids(operation, target), str(uuid.uuid4())]:
            aimed.append(
                operation.as_strategy(
                    generation_mode=mode,
                    path_parameters=dict.fromkeys(path_names, object_id),
                    headers=own_org,
                )
            )
    else:
        aimed.append(operation.as_strategy(generation_mode=mode, headers=own_org))
    takes_channel = any(parameter.name == "channel_id" for parameter in operation.query)
    writes = operation.method.upper() in {"POST", "PUT", "PATCH"}
    if mode is GenerationMode.POSITIVE and (writes or takes_channel):
        phones = st.sampled_from([f"+1415555{n:04d}" for n in range(100, 200)])
        urls = st.sampled_from([f"https://93.184.216.{n}/hook" for n in range(1, 100)])
        picks = st.integers(min_value=0, max_value=99)
        with_phone = [
            st.tuples(strategy, phones, urls, picks).map(
                lambda args: _with_seeded_references(
                    _with_valid_url(_with_valid_phone(args[0], args[1]), args[2]), target, args[3]
                )
            )
            for strategy in [*generated, *aimed]
        ]
        # Weighted towards bodies that can succeed, so every handler is reached.
        # Bodies that can succeed come first and twice (hypothesis favours early branches), so
        # every handler is reached in every run; every generated form is still drawn.
        aimed_valid = with_phone[len(generated) :]
        return st.one_of([*aimed_valid, *with_phone, *generated, *aimed, *aimed_valid])
    return st.one_of([*generated, *aimed])


def _fuzz(
    target: Target,
    report: Report,
    operation: Any,
    strategy: Any,
    *,
    max_examples: int,
    headers: Callable[[], dict[str, str]],
    expected_status: int | None = None,
    checks: list[Any] = CHECKS,
) -> None:
    label = _label(operation)
    session = requests.Session()

    @settings(
        max_examples=max_examples,
        # The same cases on every run: a failure reproduces, and "never succeeded" cannot
        # depend on luck (it once did, for POST …/assign).
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        if time.monotonic() > target.deadline:
            if label not in target.budget_exhausted:
                target.budget_exhausted.append(label)
            return
        sent = headers()
        if "Authorization" not in sent:
            for name in list(case.headers or {}):
                if name.lower() == "authorization":
                    del case.headers[name]
        try:
            response = case.call(
                base_url=target.base_url, session=session, headers=sent, timeout=10
            )
        except requests.RequestException as exc:
            report.add(label, f"transport error {type(exc).__name__}", repr(exc))
            return
        report.statuses[(label, response.status_code)] += 1
        try:
            case.validate_response(
                response,
                checks=checks,
                headers=sent,
                transport_kwargs={"base_url": target.base_url, "headers": sent},
            )
        except FailureGroup as group:
            unexplained = [
                failure
                for failure in group.exceptions
                if not _explained(failure, response)
                and not _negation_never_sent(failure, case, response)
            ]
            for failure in unexplained:
                report.add(label, failure.title, str(group))
            if unexplained:
                return
        if expected_status is not None and response.status_code != expected_status:
            report.add(
                label,
                f"expected {expected_status}, got {response.status_code}",
                f"{case.as_curl_command(headers=sent)}\n-> {response.text[:500]}",
            )

    try:
        run()
    finally:
        session.close()


# Refusals of schema-valid requests that a JSON Schema cannot express; each is a rule stated
# in the parameter's description and in docs/api.md ("What the OpenAPI document cannot say").
# Matched on the exact message, so any other refusal of valid data still fails the test.
SEMANTIC_REFUSALS = re.compile(
    "|".join(
        [
            # A cursor must name an object of that list (a well-formed id of nothing is 400).
            r"(starting_after|ending_before): no such object",
            r"starting_after and ending_before cannot be used together",
            # libphonenumber's possible-number rules per country.
            r"Invalid phone number format or length",
            # The outbound URL guard resolves the host (DNS) and judges every address.
            r"URL (host could not be resolved|must not resolve to a private)",
            # A time zone must exist in the IANA database, not only look like a name.
            r"unknown timezone",
            # An Idempotency-Key names one request: the fuzzer reuses keys across bodies.
            r"Idempotency-Key was already used with a different request",
            # State machines: closing a ticket the fuzzer already closed.
            r"[Cc]annot \w+ \w+ in \w+ state",
            # A channel id must name one of the organization's channels.
            r"Channel/phone number not found",
            # A channel cannot be deleted while one of its campaigns may still send on it.
            r"Cannot delete channel: campaign .* is in \w+ state; cancel it first",
            # The channel's stored credential must be usable upstream (seeded ones are not).
            r"Could not obtain an access token for the channel",
            # A reply's template must be an APPROVED one of the ticket's channel.
            r"No APPROVED template named .* for this channel",
            # A campaign's audience fields follow its audience_type (on an update, the stored one).
            r"audience_(tags|contact_ids) is only accepted with audience_type (tags|manual)",
            r"audience_type (tags|manual) needs at least one (audience tag|contact id)",
            # An upload's bytes must be of the type its file name says (PDF, DOCX or TXT).
            r"Unsupported file type\. Please upload a PDF, DOCX or TXT file\.",
            # An agent's analysis_schema must be a valid JSON Schema that refers only within
            # itself, within 16 KiB.
            r"analysis_schema (is not a valid JSON Schema|may only refer within itself"
            r"|must serialize to at most)",
            # A contact import's file must be CSV text in UTF-8 with a usable header row.
            r"The file is (empty|not CSV text|not UTF-8 text)|The header row"
            r"|Duplicate columns|Missing required columns|Unknown columns"
            r"|default_region must be an ISO 3166",
            # Re-analysing a call needs a finished call with a transcript and an agent that
            # still exists and defines analysis settings.
            r"The call's agent (no longer exists|defines no analysis_schema)"
            r"|The call has no transcript|The call is still in progress",
            # Consent keywords: one text cannot be in both the opt-out and the opt-in list.
            r"A keyword cannot both opt out and opt in",
        ]
    )
)
# Headers this harness always sends itself: a mutation of them never reached the server.
_OVERRIDDEN_HEADERS = {"authorization", "organization_id"}
_NAMED = re.compile(r"`([^`]+)`|/properties/([A-Za-z_]+)")


def _explained(failure: Any, response: Any) -> bool:
    if isinstance(failure, RejectedPositiveData):
        return response.status_code == 400 and bool(SEMANTIC_REFUSALS.search(response.text))
    if isinstance(failure, AcceptedNegativeData):
        described = failure.message.split("Invalid component:", 1)
        if len(described) != 2 or " header" not in described[1]:
            return False
        lines = [line for line in described[1].splitlines() if line.strip()]
        names = {
            (quoted or pointed).lower()
            for line in lines
            for quoted, pointed in _NAMED.findall(line)
            if not (quoted or pointed).startswith(("format", "type", "pattern", "min", "max"))
        }
        return "header" in lines[0] and bool(names) and names <= _OVERRIDDEN_HEADERS
    return False


def _negation_never_sent(failure: Any, case: Any, response: Any) -> bool:
    """Accepted "invalid" data whose every mutation was lost on the way, so the request sent
    conforms to the document: a header this harness sends itself, a query parameter added
    with an empty array as its value (a form-exploded empty array is no parameter at all), or
    a body whose mutation another part of the schema still accepts."""
    if not isinstance(failure, AcceptedNegativeData) or case.meta is None:
        return False
    mutations = getattr(case.meta.phase.data, "mutations", None)
    if not mutations:
        return False
    query = urllib.parse.urlsplit(response.request.url).query
    sent = {name for name, _ in urllib.parse.parse_qsl(query, keep_blank_values=True)}
    only_documented_sent = sent <= {parameter.name for parameter in case.operation.query}
    for mutation in mutations:
        named = mutation.parameter or mutation.original_value
        if mutation.parameter_location is ParameterLocation.HEADER and (
            isinstance(named, str) and named.lower() in _OVERRIDDEN_HEADERS
        ):
            continue
        if (
            mutation.parameter_location is ParameterLocation.QUERY
            and mutation.keywords == ("additionalProperties",)
            and only_documented_sent
        ):
            continue
        if mutation.parameter_location is ParameterLocation.BODY and _body_conforms(case):
            continue  # e.g. one branch of an `anyOf` negated into another branch's type
        return False
    return True


def _body_conforms(case: Any) -> bool:
    """The JSON body sent is valid against the operation's documented request schema."""
    request_body = case.operation.definition.raw.get("requestBody") or {}
    documented = (request_body.get("content") or {}).get("application/json")
    if documented is None or not isinstance(case.body, dict | list):
        return False
    validator = jsonschema_rs.validator_for(
        {**documented["schema"], "components": case.operation.schema.raw_schema["components"]}
    )
    return bool(validator.is_valid(case.body))


def _start_budget(target: Target) -> None:
    target.deadline = time.monotonic() + TIME_BUDGET_SECONDS
    target.budget_exhausted.clear()


def _warn_if_budget_hit(target: Target) -> None:
    if target.budget_exhausted:
        warnings.warn(
            f"fuzz time budget ({TIME_BUDGET_SECONDS:.0f} s on {target.backend}) ran out; "
            f"not fully fuzzed: {', '.join(target.budget_exhausted)}",
            stacklevel=2,
        )


def test_fuzz_with_full_access(target: Target, schema: Any) -> None:
    report = Report()
    _start_budget(target)
    operations = _operations(schema)
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz(
                target,
                report,
                operation,
                _strategies(operation, target, mode),
                max_examples=EXAMPLES_WITH_SCOPE,
                # As `st run -H "organization_id: …"` would: the caller's own organization.
                headers=lambda: {
                    **_bearer(target.full_access_key),
                    "organization_id": target.organization_id,
                },
                checks=AGREEMENT_CHECKS,
            )
    _warn_if_budget_hit(target)
    report.fail_if_any(f"with a full_access key on {target.backend}")
    # The fuzzer got past validation into every handler at least once (but the operations
    # whose success needs state random input rarely meets: their own tests cover it).
    for operation in operations:
        if _label(operation) in SUCCESS_NEEDS_STATE:
            continue
        seen = report.seen(_label(operation))
        assert any(200 <= status < 300 for status in seen), (
            f"{_label(operation)} never succeeded while fuzzed; statuses seen: {seen}"
        )


def _required_headers(operation: Any) -> set[str]:
    return {parameter.name.lower() for parameter in operation.headers if parameter.is_required}


def _without_optional_headers(case: Any, required: set[str]) -> Any:
    if case.headers:  # a case-insensitive mapping
        for name in list(case.headers.keys()):
            if name.lower() not in required:
                del case.headers[name]
    return case


def test_fuzz_without_optional_headers(target: Target, schema: Any) -> None:
    """As a client generated from the document sends: the headers it calls required, and no
    other. A request the document allows must not be refused (a header the server needs but
    the document calls optional fails here)."""
    report = Report()
    _start_budget(target)
    for operation in _operations(schema):
        required = _required_headers(operation)
        own_org = {"organization_id": target.organization_id}
        _fuzz(
            target,
            report,
            operation,
            _strategies(operation, target, GenerationMode.POSITIVE).map(
                lambda case, required=required: _without_optional_headers(case, required)
            ),
            max_examples=EXAMPLES_WITHOUT_OPTIONAL_HEADERS,
            headers=lambda required=required, own_org=own_org: {  # type: ignore[misc]
                **_bearer(target.full_access_key),
                **(own_org if "organization_id" in required else {}),
            },
            checks=[*CHECKS, positive_data_acceptance],
        )
    _warn_if_budget_hit(target)
    report.fail_if_any(f"without optional headers on {target.backend}")
    assert report.statuses, "nothing was sent"


def _key_without_scope(operation: Any, target: Target) -> str:
    """agents:read lacks every scope but the agents' ones; the agents routes get a
    webhooks:admin key instead."""
    if operation.path.startswith(("/api/v1/agents", "/api/v1/phone-numbers")):
        return target.webhooks_admin_key  # agents-scoped routes
    return target.agents_read_key


def test_fuzz_without_scope_is_403(target: Target, schema: Any) -> None:
    report = Report()
    _start_budget(target)
    for operation in _operations(schema):
        key = _key_without_scope(operation, target)
        _fuzz(
            target,
            report,
            operation,
            _strategies(operation, target, GenerationMode.POSITIVE, generated_ids=False),
            max_examples=EXAMPLES_WITHOUT_SCOPE,
            headers=lambda key=key: _bearer(key),  # type: ignore[misc]
            expected_status=403,
        )
    _warn_if_budget_hit(target)
    report.fail_if_any(f"with a key lacking the operation's scope on {target.backend}")
    assert report.statuses, "nothing was sent"


BAD_CREDENTIALS: list[dict[str, str]] = [
    {},
    {"Authorization": ""},
    {"Authorization": "Bearer"},
    {"Authorization": "Basic dXNlcjpwYXNz"},
    {"Authorization": "Bearer not-a-key"},
    {"Authorization": "Bearer service_sk_test_" + "A" * 40},  # well formed, unknown
    {"Authorization": "Bearer service_sk_live_short"},
    {"Authorization": "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"},  # bad JWT
]


def test_fuzz_without_credentials_is_401(target: Target, schema: Any) -> None:
    report = Report()
    _start_budget(target)
    for operation in _operations(schema):
        credentials = itertools.cycle(BAD_CREDENTIALS)
        _fuzz(
            target,
            report,
            operation,
            _strategies(operation, target, GenerationMode.POSITIVE, generated_ids=False),
            max_examples=EXAMPLES_WITHOUT_CREDENTIALS,
            headers=lambda credentials=credentials: dict(next(credentials)),  # type: ignore[misc]
            expected_status=401,
        )
    _warn_if_budget_hit(target)
    report.fail_if_any(f"without valid credentials on {target.backend}")
    assert report.statuses, "nothing was sent"


# --------------------------------------------------------------------------- regressions

# Regression: NUL (U+0000) once reached asyncpg and answered 500 on PostgreSQL; now 422 on both.
CONTACTS = "/api/v1/contacts"
CONTACT = "/api/v1/contacts/{contact_id}"
NUL_REQUESTS = [
    pytest.param("POST", CONTACTS, {"name": "A\x00B"}, None, id="create-name"),
    pytest.param("POST", CONTACTS, {"tags": ["x\x00"]}, None, id="create-tag"),
    pytest.param("POST", CONTACTS, {"notes": "\x00"}, None, id="create-notes"),
    pytest.param("POST", CONTACTS, {"custom_fields": {"k": "\x00"}}, None, id="create-cf-value"),
    pytest.param("POST", CONTACTS, {"custom_fields": {"\x00": 1}}, None, id="create-cf-key"),
    pytest.param("PUT", CONTACT, {"name": "A\x00"}, None, id="update-name"),
    pytest.param("PUT", CONTACT, {"notes": "\x00"}, None, id="update-notes"),
    pytest.param("GET", CONTACTS, None, {"search": "\x00"}, id="list-search"),
    pytest.param("GET", CONTACTS, None, {"tag": "\x00"}, id="list-tag"),
]


@pytest.mark.parametrize(("method", "path", "body", "params"), NUL_REQUESTS)
def test_nul_character_is_refused_not_a_500(
    request: pytest.FixtureRequest,
    target: Target,
    schema: Any,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    params: dict[str, str] | None,
) -> None:
    if body is not None and method == "POST":
        body = {"phone_number": "+14155550999", "name": "Nul", **body}
    with httpx.Client(
        base_url=target.base_url, headers=_bearer(target.full_access_key), timeout=10
    ) as http:
        url = path
        if "{contact_id}" in path:  # a fresh one: the fuzzer may have deleted those seeded first
            fresh = http.post(CONTACTS, json={"phone_number": "+14155550998", "name": "Fresh"})
            assert fresh.status_code == 200, fresh.text
            url = path.replace("{contact_id}", fresh.json()["id"])
        response = http.request(method, url, json=body, params=params)
    documented = schema[path][method].definition.raw["responses"]
    assert response.status_code < 500, f"{method} {url}: {response.status_code} {response.text}"
    assert str(response.status_code) in documented, (response.status_code, response.text)


# Regression: the request schemas once accepted bodies the server refused with 422.
BODY_AGREEMENT = [
    pytest.param("PUT", CONTACT, {"name": None}, id="update-name-null"),
    pytest.param("PUT", CONTACT, {"phone_number": None}, id="update-phone-null"),
    pytest.param("PUT", CONTACT, {"tags": None}, id="update-tags-null"),
    pytest.param("POST", CONTACTS, {"tags": ["x" * 101]}, id="create-long-tag"),
    pytest.param("POST", CONTACTS, {"tags": [" "]}, id="create-blank-tag"),
]


@pytest.mark.parametrize(("method", "path", "body"), BODY_AGREEMENT)
def test_request_schema_agrees_with_the_server(
    target: Target, schema: Any, method: str, path: str, body: dict[str, Any]
) -> None:
    if method == "POST":
        body = {"phone_number": "+14155550997", "name": "Doc", **body}
    request_body = schema[path][method].definition.raw["requestBody"]
    validator = jsonschema_rs.validator_for(
        {
            **request_body["content"]["application/json"]["schema"],
            "components": schema.raw_schema["components"],
        }
    )
    documented_valid = validator.is_valid(body)
    with httpx.Client(
        base_url=target.base_url, headers=_bearer(target.full_access_key), timeout=10
    ) as http:
        url = path
        if "{contact_id}" in path:
            fresh = http.post(CONTACTS, json={"phone_number": "+14155550996", "name": "Fresh"})
            assert fresh.status_code == 200, fresh.text
            url = path.replace("{contact_id}", fresh.json()["id"])
        response = http.request(method, url, json=body)
    accepted = 200 <= response.status_code < 300
    assert accepted == documented_valid, (
        f"document says the body is {'valid' if documented_valid else 'invalid'}, server "
        f"answered {response.status_code} {response.text}"
    )
