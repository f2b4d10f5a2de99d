"""Contact imports: the upload's options, and the public shape of an import."""

from __future__ import annotations

from datetime import datetime

import strawberry
from pydantic import BaseModel, ConfigDict, Field

from app.contact_imports import models
from app.contact_imports.models import OnDuplicate
from app.kit.queries import CursorQuery
from app.kit.shape import SAME, Rest, Shape, column


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


@strawberry.type(description="A CSV of contacts being imported, and its progress.")
class ContactImport:
    """The public shape of an import, declared once (app/kit/shape.py)."""

    id: strawberry.ID = column(models.ContactImport.id, as_type=strawberry.ID)
    organization_id: str = column(models.ContactImport.organization_id)
    status: str = column(
        models.ContactImport.status,
        description="queued, processing, completed or failed",
        rest=Rest(description=SAME),
    )
    file_name: str = column(models.ContactImport.file_name)
    # A Float in GraphQL: a size in bytes may pass the 32-bit Int.
    size_bytes: float = column(
        models.ContactImport.size_bytes,
        as_type=float,
        description="The file's size in bytes",
        rest=Rest(annotation=int),
    )
    on_duplicate: str = column(models.ContactImport.on_duplicate, description="update or skip")
    default_region: str | None = column(models.ContactImport.default_region)
    rows_read: int = column(models.ContactImport.rows_read)
    created_count: int = column(models.ContactImport.created_count)
    updated_count: int = column(models.ContactImport.updated_count)
    skipped_count: int = column(models.ContactImport.skipped_count)
    failed_count: int = column(models.ContactImport.failed_count)
    error: str | None = column(
        models.ContactImport.error,
        description="Why the whole file was refused",
        rest=Rest(description="Why the file as a whole was refused (status failed)"),
    )
    created_at: datetime = column(models.ContactImport.created_at)
    updated_at: datetime = column(models.ContactImport.updated_at)
    finished_at: datetime | None = column(models.ContactImport.finished_at)


CONTACT_IMPORT = Shape(ContactImport, rest_name="ContactImportResponse")
ContactImportResponse = CONTACT_IMPORT.rest_model
contact_import_to_public = CONTACT_IMPORT.to_public
