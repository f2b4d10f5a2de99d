"""Contact imports: the upload's options, and the public shape of an import."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.contact_imports.models import OnDuplicate
from app.kit.queries import CursorQuery


class ImportOptions(BaseModel):
    """Query parameters of `POST /contacts/imports`."""

    model_config = ConfigDict(extra="ignore")

    on_duplicate: OnDuplicate = Field(
        default=OnDuplicate.SKIP,
        description="A row whose phone number a contact already has: update it, or skip the row",
    )
    default_region: str | None = Field(
        default=None,
        max_length=2,
        description="ISO 3166 alpha-2 country for numbers written without + and country code",
    )


class ImportListQuery(CursorQuery):
    pass


class ContactImportResponse(BaseModel):
    id: str
    organization_id: str
    status: str = Field(description="queued, processing, completed or failed")
    file_name: str
    size_bytes: int
    on_duplicate: str
    default_region: str | None
    rows_read: int
    created_count: int
    updated_count: int
    skipped_count: int
    failed_count: int
    error: str | None = Field(description="Why the file as a whole was refused (status failed)")
    created_at: str
    updated_at: str
    finished_at: str | None


def contact_import_to_public(item: Any) -> dict[str, Any]:
    return {name: getattr(item, name) for name in ContactImportResponse.model_fields}
