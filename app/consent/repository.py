"""Every query on an organization's consent settings, scoped to it."""

from __future__ import annotations

from typing import ClassVar

from sqlalchemy import select

from app.consent.models import ConsentSettings
from app.kit.repository import OrgScopedRepository


class ConsentSettingsRepository(OrgScopedRepository[ConsentSettings]):
    model = ConsentSettings
    resource = "Consent settings"
    list_columns: ClassVar = (ConsentSettings.organization_id,)

    async def stored(self) -> ConsentSettings | None:
        """The organization's row, or None while it keeps the defaults."""
        result = await self._execute(self.scoped(select(ConsentSettings)))
        return result.scalar_one_or_none()
