"""The front door both surfaces share: credential, then rate limits, then last-use record."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import structlog
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.types import Scope

from app.access.cache import CredentialCache
from app.access.credentials import (
    ResolvedCredential,
    may_be_valid,
    resolve_credential,
    touch_api_key,
)
from app.access.failures import FailedAuthentications
from app.access.subject import Subject
from app.config import Settings
from app.kit import limits
from app.kit.errors import AuthenticationFailed, OrganizationMismatch, RateLimited
from app.kit.ratelimit import RateLimiter

logger = structlog.get_logger("switchboard.auth")


class Resources(Protocol):
    """What the gate uses of the process's resources (app/resources.py, a layer above)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def secret_key(self) -> str: ...

    @property
    def rate_limiter(self) -> RateLimiter: ...

    @property
    def credential_cache(self) -> CredentialCache | None: ...

    @property
    def failed_authentications(self) -> FailedAuthentications: ...

    def session(self, *, writes: bool) -> AbstractAsyncContextManager[AsyncSession]: ...


def client_address(scope: Scope) -> str:
    """The caller's address (uvicorn resolves X-Forwarded-For from trusted proxies)."""
    client = scope.get("client")
    return client[0] if client else "unknown"


async def authenticate(
    session: AsyncSession, resources: Resources, authorization: str | None, address: str
) -> ResolvedCredential:
    """The caller behind the header, after its key and organization rate limits.

    A failed check counts against the client address (app/access/failures.py): past its limit the
    address's failures get 429 instead of 401 until it may try again; a valid credential from
    it is served all the same.
    """
    settings = resources.settings
    failures = resources.failed_authentications
    refused = failures.refused_for(address)
    if refused is not None and not may_be_valid(authorization, resources.secret_key):
        raise RateLimited(refused)  # nothing to look up: refused without I/O
    try:
        credential = await resolve_credential(
            session, authorization, resources.secret_key, resources.credential_cache
        )
    except AuthenticationFailed:
        if refused is not None:
            raise RateLimited(refused) from None
        await failures.failed(
            resources.rate_limiter, address, settings.auth_failure_address_rate_limit
        )
        raise
    await limits.enforce(
        resources.rate_limiter,
        credential.subject.principal_id,
        credential.subject.organization_id,
        settings.key_rate_limit,
        settings.org_rate_limit,
    )
    return credential


def check_organization_header(
    headers: Mapping[str, str], subject: Subject, *, required: bool = False
) -> None:
    """An `organization_id` header, when sent, must name the caller's organization; where
    `required` (ticket creation), it must be sent."""
    claimed = headers.get("organization_id")
    if claimed is None:
        claimed = headers.get("organization-id")
    if claimed is None:
        if required:
            raise OrganizationMismatch()
    elif claimed.strip() != subject.organization_id:
        raise OrganizationMismatch()


async def record_key_use(resources: Resources, key_id: str | None) -> None:
    """Write last_used_at outside the request's transaction; a failure only costs freshness."""
    if key_id is None:
        return
    try:
        async with resources.session(writes=True) as session:
            await touch_api_key(session, key_id)
            await session.commit()
    except Exception:
        logger.warning("could not record api key use", key_id=key_id, exc_info=True)


async def enforce_address_limit(resources: Resources, address: str) -> None:
    """A request without a credential spends from its client address's bucket instead."""
    decision = await resources.rate_limiter.hit(
        f"addr:{address}", resources.settings.address_rate_limit
    )
    if not decision.allowed:
        raise RateLimited(decision.retry_after)


async def enforce_login_address_limit(resources: Resources, address: str, attempts: int) -> None:
    """Login attempts per client address, beside the per-e-mail limit of the login itself:
    trying one password on many e-mails (password spraying) is throttled too."""
    limit = resources.settings.login_address_rate_limit
    decision = await resources.rate_limiter.hit(
        f"login-addr:{address}", limit, min(attempts, limit.limit)
    )
    if not decision.allowed:
        raise RateLimited(decision.retry_after)
