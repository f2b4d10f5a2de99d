"""Contact imports: one uploaded CSV, its progress, and the rows it refused."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, TimestampMixin, UTCDateTime, id_column


class ImportStatus(StrEnum):
    QUEUED = "queued"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"


class OnDuplicate(StrEnum):
    """What a row whose phone number a contact already has does."""

    UPDATE = "update"
    SKIP = "skip"


class ContactImport(TimestampMixin, Base):
    __tablename__ = "contact_imports"
    __table_args__ = (
        Index(
            "ix_contact_imports_organization_id_created_at_id",
            "organization_id",
            "created_at",
            "id",
        ),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16))
    file_name: Mapped[str] = mapped_column(String(255))
    object_key: Mapped[str] = mapped_column(String(512))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    on_duplicate: Mapped[str] = mapped_column(String(8))
    default_region: Mapped[str | None] = mapped_column(String(2), nullable=True)
    rows_read: Mapped[int] = mapped_column(Integer, default=0)
    created_count: Mapped[int] = mapped_column(Integer, default=0)
    updated_count: Mapped[int] = mapped_column(Integer, default=0)
    skipped_count: Mapped[int] = mapped_column(Integer, default=0)
    failed_count: Mapped[int] = mapped_column(Integer, default=0)
    # Where the next batch starts: the bytes of the file and the rows read so far, written
    # in the transaction of the batch they end, so a run that dies resumes exactly there.
    committed_offset: Mapped[int] = mapped_column(BigInteger, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class ContactImportError(Base):
    """A refused row: its line in the file and why (the error report)."""

    __tablename__ = "contact_import_errors"

    import_id: Mapped[str] = mapped_column(
        ForeignKey("contact_imports.id", ondelete="CASCADE"), primary_key=True
    )
    row_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    phone_number: Mapped[str | None] = mapped_column(String(100), nullable=True)
    name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    reason: Mapped[str] = mapped_column(Text)
