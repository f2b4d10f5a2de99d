"""Every query on contact imports, scoped to one organization."""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import select

from app.contact_imports.models import ContactImport, ContactImportError
from app.contact_imports.schemas import CONTACT_IMPORT
from app.kit.repository import OrgScopedRepository


class ContactImportRepository(OrgScopedRepository[ContactImport]):
    model = ContactImport
    resource = "Import"
    list_columns: ClassVar = CONTACT_IMPORT.columns()


async def error_batch(session: Any, import_id: str, after: int, limit: int) -> list[Any]:
    """Refused rows of an import after row `after`, in row order (the error report)."""
    result = await session.execute(
        select(
            ContactImportError.row_number,
            ContactImportError.phone_number,
            ContactImportError.name,
            ContactImportError.reason,
        )
        .where(ContactImportError.import_id == import_id, ContactImportError.row_number > after)
        .order_by(ContactImportError.row_number)
        .limit(limit)
    )
    return list(result.all())
