"""Provider credential operations (the resolvers REST and GraphQL both call), and the one
way the engine reads a credential back (`credential_for_use`).

The key and the provider-specific fields are sealed together with the box of app/kit/crypto.py
(its own purpose label; associated data binds the value to its organization and provider), so
a sealed value copied to another row does not open. Nothing here logs a key.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.core.clock import utcnow
from app.core.ids import new_id
from app.kit.cache import GenerationalCache, invalidate_after_commit
from app.kit.crypto import DecryptionFailed, SecretBox, secret_box
from app.kit.errors import Conflict, DomainError, InvalidInput, NotFound
from app.provider_credentials.cache import credential_cache
from app.provider_credentials.models import ProviderCredential
from app.provider_credentials.repository import ProviderCredentialRepository
from app.provider_credentials.schemas import PROVIDERS, ProviderCredentialPut
from app.webhooks.ssrf import resolve_public_addresses

if TYPE_CHECKING:
    from app.resources import Resources

CREDENTIAL_PURPOSE = "provider-credential"


class UnknownProvider(NotFound):
    def __init__(self) -> None:
        DomainError.__init__(self, "Unknown provider", field="provider")
        self.resource = "Provider"


@dataclass(frozen=True, slots=True)
class StoredCredential:
    """A credential opened for use: never serialized, never logged (repr hides the key)."""

    provider: str
    api_key: str = field(repr=False)
    base_url: str | None
    options: dict[str, Any] = field(repr=False)
    version: str


def credential_box(secret_key: str) -> SecretBox:
    return secret_box(CREDENTIAL_PURPOSE, secret_key)


def _context(organization_id: str, provider: str) -> bytes:
    return f"provider-credential:{organization_id}:{provider}".encode()


def known_provider(provider: str) -> str:
    if provider not in PROVIDERS:
        raise UnknownProvider()
    return provider


async def _guard(url: str | None, field_name: str, allow_private: bool) -> None:
    if url is None:
        return
    try:
        await resolve_public_addresses(url, allow_private=allow_private)
    except InvalidInput as exc:
        raise InvalidInput(f"{field_name}: {exc.message}", field=field_name) from None


async def put_credential(
    session: AsyncSession,
    subject: Subject,
    provider: str,
    data: ProviderCredentialPut,
    box: SecretBox,
    *,
    allow_private: bool,
    cache: GenerationalCache,
) -> ProviderCredential:
    """Set (or replace whole) the organization's credential for `provider`."""
    known_provider(provider)
    await _guard(data.base_url, "base_url", allow_private)
    if provider == "google_calendar":
        await _guard(data.token_url, "token_url", allow_private)
    sealed = box.encrypt(
        orjson.dumps({"api_key": data.api_key, "options": data.options(provider)}).decode(),
        _context(subject.organization_id, provider),
    )
    repository = ProviderCredentialRepository(session, subject.organization_id)
    credential = await repository.by_provider(provider)
    if credential is None:
        credential = ProviderCredential(
            id=new_id(), organization_id=subject.organization_id, provider=provider
        )
        repository.add(credential)
    credential.base_url = data.base_url
    credential.secret_encrypted = sealed
    credential.api_key_last4 = data.api_key[-4:]
    credential.updated_at = utcnow()
    try:
        async with session.begin_nested():
            await session.flush()
    except IntegrityError:  # a concurrent PUT created it first
        raise Conflict(
            "The credential was written by another request meanwhile; send it again"
        ) from None
    invalidate_after_commit(session, cache, subject.organization_id)
    return credential


async def list_credentials(session: AsyncSession, subject: Subject) -> list[Any]:
    return await ProviderCredentialRepository(session, subject.organization_id).all_rows()


async def delete_credential(
    session: AsyncSession, subject: Subject, provider: str, *, cache: GenerationalCache
) -> str:
    known_provider(provider)
    repository = ProviderCredentialRepository(session, subject.organization_id)
    credential = await repository.by_provider(provider)
    if credential is None:
        raise NotFound("Credential")
    await repository.delete(credential)
    await session.flush()
    invalidate_after_commit(session, cache, subject.organization_id)
    return provider


async def credential_for_use(
    session: AsyncSession, organization_id: str, provider: str, box: SecretBox
) -> StoredCredential | None:
    """The organization's credential for `provider`, opened; None when none is set or it no
    longer opens (the secret key changed): the caller then works as without one."""
    credential = await ProviderCredentialRepository(session, organization_id).by_provider(provider)
    if credential is None:
        return None
    return _opened(
        organization_id,
        provider,
        credential.secret_encrypted,
        credential.base_url,
        credential.updated_at.isoformat(),
        box,
    )


def _opened(
    organization_id: str,
    provider: str,
    sealed: str,
    base_url: str | None,
    version: str,
    box: SecretBox,
) -> StoredCredential | None:
    try:
        opened = orjson.loads(box.decrypt(sealed, _context(organization_id, provider)))
    except DecryptionFailed:
        return None
    return StoredCredential(
        provider=provider,
        api_key=opened["api_key"],
        base_url=base_url,
        options=opened.get("options") or {},
        version=version,
    )


SessionOpener = Callable[[], AbstractAsyncContextManager[AsyncSession]]


async def cached_credential(
    open_session: SessionOpener,
    cache: GenerationalCache,
    organization_id: str,
    provider: str,
    box: SecretBox,
) -> StoredCredential | None:
    """`credential_for_use` through the organization's cached rows (app/provider_credentials/
    cache.py): a session is opened only when the cache misses. The rows stay sealed in the
    cache; the key is opened here, for this use."""

    async def load() -> bytes:
        async with open_session() as session:
            rows = await ProviderCredentialRepository(session, organization_id).sealed_rows()
        return orjson.dumps(
            {
                row.provider: [row.secret_encrypted, row.base_url, row.updated_at.isoformat()]
                for row in rows
            }
        )

    stored = orjson.loads(await cache.get_or_load(organization_id, load)).get(provider)
    if stored is None:
        return None
    sealed, base_url, version = stored
    return _opened(organization_id, provider, sealed, base_url, version, box)


async def organization_credential(
    resources: Resources, organization_id: str, provider: str
) -> StoredCredential | None:
    """The credential a conversation uses (the engine's turns, a live call's speech): from the
    process's credentials cache, read on a miss with a session that writes nothing."""
    return await cached_credential(
        partial(resources.session, writes=False),
        credential_cache(resources.redis),
        organization_id,
        provider,
        credential_box(resources.secret_key),
    )
