"""Knowledge base operations: the resolvers REST and GraphQL both call, and the indexing job.

Uploads and indexing own their transactions (unlike other services, which never commit): the
object write sits between database writes, and the order is what keeps the two consistent:

1. a collector job for the new object's key is committed first, due later;
2. the object is written;
3. the document row and its indexing job are committed; if that fails the object is deleted
   at once, and if the process dies first the collector deletes it (it removes an object
   no document names).

Deleting a document removes its row and chunks and schedules the same collector in one
transaction, so the object goes only once the row is gone, and always goes after.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.config import Settings
from app.core.clock import utcnow
from app.core.ids import new_id
from app.events.service import emit
from app.events.types import DOCUMENT_UPDATED
from app.kit import outbox
from app.kit.errors import InvalidInput, NotFound, RateLimited
from app.kit.multipart import PartInspector, ReceivedFile, receive_file
from app.knowledge.chunking import chunk_pages
from app.knowledge.embeddings import EmbeddingFailed, pack
from app.knowledge.extraction import ExtractionFailed, extract_document
from app.knowledge.filetypes import (
    ContentSniffer,
    DocumentType,
    check_docx_container,
    claimed_type,
    display_name,
    storage_name,
)
from app.knowledge.fusion import reciprocal_rank_fusion
from app.knowledge.models import FAILED, INDEXING, PENDING, READY, KnowledgeDocument
from app.knowledge.repository import ChunkRow, KnowledgeRepository, query_terms
from app.knowledge.runtime import KnowledgeRuntime
from app.knowledge.schemas import KnowledgeSearch, document_to_public
from app.knowledge.storage import ObjectMissing, StoredObject
from app.organizations.repository import lock_organization
from app.resources import Resources

logger = structlog.get_logger("switchboard.knowledge")

INDEX_ACTOR = "knowledge.index_document"
COLLECT_ACTOR = "knowledge.collect_object"
KNOWLEDGE_QUEUE = "knowledge"
# Long enough for any upload to finish writing its row after its object.
COLLECT_AFTER = timedelta(minutes=15)
DOCUMENT = "Document"
FILE_FIELD = "file"
# Lexical and vector lists each bring this many candidates (at least) to the fusion.
MIN_CANDIDATES = 50


# --- upload --------------------------------------------------------------------------------


def upload_limit(settings: Settings) -> int:
    """The largest file an upload takes (413 beyond)."""
    return settings.knowledge_max_upload_bytes


def _inspector(file_name: str) -> PartInspector:
    return ContentSniffer(claimed_type(display_name(file_name)))


async def upload_document(
    resources: Resources,
    runtime: KnowledgeRuntime,
    subject: Subject,
    body: AsyncIterator[bytes],
    content_type: str | None,
    content_length: str | None,
) -> KnowledgeDocument:
    """Receive, check, store and register one uploaded file; its indexing job follows."""
    settings = resources.settings
    organization_id = subject.organization_id
    decision = await resources.rate_limiter.hit(
        f"knowledge-upload:{organization_id}", settings.knowledge_upload_limit
    )
    if not decision.allowed:
        raise RateLimited(decision.retry_after)
    # Early, so a full organization's upload is refused before it streams; the count that
    # decides is taken again with the document's insert (`_store`).
    async with resources.session(writes=False) as session:
        await _check_room(KnowledgeRepository(session, organization_id), settings)
    received = await receive_file(
        body,
        content_type,
        content_length,
        field_name=FILE_FIELD,
        max_bytes=upload_limit(settings),
        inspect=_inspector,
    )
    try:
        return await _store(resources, runtime, subject, received)
    finally:
        received.close()


async def _store(
    resources: Resources, runtime: KnowledgeRuntime, subject: Subject, received: ReceivedFile
) -> KnowledgeDocument:
    file_name = display_name(received.filename)
    document_type = claimed_type(file_name)
    if document_type is DocumentType.DOCX:
        # Off the loop: a directory of a thousand entries still takes a while to parse.
        await asyncio.to_thread(check_docx_container, received.file, runtime.zip_limits)
        received.file.seek(0)
    organization_id = subject.organization_id
    document_id = new_id()
    key = f"knowledge/{organization_id}/{document_id}/{storage_name(file_name, document_type)}"
    async with resources.session(writes=True) as session:
        _collect_later(session, organization_id, key)
        await session.commit()
    await runtime.store.put(key, received.file, document_type.content_type)
    try:
        async with resources.session(writes=True) as session:
            # Counted and inserted under the organization's lock: concurrent uploads cannot
            # all see room for one more.
            await lock_organization(session, organization_id)
            await _check_room(KnowledgeRepository(session, organization_id), resources.settings)
            document = KnowledgeDocument(
                id=document_id,
                organization_id=organization_id,
                livemode=subject.livemode,
                document_type=document_type.value,
                file_name=file_name,
                storage_key=key,
                size_bytes=received.size,
                sha256=received.sha256,
                index_status=PENDING,
                chunk_count=0,
                index_generation=1,
            )
            session.add(document)
            await session.flush()
            _schedule_index(session, document)
            await session.commit()
    except BaseException:
        with contextlib.suppress(Exception):  # the collector job covers a failed delete
            await runtime.store.delete(key)
        raise
    return document


async def _check_room(repository: KnowledgeRepository, settings: Settings) -> None:
    if await repository.count() >= settings.knowledge_max_documents:
        raise InvalidInput(
            f"An organization can hold at most {settings.knowledge_max_documents} documents; "
            "delete some before uploading more"
        )


def _collect_later(session: AsyncSession, organization_id: str, key: str) -> None:
    outbox.schedule(
        session,
        COLLECT_ACTOR,
        organization_id,
        key,
        queue=KNOWLEDGE_QUEUE,
        at=utcnow() + COLLECT_AFTER,
    )


def _schedule_index(session: AsyncSession, document: KnowledgeDocument) -> None:
    outbox.schedule(
        session,
        INDEX_ACTOR,
        document.organization_id,
        document.id,
        document.index_generation,
        queue=KNOWLEDGE_QUEUE,
    )


# --- reads, delete, re-index -----------------------------------------------------------------


async def list_documents(session: AsyncSession, subject: Subject) -> list[Any]:
    return await KnowledgeRepository(session, subject).all_documents()


async def get_document(session: AsyncSession, subject: Subject, document_id: str) -> Any:
    return await KnowledgeRepository(session, subject).get_row_or_404(document_id)


async def open_download(
    session: AsyncSession, runtime: KnowledgeRuntime, subject: Subject, document_id: str
) -> tuple[Any, StoredObject]:
    document = await get_document(session, subject, document_id)
    try:
        stored = await runtime.store.open(document.storage_key)
    except ObjectMissing:
        logger.error("stored object missing", document_id=document.id)
        raise NotFound(DOCUMENT) from None
    return document, stored


async def delete_document(session: AsyncSession, subject: Subject, document_id: str) -> str:
    """Remove the document and its index entries; its object goes right after commit."""
    repository = KnowledgeRepository(session, subject)
    document = await repository.get_or_404(document_id)
    await repository.delete_chunks(document.id)
    await repository.delete(document)
    outbox.schedule(
        session,
        COLLECT_ACTOR,
        document.organization_id,
        document.storage_key,
        queue=KNOWLEDGE_QUEUE,
    )
    return document.id


async def reindex_document(
    session: AsyncSession, subject: Subject, document_id: str
) -> KnowledgeDocument:
    """Index the document again (a new generation: any run in flight is discarded)."""
    repository = KnowledgeRepository(session, subject)
    document = await repository.get_or_404(document_id)
    document.index_generation += 1
    document.index_status = PENDING
    document.index_error = None
    document.updated_at = utcnow()
    await session.flush()
    _schedule_index(session, document)
    await emit(session, document, DOCUMENT_UPDATED, document_to_public(document))
    return document


# --- search -------------------------------------------------------------------------------


async def search(
    session: AsyncSession, runtime: KnowledgeRuntime, subject: Subject, data: KnowledgeSearch
) -> list[dict[str, Any]]:
    """Lexical ranking fused with vector similarity (when an embedder is configured) by
    reciprocal rank fusion; only the caller's organization's chunks are ever read."""
    repository = KnowledgeRepository(session, subject)
    depth = max(MIN_CANDIDATES, data.top_k * 4)
    lexical = await repository.lexical_search(query_terms(data.query), depth)
    rankings = [lexical]
    embedder = runtime.embedder
    if embedder.enabled:
        try:
            query = (await embedder.embed([data.query]))[0]
        except EmbeddingFailed as exc:
            # Search stays up on lexical ranking alone while the embedder is away.
            logger.warning("query embedding failed; lexical only", reason=str(exc))
        else:
            rankings.append(
                await runtime.vectors.nearest(repository, embedder.model, query, depth, lexical)
            )
    fused = reciprocal_rank_fusion(rankings)[: data.top_k]
    rows = await repository.chunks_by_id([chunk_id for chunk_id, _ in fused])
    return [
        {
            "document_id": row.document_id,
            "file_name": row.file_name,
            "chunk_index": row.chunk_index,
            "text": row.text,
            "score": round(score, 6),
            "page": row.page,
        }
        for chunk_id, score in fused
        if (row := rows.get(chunk_id)) is not None
    ]


# --- jobs ---------------------------------------------------------------------------------

Settle = Callable[[AsyncSession], Awaitable[None]]


async def index_document(
    resources: Resources,
    runtime: KnowledgeRuntime,
    organization_id: str,
    document_id: str,
    generation: int,
    settle: Settle,
) -> None:
    """Extract, chunk, embed and index one document generation; the outcome (ready, or failed
    with its reason) is written with the job's completion."""
    async with resources.session(writes=True) as session:
        repository = KnowledgeRepository(session, organization_id)
        document = await repository.get(document_id)
        if document is None or document.index_generation != generation:
            await settle(session)  # deleted, or superseded by a newer re-index
            await session.commit()
            return
        document_type, storage_key = document.document_type, document.storage_key
        if document.index_status != INDEXING:
            document.index_status = INDEXING
            document.updated_at = utcnow()
            await session.flush()
            await emit(session, document, DOCUMENT_UPDATED, document_to_public(document))
        await session.commit()
    try:
        chunks, page_count, embedding_model, dimensions = await _build_index(
            runtime, storage_key, document_type
        )
    except (ExtractionFailed, EmbeddingFailed, ObjectMissing) as exc:
        reason = "The stored file is missing" if isinstance(exc, ObjectMissing) else str(exc)
        await _finish(resources, organization_id, document_id, generation, settle, reason=reason)
        return
    await _finish(
        resources,
        organization_id,
        document_id,
        generation,
        settle,
        chunks=chunks,
        values={
            "page_count": page_count,
            "embedding_model": embedding_model,
            "embedding_dimensions": dimensions,
        },
    )


