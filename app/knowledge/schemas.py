"""Knowledge base inputs shared by REST and GraphQL, and the public (REST) shapes."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import strawberry
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from app.kit.shape import Rest, Shape, column
from app.kit.validation import json_integer
from app.knowledge import models

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


@strawberry.type(description="An uploaded document (PDF, DOCX or TXT) and its index state.")
class KnowledgeDocument:
    """The public shape, declared once (app/kit/shape.py)."""

    id: strawberry.ID = column(models.KnowledgeDocument.id, as_type=strawberry.ID)
    document_type: str = column(
        models.KnowledgeDocument.document_type,
        description="pdf, docx or txt",
        rest=Rest(annotation=Literal["pdf", "docx", "txt"]),
    )
    file_name: str = column(
        models.KnowledgeDocument.file_name, description="The original file name (sanitised)"
    )
    uploaded_at: datetime = column(models.KnowledgeDocument.created_at)
    updated_at: datetime = column(models.KnowledgeDocument.updated_at)
    index_status: str = column(
        models.KnowledgeDocument.index_status,
        description="pending, indexing, ready or failed",
        rest=Rest(annotation=IndexStatus),
    )
    index_error: str | None = column(
        models.KnowledgeDocument.index_error, description="Why indexing failed, if it did"
    )
    chunk_count: int = column(models.KnowledgeDocument.chunk_count)


DOCUMENT = Shape(
    KnowledgeDocument,
    rest_name="KnowledgeDocumentResponse",
    rest_doc="The documented KnowledgeDocumentResponse (docs/api.md) plus the index state.",
    rest_only=(
        ("organization_id", models.KnowledgeDocument.organization_id, Rest(annotation=str)),
    ),
    rest_order=(
        "id",
        "organization_id",
        "document_type",
        "file_name",
        "uploaded_at",
        "updated_at",
        "index_status",
        "index_error",
        "chunk_count",
    ),
)
KnowledgeDocumentResponse = DOCUMENT.rest_model
document_to_public = DOCUMENT.to_public


class KnowledgeDocumentList(BaseModel):
    # The derived model is a value to mypy (app/kit/shape.py); pydantic reads it as a class.
    documents: list[KnowledgeDocumentResponse]  # type: ignore[valid-type]


class KnowledgeSearchResult(BaseModel):
    document_id: str
    file_name: str
    chunk_index: int
    text: str
    score: float
    page: int | None


class KnowledgeSearchResponse(BaseModel):
    results: list[KnowledgeSearchResult]
