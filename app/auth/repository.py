"""Every query on api_keys."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.models import ApiKey
from app.db.prepared import PreparedStatement
from app.kit.repository import OrgScopedRepository

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


async def find_by_hash(session: AsyncSession, key_hash: str) -> Any | None:
    """Credential lookup (every request: prepared); runs before any organization is known, so
    it is not org-scoped."""
    return await _FIND_BY_HASH.first(session, {"key_hash": key_hash})


async def touch(session: AsyncSession, key_id: str, when: datetime) -> None:
    await session.execute(update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=when))


class ApiKeyRepository(OrgScopedRepository[ApiKey]):
    model = ApiKey
    resource = "API key"
    list_columns: ClassVar = (
        ApiKey.id,
        ApiKey.organization_id,
        ApiKey.name,
        ApiKey.display_prefix,
        ApiKey.scopes,
        ApiKey.livemode,
        ApiKey.expires_at,
        ApiKey.revoked_at,
        ApiKey.last_used_at,
        ApiKey.created_by_user_id,
        ApiKey.created_at,
        ApiKey.updated_at,
    )
