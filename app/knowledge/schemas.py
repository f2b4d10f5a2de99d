"""Knowledge base inputs shared by REST and GraphQL, and the public (REST) shapes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from app.kit.validation import json_integer

MAX_QUERY_LENGTH = 1000
DEFAULT_TOP_K = 5
MAX_TOP_K = 50

IndexStatus = Literal["pending", "indexing", "ready", "failed"]


class KnowledgeSearch(BaseModel):
    model_config = ConfigDict(extra="ignore")

    query: Annotated[
        str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_QUERY_LENGTH)
    ]
    # Strict, as every number of the API: "5" is refused, not read as 5.
    top_k: Annotated[int, BeforeValidator(json_integer)] = Field(
        default=DEFAULT_TOP_K, ge=1, le=MAX_TOP_K
    )


class KnowledgeDocumentResponse(BaseModel):
    """The documented KnowledgeDocumentResponse (docs/api.md) plus the index state."""

    id: str
    organization_id: str
    document_type: Literal["pdf", "docx", "txt"]
    file_name: str
    uploaded_at: str
    updated_at: str
    index_status: IndexStatus
    index_error: str | None
    chunk_count: int


class KnowledgeDocumentList(BaseModel):
    documents: list[KnowledgeDocumentResponse]


class KnowledgeSearchResult(BaseModel):
    document_id: str
    file_name: str
    chunk_index: int
    text: str
    score: float
    page: int | None


class KnowledgeSearchResponse(BaseModel):
    results: list[KnowledgeSearchResult]


def document_to_public(document: Any) -> dict[str, Any]:
    return {
        "id": document.id,
        "organization_id": document.organization_id,
        "document_type": document.document_type,
        "file_name": document.file_name,
        "uploaded_at": document.created_at,
        "updated_at": document.updated_at,
        "index_status": document.index_status,
        "index_error": document.index_error,
        "chunk_count": document.chunk_count,
    }
