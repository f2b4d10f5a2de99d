"""Idempotency-Key handling for POSTs (as Stripe does it).

The first successful response is stored in the same transaction as the work it reports, so a
replay can never describe work that was rolled back. Failed requests are not stored: they
changed nothing, and the retry runs them again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from app.core.clock import utcnow
from app.idempotency.models import IdempotencyRecord
from app.idempotency.repository import IdempotencyRepository
from app.kit.errors import IdempotencyMismatch, InvalidInput

MAX_KEY_LENGTH = 255


@dataclass(frozen=True, slots=True)
class StoredResponse:
    status_code: int
    body: bytes


def request_fingerprint(method: str, path: str, body: bytes) -> str:
    digest = hashlib.sha256()
    for part in (method.encode(), b"\0", path.encode(), b"\0", body):
        digest.update(part)
    return digest.hexdigest()


def check_key(key: str) -> str:
    key = key.strip()
    if not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidInput(
            f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} characters", field="Idempotency-Key"
        )
    return key


async def find_replay(
    session: AsyncSession, organization_id: str, key: str, fingerprint: str
) -> StoredResponse | None:
    """The stored response for this key, None if unseen; IdempotencyMismatch if reused."""
    row = await IdempotencyRepository(session, organization_id).stored(key)
    if row is None or row.expires_at <= utcnow():
        return None
    if row.request_hash != fingerprint:
        raise IdempotencyMismatch()
    return StoredResponse(row.status_code, row.response_body)


async def record(
    session: AsyncSession,
    organization_id: str,
    key: str,
    fingerprint: str,
    response: StoredResponse,
    ttl_seconds: int,
) -> None:
    now = utcnow()
    # An expired record of the same key makes way for the new one.
    await IdempotencyRepository(session, organization_id).drop_expired(key, now)
    session.add(
        IdempotencyRecord(
            organization_id=organization_id,
            key=key,
            request_hash=fingerprint,
            status_code=response.status_code,
            response_body=response.body,
            created_at=now,
            expires_at=now + timedelta(seconds=ttl_seconds),
        )
    )
    await session.flush()
