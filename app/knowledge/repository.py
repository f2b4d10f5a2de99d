"""Every query on knowledge documents and chunks, scoped to one organization."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    Integer,
    Select,
    String,
    TextualSelect,
    any_,
    bindparam,
    column,
    delete,
    func,
    insert,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY

from app.core.jsonutil import dumps_str
from app.kit.repository import OrgScopedRepository, tenant_condition
from app.knowledge.models import READY, KnowledgeChunk, KnowledgeDocument
from app.knowledge.schemas import DOCUMENT

_TERM = re.compile(r"[^\W_]+")
MAX_QUERY_TERMS = 32

# The searches are prepared reads (`_prepared`, built per dialect on first use): an agent's
# knowledge lookup in a live call reads in one driver round trip (app/db/prepared.py). The
# tenant condition in SQL text: `:org_id` is bound by `_bound`, as `tenant_condition`'s.
_FTS_SEARCH = (
    "SELECT c.id FROM knowledge_chunks_fts JOIN knowledge_chunks AS c"
    " ON c.id = knowledge_chunks_fts.rowid"
    " WHERE knowledge_chunks_fts MATCH :match AND c.organization_id = :org_id"
    " ORDER BY bm25(knowledge_chunks_fts) LIMIT :limit"
)


def _lexical_search(dialect_name: str) -> Select[Any] | TextualSelect:
    if dialect_name != "postgresql":
        return text(_FTS_SEARCH).columns(column("id", Integer))
    query = func.to_tsquery(literal_column("'english'"), bindparam("match"))
    return (
        select(KnowledgeChunk.id)
        .where(tenant_condition(KnowledgeChunk), KnowledgeChunk.search_vector.op("@@")(query))
        # Normalisation 1: divided by 1 + log(length), so long chunks do not win by size alone.
        .order_by(
            func.ts_rank(KnowledgeChunk.search_vector, query, literal_column("1")).desc(),
            KnowledgeChunk.id,
        )
        .limit(bindparam("limit"))
    )


def _chunks_by_id(dialect_name: str) -> Select[*tuple[Any, ...]]:
    # The ids are one bound value (a prepared statement has no IN list): an array on
    # PostgreSQL, a JSON array on SQLite.
    if dialect_name == "postgresql":
        wanted = KnowledgeChunk.id == any_(bindparam("ids", type_=ARRAY(Integer)))
    else:
        ids = func.json_each(bindparam("ids", type_=String))
        wanted = KnowledgeChunk.id.in_(select(column("value", Integer)).select_from(ids))
    return (
        select(
            KnowledgeChunk.id,
            KnowledgeChunk.document_id,
            KnowledgeDocument.file_name,
            KnowledgeChunk.chunk_index,
            KnowledgeChunk.text,
            KnowledgeChunk.page,
        )
        .join(KnowledgeDocument, KnowledgeDocument.id == KnowledgeChunk.document_id)
        .where(tenant_condition(KnowledgeChunk), wanted)
    )


# Question words and glue that match nearly every passage: dropped from queries (PostgreSQL's
# english configuration drops them too; FTS5 has no stop list, and an OR over them would rank
# every chunk).
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "could",
        "do",
        "does",
        "did",
        "for",
        "from",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "should",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)


def query_terms(query: str) -> list[str]:
    """The words of a query, lowercased, without repeats or stop words (kept when the query
    has nothing else): plain letters and digits only, so nothing of the FTS5 or tsquery
    syntax can come through."""
    terms = list(dict.fromkeys(term.lower() for term in _TERM.findall(query)))
    content = [term for term in terms if term not in STOP_WORDS]
    return (content or terms)[:MAX_QUERY_TERMS]


@dataclass(frozen=True, slots=True)
class ChunkRow:
    chunk_index: int
    text: str
    page: int | None
    page_end: int | None
    token_count: int
    embedding: bytes | None


class KnowledgeRepository(OrgScopedRepository[KnowledgeDocument]):
    model = KnowledgeDocument
    resource = "Document"
    list_columns: ClassVar = DOCUMENT.columns(
        KnowledgeDocument.storage_key, KnowledgeDocument.size_bytes, KnowledgeDocument.livemode
    )

    async def all_documents(self) -> list[Any]:
        """Every document of the organization, newest first (the documented list has no pages;
        `knowledge_max_documents` bounds it)."""
        rows = await self._execute(
            select(*self.list_columns)
            .where(self._org_bound())
            .order_by(KnowledgeDocument.created_at.desc(), KnowledgeDocument.id.desc())
        )
        return list(rows.all())

    async def delete_chunks(self, document_id: str) -> None:
        await self._execute(
            delete(KnowledgeChunk).where(
                self._org_bound(KnowledgeChunk), KnowledgeChunk.document_id == document_id
            )
        )

    async def insert_chunks(self, document_id: str, chunks: Sequence[ChunkRow]) -> None:
        if not chunks:
            return
        values: dict[str, Any] = {
            "document_id": document_id,
            "organization_id": self.organization_id,
            "chunk_index": bindparam("chunk_index"),
            "page": bindparam("page"),
            "page_end": bindparam("page_end"),
            "text": bindparam("text"),
            "token_count": bindparam("token_count"),
            "embedding": bindparam("embedding"),
        }
        if self.dialect_name == "postgresql":
            values["search_vector"] = func.to_tsvector(
                literal_column("'english'"), bindparam("text")
            )
        await self.session.execute(
            insert(KnowledgeChunk).values(values),
            [
                {
                    "chunk_index": chunk.chunk_index,
                    "page": chunk.page,
                    "page_end": chunk.page_end,
                    "text": chunk.text,
                    "token_count": chunk.token_count,
                    "embedding": chunk.embedding,
                }
                for chunk in chunks
            ],
        )

    async def lexical_search(self, terms: Sequence[str], limit: int) -> list[int]:
        """Chunk ids best first: BM25 over FTS5 on SQLite, ts_rank on PostgreSQL; any of the
        terms matches (stemmed)."""
        if not terms:
            return []
        postgresql = self.dialect_name == "postgresql"
        match = " | ".join(terms) if postgresql else " OR ".join(f'"{term}"' for term in terms)
        read = self._prepared(("lexical_search",), lambda: _lexical_search(self.dialect_name))
        rows = await read.all(self.session, self._bound({"match": match, "limit": limit}))
        return [row[0] for row in rows]

    async def chunks_by_id(self, chunk_ids: Sequence[int]) -> dict[int, Any]:
        if not chunk_ids:
            return {}
        postgresql = self.dialect_name == "postgresql"
        ids = list(chunk_ids) if postgresql else dumps_str(list(chunk_ids))
        read = self._prepared(("chunks_by_id",), lambda: _chunks_by_id(self.dialect_name))
        rows = await read.all(self.session, self._bound({"ids": ids}))
        return {row.id: row for row in rows}

    async def vector_version(self, model: str) -> tuple[int, int, datetime | None]:
        """Changes whenever the set of searchable vectors of `model` changes."""
        statement = select(
            func.count(),
            func.coalesce(func.sum(KnowledgeDocument.chunk_count), 0),
            func.max(KnowledgeDocument.indexed_at),
        ).where(
            self._org_bound(),
            KnowledgeDocument.index_status == READY,
            KnowledgeDocument.embedding_model == model,
        )
        row: Any = (await self._execute(statement)).one()
        return int(row[0]), int(row[1]), row[2]

    async def vectors(
        self, model: str, chunk_ids: Sequence[int] | None = None
    ) -> list[tuple[int, bytes]]:
        """(chunk id, vector) of the organization's ready chunks of `model` (or of those ids)."""
        statement = (
            select(KnowledgeChunk.id, KnowledgeChunk.embedding)
            .join(KnowledgeDocument, KnowledgeDocument.id == KnowledgeChunk.document_id)
            .where(
                self._org_bound(KnowledgeChunk),
                KnowledgeDocument.index_status == READY,
                KnowledgeDocument.embedding_model == model,
                KnowledgeChunk.embedding.is_not(None),
            )
        )
        if chunk_ids is not None:
            statement = statement.where(KnowledgeChunk.id.in_(list(chunk_ids)))
        rows = await self._execute(statement)
        return [(int(row[0]), bytes(row[1] or b"")) for row in rows.all()]

    async def mark(self, document_id: str, generation: int, **values: Any) -> bool:
        """Set `values` on the document if it still waits for this generation's result."""
        result = await self._execute(
            update(KnowledgeDocument)
            .where(
                self._org_bound(),
                KnowledgeDocument.id == document_id,
                KnowledgeDocument.index_generation == generation,
            )
            .values(**values)
            .returning(KnowledgeDocument.id)
        )
        return result.first() is not None

    async def storage_key_in_use(self, storage_key: str) -> bool:
        found = await self._execute(
            self.scoped(select(KnowledgeDocument.id)).where(
                KnowledgeDocument.storage_key == storage_key
            )
        )
        return found.first() is not None
