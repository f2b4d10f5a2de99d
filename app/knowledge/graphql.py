"""Knowledge base types and fields; each field calls one knowledge service operation.

Uploads are REST only (`POST /api/v1/knowledge-base/upload`, a streamed multipart body);
GraphQL lists, searches, deletes and re-indexes. Index status changes arrive on the `events`
subscription as `knowledge.document.updated`.
"""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.types import Info

from app.access.scopes import Scope
from app.graphql.context import Context
from app.graphql.errors import as_graphql_error
from app.graphql.permissions import requires
from app.graphql.resource import DomainMutations, Payload, node_field
from app.kit.errors import DomainError, InvalidInput, NotFound
from app.kit.validation import parse_model
from app.knowledge import service
from app.knowledge.runtime import knowledge_runtime
from app.knowledge.schemas import DEFAULT_TOP_K, DOCUMENT, KnowledgeDocument, KnowledgeSearch


@strawberry.type(description="A passage of a document that matches a search.")
class KnowledgeSearchResult:
    document_id: strawberry.ID
    file_name: str
    chunk_index: int
    text: str
    score: float = strawberry.field(description="Reciprocal rank fusion score; higher is better")
    page: int | None = strawberry.field(description="PDF page the passage starts on")


def as_document(row: Any) -> KnowledgeDocument:
    return DOCUMENT.as_graphql(row)


DOCUMENTS = DomainMutations(
    "KnowledgeDocument",
    scope=Scope.FULL_ACCESS,
    errors=(InvalidInput, NotFound),
    node=KnowledgeDocument,
    as_node=as_document,
    node_field="document",
)


@strawberry.type
class Query:
    @strawberry.field(
        extensions=requires(Scope.FULL_ACCESS),
        description="The organization's documents, newest first.",
    )
    async def knowledge_documents(
        self, info: Info[Context, None]
    ) -> list[KnowledgeDocument] | None:
        context = info.context
        async with context.db() as session:
            rows = await service.list_documents(session, context.require_subject())
        return [as_document(row) for row in rows]

    knowledge_document = node_field(
        Scope.FULL_ACCESS, service.get_document, as_document, KnowledgeDocument
    )

    @strawberry.field(
        extensions=requires(Scope.FULL_ACCESS),
        description="Passages of the organization's documents that answer `query`, best first "
        "(lexical ranking fused with vector similarity when embeddings are configured).",
    )
    async def search_knowledge(
        self, info: Info[Context, None], query: str, top_k: int = DEFAULT_TOP_K
    ) -> list[KnowledgeSearchResult] | None:
        context = info.context
        try:
            data = parse_model(KnowledgeSearch, {"query": query, "top_k": top_k}, "input")
            async with context.db() as session:
                results = await service.search(
                    session,
                    knowledge_runtime(context.resources.settings),
                    context.require_subject(),
                    data,
                )
        except DomainError as exc:
            raise as_graphql_error(exc) from exc
        return [
            KnowledgeSearchResult(
                document_id=strawberry.ID(result["document_id"]),
                file_name=result["file_name"],
                chunk_index=result["chunk_index"],
                text=result["text"],
                score=result["score"],
                page=result["page"],
            )
            for result in results
        ]


@strawberry.type
class Mutation:
    @DOCUMENTS.mutation(payload=DOCUMENTS.delete_payload)
    async def delete_knowledge_document(
        self, info: Info[Context, None], id: strawberry.ID
    ) -> Payload:
        return await DOCUMENTS.delete(info, id, service.delete_document)

    @DOCUMENTS.mutation(description="Index the document again (status back to pending).")
    async def reindex_knowledge_document(
        self, info: Info[Context, None], id: strawberry.ID
    ) -> Payload:
        return await DOCUMENTS.perform(
            info,
            lambda session, subject: service.reindex_document(session, subject, id),
            DOCUMENTS.node_answer,
        )
