"""knowledge base: documents, chunks, full-text indexes

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23 21:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import app.db.base

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# SQLite: an external-content FTS5 table over knowledge_chunks.text, kept by triggers.
SQLITE_FTS = (
    "CREATE VIRTUAL TABLE knowledge_chunks_fts USING fts5("
    "text, content='knowledge_chunks', content_rowid='id', tokenize='porter unicode61')",
    "CREATE TRIGGER knowledge_chunks_fts_insert AFTER INSERT ON knowledge_chunks BEGIN "
    "INSERT INTO knowledge_chunks_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER knowledge_chunks_fts_delete AFTER DELETE ON knowledge_chunks BEGIN "
    "INSERT INTO knowledge_chunks_fts(knowledge_chunks_fts, rowid, text) "
    "VALUES ('delete', old.id, old.text); END",
    "CREATE TRIGGER knowledge_chunks_fts_update AFTER UPDATE OF text ON knowledge_chunks BEGIN "
    "INSERT INTO knowledge_chunks_fts(knowledge_chunks_fts, rowid, text) "
    "VALUES ('delete', old.id, old.text); "
    "INSERT INTO knowledge_chunks_fts(rowid, text) VALUES (new.id, new.text); END",
)


def upgrade() -> None:
    op.create_table(
        "knowledge_documents",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("livemode", sa.Boolean(), nullable=False),
        sa.Column("document_type", sa.String(length=8), nullable=False),
        sa.Column("file_name", sa.String(length=255), nullable=False),
        sa.Column("storage_key", sa.String(length=512), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("index_status", sa.String(length=16), nullable=False),
        sa.Column("index_error", sa.Text(), nullable=True),
        sa.Column("chunk_count", sa.Integer(), nullable=False),
        sa.Column("page_count", sa.Integer(), nullable=True),
        sa.Column("index_generation", sa.Integer(), nullable=False),
        sa.Column("embedding_model", sa.String(length=200), nullable=True),
        sa.Column("embedding_dimensions", sa.Integer(), nullable=True),
        sa.Column("indexed_at", app.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_knowledge_documents_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_knowledge_documents")),
        sa.UniqueConstraint("storage_key", name=op.f("uq_knowledge_documents_storage_key")),
    )
    with op.batch_alter_table("knowledge_documents", schema=None) as batch_op:
        batch_op.create_index(
            "ix_knowledge_documents_organization_id_created_at_id",
            ["organization_id", "created_at", "id"],
            unique=False,
        )

    op.create_table(
        "knowledge_chunks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("document_id", sa.String(length=36), nullable=False),
        sa.Column("organization_id", sa.String(length=36), nullable=False),
        sa.Column("chunk_index", sa.Integer(), nullable=False),
        sa.Column("page", sa.Integer(), nullable=True),
        sa.Column("page_end", sa.Integer(), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("embedding", sa.LargeBinary(), nullable=True),
        sa.Column(
            "search_vector",
            postgresql.TSVECTOR().with_variant(sa.Text(), "sqlite"),
            nullable=True,
        ),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["knowledge_documents.id"],
            name=op.f("fk_knowledge_chunks_document_id_knowledge_documents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_knowledge_chunks")),
        sa.UniqueConstraint(
            "document_id", "chunk_index", name=op.f("uq_knowledge_chunks_document_id")
        ),
    )
    with op.batch_alter_table("knowledge_chunks", schema=None) as batch_op:
        batch_op.create_index(
            "ix_knowledge_chunks_organization_id", ["organization_id"], unique=False
        )
        batch_op.create_index(
            "ix_knowledge_chunks_search_vector",
            ["search_vector"],
            unique=False,
            postgresql_using="gin",
        )
    if op.get_bind().dialect.name == "sqlite":
        for statement in SQLITE_FTS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE IF EXISTS knowledge_chunks_fts")
    with op.batch_alter_table("knowledge_chunks", schema=None) as batch_op:
        batch_op.drop_index("ix_knowledge_chunks_search_vector", postgresql_using="gin")
        batch_op.drop_index("ix_knowledge_chunks_organization_id")
    op.drop_table("knowledge_chunks")
    with op.batch_alter_table("knowledge_documents", schema=None) as batch_op:
        batch_op.drop_index("ix_knowledge_documents_organization_id_created_at_id")
    op.drop_table("knowledge_documents")