async def _build_index(
    runtime: KnowledgeRuntime, storage_key: str, document_type: str
) -> tuple[list[ChunkRow], int | None, str | None, int | None]:
    settings_limits = runtime.extraction
    async with runtime.store.local_copy(storage_key) as path:
        pages = await extract_document(path, document_type, settings_limits)
    # CPU work on millions of characters: off the event loop other jobs share.
    chunks = await asyncio.to_thread(
        chunk_pages, pages, runtime.chunk_tokens, runtime.chunk_overlap
    )
    if not chunks:
        raise ExtractionFailed("The document contains no extractable text")
    page_count = len(pages) if document_type == DocumentType.PDF else None
    embedder = runtime.embedder
    vectors = None
    if embedder.enabled:
        vectors = await embedder.embed([chunk.text for chunk in chunks])
        if vectors.shape[0] != len(chunks):
            raise EmbeddingFailed("The embedder returned the wrong number of vectors")
    rows = [
        ChunkRow(
            chunk_index=chunk.index,
            text=chunk.text,
            page=chunk.page,
            page_end=chunk.page_end,
            token_count=chunk.token_count,
            embedding=pack(vectors[index]) if vectors is not None else None,
        )
        for index, chunk in enumerate(chunks)
    ]
    if vectors is None:
        return rows, page_count, None, None
    return rows, page_count, embedder.model, int(vectors.shape[1])


