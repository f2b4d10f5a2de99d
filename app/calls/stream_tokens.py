"""Media stream tokens: short-lived, single use, bound to one call.

A token is `<call log id>.<expiry, unix seconds>.<32 random bytes, base64url>`; the call log
keeps only its SHA-256, so the expiry cannot be changed without breaking the hash. Opening
the stream consumes it in one conditional UPDATE (the hash must still be the one stored, the
call still under way): a second stream with the same token finds nothing to consume, on any
process, with or without Redis.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from datetime import UTC, datetime

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from app.calls.models import CallLog
from app.core.clock import utcnow
from app.core.ids import normalize_id

IN_PROGRESS = "in-progress"
MAX_TOKEN_LENGTH = 160


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_stream_token(call_log: CallLog, ttl_seconds: float) -> str:
    """A fresh token for `call_log`, replacing any earlier one; the caller commits."""
    expires = int(time.time() + ttl_seconds)
    token = f"{call_log.id}.{expires}.{secrets.token_urlsafe(32)}"
    call_log.stream_token_hash = _digest(token)
    return token


def token_call_log_id(token: str) -> str | None:
    """The call a well-formed, unexpired token names (not yet proof that it is valid)."""
    if not token or len(token) > MAX_TOKEN_LENGTH or not token.isascii():
        return None
    parts = token.split(".")
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    if int(parts[1]) < time.time():
        return None
    return normalize_id(parts[0])


async def consume_stream_token(session: AsyncSession, token: str) -> str | None:
    """The id of the call the token opens, once; None for a missing, malformed, forged,
    expired or already used token, or a call that has ended. Starts the call's media
    heartbeat in the same statement."""
    call_log_id = token_call_log_id(token)
    if call_log_id is None:
        return None
    result = await session.execute(
        update(CallLog)
        .where(
            CallLog.id == call_log_id,
            CallLog.stream_token_hash == _digest(token),
            CallLog.status == IN_PROGRESS,
        )
        .values(stream_token_hash=None, media_heartbeat_at=utcnow(), updated_at=utcnow())
    )
    return call_log_id if getattr(result, "rowcount", 0) == 1 else None


def token_expires_at(token: str) -> datetime:
    """When a token made by `new_stream_token` stops opening its stream."""
    return datetime.fromtimestamp(int(token.split(".")[1]), tz=UTC)
