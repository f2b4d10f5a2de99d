"""Quick reply operations: the resolvers REST and GraphQL both call.

Each write records that the organization's cached snippet list must go once the transaction
commits (`invalidate_after_commit`); `expand_quick_reply` reads that list.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.core.jsonutil import dumps, loads
from app.kit.cache import GenerationalCache, invalidate_after_commit
from app.kit.errors import Conflict, InvalidInput
from app.kit.pagination import CursorPage, CursorParams
from app.quick_replies.models import QuickReply
from app.quick_replies.repository import QuickReplyRepository
from app.quick_replies.schemas import MAX_SHORTCUT_LENGTH, QuickReplyCreate, QuickReplyUpdate

# Keeps the cached list bounded (at most ~4 MB): it is read whole to expand one shortcut.
MAX_QUICK_REPLIES = 1000


def _duplicate(shortcut: str) -> Conflict:
    return Conflict(
        f"A quick reply with the shortcut '{shortcut}' already exists", field="shortcut"
    )


async def _flush(session: AsyncSession, repository: QuickReplyRepository, shortcut: str) -> None:
    try:
        await session.flush()
    except IntegrityError as exc:
        if repository.is_duplicate(exc):
            raise _duplicate(shortcut) from exc
        raise


async def create_quick_reply(
    session: AsyncSession, subject: Subject, data: QuickReplyCreate, cache: GenerationalCache
) -> QuickReply:
    repository = QuickReplyRepository(session, subject)
    if await repository.count() >= MAX_QUICK_REPLIES:
        raise InvalidInput(
            f"An organization can have at most {MAX_QUICK_REPLIES} quick replies; "
            "delete some before creating more"
        )
    quick_reply = QuickReply(
        organization_id=subject.organization_id, shortcut=data.shortcut, content=data.content
    )
    repository.add(quick_reply)
    await _flush(session, repository, data.shortcut)
    invalidate_after_commit(session, cache, subject.organization_id)
    return quick_reply


async def get_quick_reply(session: AsyncSession, subject: Subject, quick_reply_id: str) -> Any:
    row = await QuickReplyRepository(session, subject).get_row_or_404(quick_reply_id)
    return row


async def list_quick_replies(
    session: AsyncSession, subject: Subject, params: CursorParams
) -> CursorPage[Any]:
    return await QuickReplyRepository(session, subject).cursor_page(params)


async def update_quick_reply(
    session: AsyncSession,
    subject: Subject,
    quick_reply_id: str,
    data: QuickReplyUpdate,
    cache: GenerationalCache,
) -> QuickReply:
    repository = QuickReplyRepository(session, subject)
    quick_reply = await repository.get_or_404(quick_reply_id)
    changes = data.changes()
    for name, value in changes.items():
        setattr(quick_reply, name, value)
    await _flush(session, repository, quick_reply.shortcut)
    if changes:
        invalidate_after_commit(session, cache, subject.organization_id)
    return quick_reply


async def delete_quick_reply(
    session: AsyncSession, subject: Subject, quick_reply_id: str, cache: GenerationalCache
) -> None:
    repository = QuickReplyRepository(session, subject)
    quick_reply = await repository.get_or_404(quick_reply_id)
    await repository.delete(quick_reply)
    await session.flush()
    invalidate_after_commit(session, cache, subject.organization_id)


async def expand_quick_reply(
    session: AsyncSession, subject: Subject, shortcut: str, cache: GenerationalCache
) -> str | None:
    """The content of `shortcut`, or None, from the cached snippet list.

    On a miss the list is read with `session`, which must not hold a snapshot older than this
    call (a fresh read session, not one that already read in an open transaction): the cache
    takes its generation token first and trusts the read that follows to be as new.
    """
    if not shortcut or len(shortcut) > MAX_SHORTCUT_LENGTH:
        return None
    repository = QuickReplyRepository(session, subject)

    async def load() -> bytes:
        return dumps(await repository.snippets())

    snippets: dict[str, str] = loads(await cache.get_or_load(subject.organization_id, load))
    return snippets.get(shortcut)
