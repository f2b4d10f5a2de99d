"""Knowledge documents (one stored object each) and their indexed chunks.

Lexical search: on PostgreSQL each chunk carries `search_vector` (to_tsvector('english'),
written with the chunk) under a GIN index; on SQLite an FTS5 table (`knowledge_chunks_fts`,
porter stemming) mirrors `text` through triggers, both created by migration 0011. Vectors are
float32 blobs compared in memory (app/knowledge/vectors.py).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import TSVECTOR
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, TimestampMixin, UTCDateTime, id_column

FTS_TABLE = "knowledge_chunks_fts"
PENDING, INDEXING, READY, FAILED = "pending", "indexing", "ready", "failed"
INDEX_STATUSES = (PENDING, INDEXING, READY, FAILED)


class KnowledgeDocument(TimestampMixin, Base):
    __tablename__ = "knowledge_documents"
    __table_args__ = (
        Index(
            "ix_knowledge_documents_organization_id_created_at_id",
            "organization_id",
            "created_at",
            "id",
        ),
    )

    id: Mapped[str] = id_column()
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    livemode: Mapped[bool] = mapped_column(Boolean, default=False)
    document_type: Mapped[str] = mapped_column(String(8))
    file_name: Mapped[str] = mapped_column(String(255))
    storage_key: Mapped[str] = mapped_column(String(512), unique=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    index_status: Mapped[str] = mapped_column(String(16), default=PENDING)
    index_error: Mapped[str | None] = mapped_column(Text, default=None)
    chunk_count: Mapped[int] = mapped_column(Integer, default=0)
    page_count: Mapped[int | None] = mapped_column(Integer, default=None)
    # Bumped by every (re-)index request; a job writes its result only for its own generation.
    index_generation: Mapped[int] = mapped_column(Integer, default=1)
    embedding_model: Mapped[str | None] = mapped_column(String(200), default=None)
    embedding_dimensions: Mapped[int | None] = mapped_column(Integer, default=None)
    indexed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)


class KnowledgeChunk(Base):
    __tablename__ = "knowledge_chunks"
    __table_args__ = (
        UniqueConstraint("document_id", "chunk_index"),
        Index("ix_knowledge_chunks_organization_id", "organization_id"),
        Index("ix_knowledge_chunks_search_vector", "search_vector", postgresql_using="gin"),
    )

    # An integer key: SQLite's FTS5 table refers to chunks by rowid.
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    document_id: Mapped[str] = mapped_column(
        ForeignKey("knowledge_documents.id", ondelete="CASCADE")
    )
    organization_id: Mapped[str] = mapped_column(String(36))
    chunk_index: Mapped[int] = mapped_column(Integer)
    page: Mapped[int | None] = mapped_column(Integer, default=None)
    page_end: Mapped[int | None] = mapped_column(Integer, default=None)
    text: Mapped[str] = mapped_column(Text)
    token_count: Mapped[int] = mapped_column(Integer)
    embedding: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    # PostgreSQL only (NULL on SQLite, whose FTS5 table indexes `text`).
    search_vector: Mapped[str | None] = mapped_column(
        TSVECTOR().with_variant(Text(), "sqlite"), default=None
    )
