"""API keys (create, list, revoke) and the one credential resolver both surfaces use."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.auth import keys, repository
from app.auth.cache import CredentialCache, announce_revocation
from app.auth.jwt import decode_token
from app.auth.models import ApiKey
from app.auth.repository import ApiKeyRepository
from app.auth.scopes import Scope, parse_scopes
from app.auth.subject import PrincipalType, Subject
from app.kit.clock import utcnow
from app.kit.errors import AuthenticationFailed, InvalidInput, NotFound
from app.kit.ids import normalize_id
from app.kit.pagination import CursorPage, CursorParams
from app.organizations import repository as org_repository

# last_used_at is written at most this often per key: a write per request would cost more
# than the request itself.
TOUCH_INTERVAL = timedelta(seconds=60)


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


@dataclass(frozen=True, slots=True)
class ResolvedCredential:
    subject: Subject
    # Set when last_used_at is stale and should be written after the request.
    touch_key_id: str | None = None


def _bearer_token(authorization: str | None) -> str:
    if not authorization:
        raise AuthenticationFailed("Missing Authorization header; use 'Bearer <API_KEY>'")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationFailed("Malformed Authorization header; use 'Bearer <API_KEY>'")
    return token


@dataclass(frozen=True, slots=True)
class KeyCredential:
    """What a request needs to know about an API key (cacheable: see app/auth/cache.py)."""

    key_id: str
    key_hash: str
    subject: Subject
    expires_at: datetime | None
    revoked: bool
    last_used_at: datetime | None


def _credential_from_row(row: Any) -> KeyCredential:
    subject = Subject(
        organization_id=row.organization_id,
        principal_id=row.id,
        principal_type=PrincipalType.API_KEY,
        scopes=frozenset(Scope(scope) for scope in row.scopes),
        livemode=bool(row.livemode),
    )
    return KeyCredential(
        key_id=row.id,
        key_hash=row.key_hash,
        subject=subject,
        expires_at=row.expires_at,
        revoked=row.revoked_at is not None,
        last_used_at=row.last_used_at,
    )


async def _find_key(
    session: AsyncSession, key_hash: str, cache: CredentialCache | None
) -> KeyCredential | None:
    generation = 0
    if cache is not None:
        found: KeyCredential | None = cache.get(key_hash)
        if found is not None:
            return found
        generation = cache.generation
    row = await repository.find_by_hash(session, key_hash)
    if row is None or not keys.hashes_match(row.key_hash, key_hash):
        return None
    credential = _credential_from_row(row)
    if cache is not None:
        cache.put(key_hash, credential, generation)
    return credential


def may_be_valid(authorization: str | None, secret_key: str) -> bool:
    """Whether the header could name a valid credential, judged without any I/O: a
    well-formed API key (only a lookup can tell more), or a JWT whose signature and expiry
    hold. A refused client address is refused at once for anything else."""
    try:
        token = _bearer_token(authorization)
    except AuthenticationFailed:
        return False
    if token.startswith("service_sk_"):
        return keys.is_well_formed(token)
    return decode_token(token, secret_key) is not None


async def resolve_credential(
    session: AsyncSession,
    authorization: str | None,
    secret_key: str,
    cache: CredentialCache | None = None,
) -> ResolvedCredential:
    """The Subject behind an Authorization header, or AuthenticationFailed (401)."""
    token = _bearer_token(authorization)
    if token.startswith("service_sk_"):
        if not keys.is_well_formed(token):
            raise AuthenticationFailed("Malformed API key")
        candidate = keys.hash_key(token, secret_key)
        credential = await _find_key(session, candidate, cache)
        if credential is None:
            raise AuthenticationFailed("Invalid API key provided")
        now = utcnow()
        if credential.revoked:
            raise AuthenticationFailed("This API key has been revoked")
        if credential.expires_at is not None and credential.expires_at <= now:
            raise AuthenticationFailed("This API key has expired")
        if credential.subject.livemode != keys.is_live(token):
            raise AuthenticationFailed("Invalid API key provided")
        last_used = credential.last_used_at
        if last_used is not None and now - last_used < TOUCH_INTERVAL:
            return ResolvedCredential(credential.subject)
        if cache is not None:
            # The caller writes last_used_at after the request; don't ask again for a minute.
            cache.replace(candidate, dataclasses.replace(credential, last_used_at=now))
        return ResolvedCredential(credential.subject, credential.key_id)
    claims = decode_token(token, secret_key)
    if claims is None:
        raise AuthenticationFailed("Could not validate credentials")
    user = await org_repository.get_user(session, claims.user_id)
    if user is None or user.organization_id != claims.organization_id:
        raise AuthenticationFailed("Could not validate credentials")
    subject = Subject(
        organization_id=user.organization_id,
        principal_id=user.id,
        principal_type=PrincipalType.USER,
        scopes=frozenset({Scope.FULL_ACCESS}),
        livemode=False,
    )
    return ResolvedCredential(subject)


async def touch_api_key(session: AsyncSession, key_id: str) -> None:
    await repository.touch(session, key_id, utcnow())
