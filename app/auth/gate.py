"""The front door both surfaces share: credential, then rate limits, then last-use record."""

from __future__ import annotations

import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.service import ResolvedCredential, resolve_credential, touch_api_key
from app.kit import limits
from app.resources import Resources

logger = structlog.get_logger("switchboard.auth")


async def authenticate(
    session: AsyncSession, resources: Resources, authorization: str | None
) -> ResolvedCredential:
    """The caller behind the header, after its key and organization rate limits."""
    credential = await resolve_credential(session, authorization, resources.secret_key)
    settings = resources.settings
    await limits.enforce(
        resources.rate_limiter,
        credential.subject,
        settings.key_rate_limit,
        settings.org_rate_limit,
    )
    return credential


async def record_key_use(resources: Resources, key_id: str | None) -> None:
    """Write last_used_at outside the request's transaction; a failure only costs freshness."""
    if key_id is None:
        return
    try:
        async with resources.sessionmaker() as session:
            await touch_api_key(session, key_id)
            await session.commit()
    except Exception:
        logger.warning("could not record api key use", key_id=key_id, exc_info=True)