async def _finish(
    resources: Resources,
    organization_id: str,
    document_id: str,
    generation: int,
    settle: Settle,
    *,
    chunks: list[ChunkRow] | None = None,
    values: dict[str, Any] | None = None,
    reason: str | None = None,
) -> None:
    async with resources.session(writes=True) as session:
        repository = KnowledgeRepository(session, organization_id)
        now = utcnow()
        outcome: dict[str, Any] = {
            "index_status": READY if reason is None else FAILED,
            "index_error": reason,
            "chunk_count": len(chunks or ()),
            "indexed_at": now,
            "updated_at": now,
            **(values or {}),
        }
        if await repository.mark(document_id, generation, **outcome):
            await repository.delete_chunks(document_id)
            await repository.insert_chunks(document_id, chunks or [])
            document = await repository.get(document_id)
            if document is not None:
                await session.refresh(document)
                await emit(session, document, DOCUMENT_UPDATED, document_to_public(document))
        await settle(session)
        await session.commit()


async def collect_object(
    resources: Resources, runtime: KnowledgeRuntime, organization_id: str, key: str
) -> None:
    """Delete the object at `key` unless a document names it (after a delete, or an upload
    that never registered its document)."""
    async with resources.session(writes=False) as session:
        in_use = await KnowledgeRepository(session, organization_id).storage_key_in_use(key)
    if not in_use:
        await runtime.store.delete(key)
