"""Every query on provider credentials, scoped to one organization."""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import bindparam, select

from app.kit.repository import OrgScopedRepository
from app.provider_credentials.models import ProviderCredential
from app.provider_credentials.schemas import CREDENTIAL

# The most credentials an organization can hold: one per provider.
MAX_CREDENTIALS = 32


class ProviderCredentialRepository(OrgScopedRepository[ProviderCredential]):
    model = ProviderCredential
    resource = "Credential"
    list_columns: ClassVar = CREDENTIAL.columns(
        ProviderCredential.id, ProviderCredential.organization_id, ProviderCredential.created_at
    )

    async def by_provider(self, provider: str) -> ProviderCredential | None:
        statement = self.scoped(
            select(ProviderCredential).where(ProviderCredential.provider == bindparam("provider"))
        )
        return (await self._execute(statement, {"provider": provider})).scalar_one_or_none()

    async def all_rows(self) -> list[Any]:
        """Every credential of the organization (a handful: one per provider), by provider."""
        columns: Any = select(*self.list_columns)
        statement = self.scoped(
            columns.order_by(ProviderCredential.provider).limit(MAX_CREDENTIALS)
        )
        return list((await self._execute(statement)).all())

    async def sealed_rows(self) -> list[Any]:
        """Every credential of the organization as stored (key sealed), for the cache."""
        columns: Any = select(
            ProviderCredential.provider,
            ProviderCredential.secret_encrypted,
            ProviderCredential.base_url,
            ProviderCredential.updated_at,
        )
        return list((await self._execute(self.scoped(columns.limit(MAX_CREDENTIALS)))).all())
