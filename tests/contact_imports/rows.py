"""Rows the contact-import tests write directly, as the upload would."""

from __future__ import annotations

from app.contact_imports.models import ContactImport


def queued_import(organization_id: str, import_id: str, *, size_bytes: int) -> ContactImport:
    """An import as the upload leaves it: queued, its file at the upload's key, counters at
    their column defaults, 0 (no job is scheduled: the test runs it, or keeps it queued)."""
    return ContactImport(
        id=import_id,
        organization_id=organization_id,
        status="queued",
        file_name="contacts.csv",
        object_key=import_key(organization_id, import_id),
        size_bytes=size_bytes,
        on_duplicate="skip",
    )


def import_key(organization_id: str, import_id: str) -> str:
    return f"contact-imports/{organization_id}/{import_id}/contacts.csv"
