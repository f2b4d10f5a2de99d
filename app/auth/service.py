"""API keys (create, list, revoke); the credential resolver is the kernel's
(app/access/credentials.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.access import keys
from app.access.cache import announce_revocation
from app.access.models import ApiKey
from app.access.scopes import parse_scopes
from app.access.subject import Subject
from app.auth.repository import ApiKeyRepository
from app.core.clock import utcnow
from app.core.ids import normalize_id
from app.kit.errors import InvalidInput, NotFound
from app.kit.pagination import CursorPage, CursorParams
from app.organizations import repository as org_repository


@dataclass(frozen=True, slots=True)
class CreatedKey:
    key: ApiKey
    secret: str


async def create_api_key(
    session: AsyncSession,
    organization_id: str,
    *,
    name: str,
    scopes: list[str],
    secret_key: str,
    livemode: bool = False,
    expires_at: datetime | None = None,
    created_by_user_id: str | None = None,
) -> CreatedKey:
    """A new key; the secret is returned here once and never stored."""
    name = name.strip()
    if not name or len(name) > 255:
        raise InvalidInput("name must be 1 to 255 characters", field="name")
    try:
        parsed = parse_scopes(scopes)
    except ValueError as exc:
        raise InvalidInput(str(exc), field="scopes") from exc
    if expires_at is not None:
        if expires_at.tzinfo is None:
            raise InvalidInput("expires_at must include a timezone", field="expires_at")
        if expires_at <= utcnow():
            raise InvalidInput("expires_at must be in the future", field="expires_at")
    if await org_repository.get_organization(session, organization_id) is None:
        raise NotFound("Organization")
    secret = keys.generate_key(livemode)
    api_key = ApiKey(
        organization_id=organization_id,
        name=name,
        key_hash=keys.hash_key(secret, secret_key),
        display_prefix=keys.display_prefix(secret),
        scopes=[scope.value for scope in parsed],
        livemode=livemode,
        expires_at=expires_at,
        created_by_user_id=created_by_user_id,
    )
    session.add(api_key)
    await session.flush()
    return CreatedKey(key=api_key, secret=secret)


async def list_api_keys(
    session: AsyncSession, subject: Subject, params: CursorParams
) -> CursorPage[Any]:
    return await ApiKeyRepository(session, subject).cursor_page(params)


async def revoke_api_key(session: AsyncSession, organization_id: str | None, key_id: str) -> ApiKey:
    """Revoke at once. organization_id None is the operator's CLI, which may revoke any key."""
    if organization_id is None:
        canonical = normalize_id(key_id)
        api_key = await session.get(ApiKey, canonical) if canonical else None
    else:
        api_key = await ApiKeyRepository(session, organization_id).get(key_id)
    if api_key is None:
        raise NotFound("API key")
    if api_key.revoked_at is None:
        api_key.revoked_at = utcnow()
        await session.flush()
        await announce_revocation(session, api_key.key_hash)
    return api_key
