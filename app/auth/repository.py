"""Every query on api_keys."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from sqlalchemy import select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.models import ApiKey
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


async def find_by_hash(session: AsyncSession, key_hash: str) -> RowMapping | None:
    """Credential lookup; runs before any organization is known, so it is not org-scoped."""
    result = await session.execute(select(*CREDENTIAL_COLUMNS).where(ApiKey.key_hash == key_hash))
    return result.mappings().one_or_none()


async def touch(session: AsyncSession, key_id: str, when: datetime) -> None:
    await session.execute(update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=when))


class ApiKeyRepository(OrgScopedRepository[ApiKey]):
    model = ApiKey
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

    def add(self, key: ApiKey) -> None:
        self.session.add(key)
