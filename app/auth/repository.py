"""The auth domain's queries on api_keys (listing and managing keys); the per-request
credential lookup is the kernel's (app/access/credentials.py)."""

from __future__ import annotations

from typing import ClassVar

from app.access.models import ApiKey
from app.kit.repository import OrgScopedRepository


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
