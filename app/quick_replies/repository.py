"""Every query on quick replies, scoped to one organization."""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from app.kit.repository import OrgScopedRepository
from app.quick_replies.models import QuickReply
from app.quick_replies.schemas import QUICK_REPLY

# How each backend names the (organization_id, shortcut) unique key in its error.
_DUPLICATE_MARKERS = ("uq_quick_replies_organization_id", "quick_replies.shortcut")
_SNIPPET_COLUMNS: tuple[Any, ...] = (QuickReply.shortcut, QuickReply.content)


class QuickReplyRepository(OrgScopedRepository[QuickReply]):
    model = QuickReply
    resource = "Quick reply"
    list_columns: ClassVar = QUICK_REPLY.columns(QuickReply.organization_id)

    async def snippets(self) -> dict[str, str]:
        """Every shortcut of the organization and its content (what the cache holds)."""

        read = self._prepared(
            ("snippets",), lambda: select(*_SNIPPET_COLUMNS).where(self._org_bound())
        )
        return {row[0]: row[1] for row in await read.all(self.session, self._bound())}

    @staticmethod
    def is_duplicate(exc: IntegrityError) -> bool:
        message = str(exc.orig)
        return any(marker in message for marker in _DUPLICATE_MARKERS)
