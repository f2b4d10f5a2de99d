"""The webhooks service with host names: the SSRF guard resolves them (a fake DNS here)."""

from __future__ import annotations

import socket
from collections.abc import Sequence

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.access.scopes import Scope
from app.access.subject import PrincipalType, Subject
from app.kit.errors import InvalidInput, NotFound
from app.webhooks import service
from app.webhooks.schemas import WebhookCreate, WebhookUpdate
from app.webhooks.ssrf import ForbiddenWebhookAddress, UnresolvableWebhookHost
from tests.conftest import Tenant

FAKE_DNS: dict[str, list[str]] = {
    "hooks.example": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
    "internal.example": ["10.1.2.3"],
    "rebind.example": ["93.184.216.34", "127.0.0.1"],
}


async def fake_resolver(host: str, port: int) -> Sequence[str]:
    if host in FAKE_DNS:
        return FAKE_DNS[host]
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


async def no_lookups(host: str, port: int) -> Sequence[str]:
    raise AssertionError(f"unexpected lookup of {host}:{port}")


def subject_of(tenant: Tenant) -> Subject:
    return Subject(
        organization_id=tenant.organization_id,
        principal_id=tenant.key_id,
        principal_type=PrincipalType.API_KEY,
        scopes=frozenset({Scope.WEBHOOKS_ADMIN}),
        livemode=False,
    )


def new(url: str, events: list[str] | None = None) -> WebhookCreate:
    return WebhookCreate(url=url, events=events or ["lead.created"])


async def test_public_host_names_are_accepted(
    sessionmaker: async_sessionmaker[AsyncSession], acme: Tenant
) -> None:
    async with sessionmaker() as session:
        webhook = await service.create_webhook(
            session,
            subject_of(acme),
            new("https://hooks.example/in"),
            allow_private=False,
            resolver=fake_resolver,
        )
        assert webhook.url == "https://hooks.example/in"
        assert webhook.is_active is True
        assert webhook.events == ["lead.created"]
        updated = await service.update_webhook(
            session,
            subject_of(acme),
            webhook.id,
            WebhookUpdate(url="http://hooks.example:8080/v2"),
            allow_private=False,
            resolver=fake_resolver,
        )
        assert updated.url == "http://hooks.example:8080/v2"


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("https://internal.example/", ForbiddenWebhookAddress),
        ("https://rebind.example/", ForbiddenWebhookAddress),
        ("https://unknown.example/", UnresolvableWebhookHost),
    ],
)
async def test_private_or_unknown_host_names_are_refused(
    sessionmaker: async_sessionmaker[AsyncSession],
    acme: Tenant,
    url: str,
    error: type[InvalidInput],
) -> None:
    async with sessionmaker() as session:
        with pytest.raises(error) as raised:
            await service.create_webhook(
                session, subject_of(acme), new(url), allow_private=False, resolver=fake_resolver
            )
        assert raised.value.status == 400
        assert raised.value.field == "url"
        webhook = await service.create_webhook(
            session,
            subject_of(acme),
            new("https://hooks.example/"),
            allow_private=False,
            resolver=fake_resolver,
        )
        with pytest.raises(error):
            await service.update_webhook(
                session,
                subject_of(acme),
                webhook.id,
                WebhookUpdate(url=url),
                allow_private=False,
                resolver=fake_resolver,
            )


async def test_allow_private_skips_resolution(
    sessionmaker: async_sessionmaker[AsyncSession], acme: Tenant
) -> None:
    async with sessionmaker() as session:
        webhook = await service.create_webhook(
            session,
            subject_of(acme),
            new("http://internal.example/x"),
            allow_private=True,
            resolver=no_lookups,
        )
        assert webhook.url == "http://internal.example/x"


async def test_updates_without_a_url_do_no_lookup(
    sessionmaker: async_sessionmaker[AsyncSession], acme: Tenant
) -> None:
    async with sessionmaker() as session:
        webhook = await service.create_webhook(
            session,
            subject_of(acme),
            new("https://93.184.216.34/"),
            allow_private=False,
            resolver=no_lookups,  # an IP literal is judged without a lookup
        )
        updated = await service.update_webhook(
            session,
            subject_of(acme),
            webhook.id,
            WebhookUpdate(events=["call.completed"], is_active=False),
            allow_private=False,
            resolver=no_lookups,
        )
        assert updated.events == ["call.completed"]
        assert updated.is_active is False


async def test_the_default_resolver_is_the_real_guard(
    sessionmaker: async_sessionmaker[AsyncSession], acme: Tenant
) -> None:
    # `.invalid` never resolves (RFC 6761), with or without DNS.
    async with sessionmaker() as session:
        with pytest.raises(UnresolvableWebhookHost):
            await service.create_webhook(
                session, subject_of(acme), new("https://hooks.invalid/"), allow_private=False
            )


async def test_checks_run_before_any_lookup(
    sessionmaker: async_sessionmaker[AsyncSession], acme: Tenant
) -> None:
    async with sessionmaker() as session:
        with pytest.raises(InvalidInput, match="Invalid event"):
            await service.create_webhook(
                session,
                subject_of(acme),
                new("https://hooks.example/", ["nope"]),
                allow_private=False,
                resolver=no_lookups,
            )
        with pytest.raises(NotFound):
            await service.update_webhook(
                session,
                subject_of(acme),
                "00000000-0000-0000-0000-000000000000",
                WebhookUpdate(url="https://hooks.example/"),
                allow_private=False,
                resolver=no_lookups,
            )
