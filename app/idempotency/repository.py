"""Every query on stored first responses, scoped to one organization (the purge of expired
records, a maintenance step, spans them all)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.clock import utcnow
from app.idempotency.models import IdempotencyRecord
from app.kit.repository import OrgScopedRepository


class IdempotencyRepository(OrgScopedRepository[IdempotencyRecord]):
    model = IdempotencyRecord
    resource = "Idempotency record"
    list_columns: ClassVar = (
        IdempotencyRecord.request_hash,
        IdempotencyRecord.status_code,
        IdempotencyRecord.response_body,
        IdempotencyRecord.expires_at,
    )

    async def stored(self, key: str) -> Any | None:
        """The record of `key` (list_columns), expired or not."""
        result = await self._execute(
            self.scoped(select(*self.list_columns)).where(IdempotencyRecord.key == key)
        )
        return result.one_or_none()

    async def drop_expired(self, key: str, now: datetime) -> None:
        await self._execute(
            delete(IdempotencyRecord).where(
                self._org_bound(), IdempotencyRecord.key == key, IdempotencyRecord.expires_at <= now
            )
        )


async def purge_expired(session: AsyncSession) -> int:
    """Every organization's expired records (at start-up)."""
    result = await session.execute(
        delete(IdempotencyRecord).where(IdempotencyRecord.expires_at <= utcnow())
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
