"""/api/v1/knowledge-base: routes → knowledge service → the JSON shapes of docs/api.md."""

from __future__ import annotations

from starlette.responses import Response, StreamingResponse

from app.access.scopes import Scope
from app.knowledge import service
from app.knowledge.filetypes import DocumentType, content_disposition
from app.knowledge.runtime import knowledge_runtime
from app.knowledge.schemas import (
    KnowledgeDocumentList,
    KnowledgeDocumentResponse,
    KnowledgeSearch,
    KnowledgeSearchResponse,
    document_to_public,
)
from rest_compat.endpoint import Operation, RequestContext, json_response
from rest_compat.resource import delete_handler, get_handler


async def upload_document(ctx: RequestContext) -> Response:
    # The credential's read ends before the body streams in; the service opens its own writes.
    await ctx.session.commit()
    headers = ctx.request.headers
    document = await service.upload_document(
        ctx.resources,
        knowledge_runtime(ctx.resources.settings),
        ctx.subject,
        ctx.request.stream(),
        headers.get("content-type"),
        headers.get("content-length"),
    )
    return json_response(document_to_public(document), status_code=201)


async def list_documents(ctx: RequestContext) -> Response:
    rows = await service.list_documents(ctx.session, ctx.subject)
    return json_response({"documents": [document_to_public(row) for row in rows]})


async def download_document(ctx: RequestContext) -> Response:
    document, stored = await service.open_download(
        ctx.session,
        knowledge_runtime(ctx.resources.settings),
        ctx.subject,
        ctx.path_param("document_id"),
    )
    document_type = DocumentType(document.document_type)
    # Headers set directly: Starlette would append a charset to a text/* media type.
    return StreamingResponse(
        stored.chunks,
        headers={
            "Content-Type": document_type.content_type,
            "Content-Disposition": content_disposition(document.file_name, document_type),
            "Content-Length": str(stored.size),
            "X-Content-Type-Options": "nosniff",
        },
    )


async def reindex_document(ctx: RequestContext) -> Response:
    document = await service.reindex_document(
        ctx.session, ctx.subject, ctx.path_param("document_id")
    )
    return json_response(document_to_public(document), status_code=202)


async def search_knowledge(ctx: RequestContext) -> Response:
    results = await service.search(
        ctx.session,
        knowledge_runtime(ctx.resources.settings),
        ctx.subject,
        ctx.body(KnowledgeSearch),
    )
    return json_response({"results": results})


get_document = get_handler(service.get_document, "document_id", document_to_public)
delete_document = delete_handler(service.delete_document, "document_id")

_TAG = "knowledge-base"
OPERATIONS = (
    Operation(
        "POST",
        "/knowledge-base/upload",
        upload_document,
        Scope.FULL_ACCESS,
        "Upload a PDF, DOCX or TXT file (multipart field `file`); indexing follows",
        _TAG,
        status_code=201,
        response_model=KnowledgeDocumentResponse,
        errors=(400, 413, 422),
        streams_body=True,
        upload_limit=service.upload_limit,
    ),
    Operation(
        "GET",
        "/knowledge-base",
        list_documents,
        Scope.FULL_ACCESS,
        "List the organization's documents (newest first, no pagination)",
        _TAG,
        response_model=KnowledgeDocumentList,
    ),
    Operation(
        "POST",
        "/knowledge-base/search",
        search_knowledge,
        Scope.FULL_ACCESS,
        "Search the organization's documents (lexical fused with vector similarity)",
        _TAG,
        request_model=KnowledgeSearch,
        response_model=KnowledgeSearchResponse,
        errors=(422,),
    ),
    Operation(
        "GET",
        "/knowledge-base/{document_id}",
        get_document,
        Scope.FULL_ACCESS,
        "Get a document and its index status",
        _TAG,
        response_model=KnowledgeDocumentResponse,
        errors=(404,),
    ),
    Operation(
        "GET",
        "/knowledge-base/{document_id}/download",
        download_document,
        Scope.FULL_ACCESS,
        "Download the stored file, byte for byte",
        _TAG,
        errors=(404,),
        binary_response=tuple(document_type.content_type for document_type in DocumentType),
    ),
    Operation(
        "DELETE",
        "/knowledge-base/{document_id}",
        delete_document,
        Scope.FULL_ACCESS,
        "Delete a document, its stored file and its index entries",
        _TAG,
        status_code=204,
        errors=(404,),
    ),
    Operation(
        "POST",
        "/knowledge-base/{document_id}/reindex",
        reindex_document,
        Scope.FULL_ACCESS,
        "Index the document again (status back to pending)",
        _TAG,
        status_code=202,
        response_model=KnowledgeDocumentResponse,
        errors=(404,),
    ),
)
