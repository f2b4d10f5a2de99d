"""The one credential resolver both surfaces use: an Authorization header to a `Subject`.

API keys are looked up by their keyed hash (cached per process: app/access/cache.py); a JWT
names a user, who must still exist in the organization the token names. The users table
belongs to app/organizations; the resolver reads the two columns it needs through a table
clause, so the kernel depends on no domain.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import String, bindparam, column, select, table, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.access import keys
from app.access.cache import CredentialCache
from app.access.jwt import decode_token
from app.access.models import ApiKey
from app.access.scopes import Scope
from app.access.subject import PrincipalType, Subject
from app.core.clock import utcnow
from app.db.prepared import PreparedStatement
from app.kit.errors import AuthenticationFailed

# last_used_at is written at most this often per key: a write per request would cost more
# than the request itself.
TOUCH_INTERVAL = timedelta(seconds=60)

CREDENTIAL_COLUMNS = (
    ApiKey.id,
    ApiKey.organization_id,
    ApiKey.key_hash,
    ApiKey.scopes,
    ApiKey.livemode,
    ApiKey.expires_at,
    ApiKey.revoked_at,
    ApiKey.last_used_at,
)

_FIND_BY_HASH = PreparedStatement(
    select(*CREDENTIAL_COLUMNS).where(ApiKey.key_hash == bindparam("key_hash"))
)

_USERS = table("users", column("id", String), column("organization_id", String))


async def find_by_hash(session: AsyncSession, key_hash: str) -> Any | None:
    """Credential lookup (every request: prepared); runs before any organization is known, so
    it is not org-scoped."""
    return await _FIND_BY_HASH.first(session, {"key_hash": key_hash})


async def _user_organization(session: AsyncSession, user_id: str) -> str | None:
    """The organization of the user a JWT names; None once the user is gone."""
    found = await session.execute(select(_USERS.c.organization_id).where(_USERS.c.id == user_id))
    return found.scalar_one_or_none()


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
    """What a request needs to know about an API key (cacheable: see app/access/cache.py)."""

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
    row = await find_by_hash(session, key_hash)
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
    organization_id = await _user_organization(session, claims.user_id)
    if organization_id is None or organization_id != claims.organization_id:
        raise AuthenticationFailed("Could not validate credentials")
    subject = Subject(
        organization_id=organization_id,
        principal_id=claims.user_id,
        principal_type=PrincipalType.USER,
        scopes=frozenset({Scope.FULL_ACCESS}),
        livemode=False,
    )
    return ResolvedCredential(subject)


async def touch_api_key(session: AsyncSession, key_id: str) -> None:
    await session.execute(update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=utcnow()))
