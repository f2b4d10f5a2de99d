"""Template inputs shared by REST and GraphQL, and the public (REST) shape."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any
from uuid import UUID

import strawberry
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from strawberry.scalars import JSON

from app.kit.pagination import MAX_LIMIT
from app.kit.shape import SAME, Rest, Shape, column
from app.kit.validation import free_form_json
from app.templates import models
from app.templates.models import TemplateCategory

MAX_COMPONENTS = 10
# Keeps the row offset inside a 64-bit integer (SQLite refuses larger ones).
MAX_PAGE = 2**31 - 1
MAX_COMPONENT_BUTTONS = 20  # the content rule (10) is the validator's: this only bounds input

TemplateName = Annotated[
    str, StringConstraints(min_length=1, max_length=255, pattern=r"^[a-z0-9_]+$")
]
# `en_US`, `es`, `pt_BR`, `zh_Hant_HK`…
Language = Annotated[
    str, StringConstraints(min_length=2, max_length=20, pattern=r"^[A-Za-z]{2,3}(_[A-Za-z0-9]+)*$")
]
ShortText = Annotated[str, StringConstraints(max_length=100)]


class ComponentType(StrEnum):
    HEADER = "HEADER"
    BODY = "BODY"
    FOOTER = "FOOTER"
    BUTTONS = "BUTTONS"


class HeaderFormat(StrEnum):
    TEXT = "TEXT"
    IMAGE = "IMAGE"
    VIDEO = "VIDEO"
    DOCUMENT = "DOCUMENT"


class ButtonType(StrEnum):
    QUICK_REPLY = "QUICK_REPLY"
    URL = "URL"
    PHONE_NUMBER = "PHONE_NUMBER"
    OTP = "OTP"


class _FreeFormExtras(BaseModel):
    """Keys beyond the declared ones are kept for the platform, within the free-form JSON
    limits every other JSON input has (the document shows them as FreeFormJson)."""

    @model_validator(mode="after")
    def _extras_within_limits(self) -> _FreeFormExtras:
        free_form_json(self.model_extra or {})
        return self


class Button(_FreeFormExtras):
    model_config = ConfigDict(extra="allow")

    type: ButtonType
    text: str | None = Field(default=None, max_length=2000)
    url: str | None = Field(default=None, max_length=2000)
    phone_number: str | None = Field(default=None, max_length=50)


class Component(_FreeFormExtras):
    """One component; Meta's content rules (lengths, variables, button mix) are the
    pre-flight validator's, so a template breaking them is stored and REJECTED by name."""

    model_config = ConfigDict(extra="allow")

    type: ComponentType
    format: HeaderFormat | None = None
    text: str | None = Field(default=None, max_length=4096)
    buttons: list[Button] | None = Field(default=None, max_length=MAX_COMPONENT_BUTTONS)
    example: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _example_within_limits(self) -> Component:
        free_form_json(self.example or {})
        return self

    def as_platform(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class TemplateContent(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: TemplateName
    language: Language
    category: TemplateCategory
    components: list[Component] = Field(max_length=MAX_COMPONENTS)

    def platform_components(self) -> list[dict[str, Any]]:
        return [component.as_platform() for component in self.components]


class TemplateCreate(TemplateContent):
    channel_id: UUID


class TemplateValidate(TemplateContent):
    """A dry run: the same fields, the channel not needed."""


class TemplateSync(BaseModel):
    model_config = ConfigDict(extra="ignore")

    channel_id: UUID


class LibraryQuery(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    channel_id: UUID
    search: ShortText | None = None
    topic: ShortText | None = None
    usecase: ShortText | None = None
    industry: ShortText | None = None
    language: ShortText | None = None
    name: ShortText | None = None


class LibraryCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    channel_id: UUID
    name: TemplateName
    language: Language | None = None
    # Example values of the library body's positional parameters, in order.
    body_params: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] | None = (
        Field(default=None, max_length=20)
    )


class TemplatePageQuery(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    limit: int = Field(default=100, ge=1, le=MAX_LIMIT)
    page: int = Field(default=1, ge=1, le=MAX_PAGE)


@strawberry.type(description="A message template registered with the messaging platform.")
class MessageTemplate:
    """The public shape, declared once (app/kit/shape.py)."""

    id: strawberry.ID = column(models.MessageTemplate.id, as_type=strawberry.ID)
    account_id: str = column(
        models.MessageTemplate.organization_id  # the seed's name for the organization
    )
    channel_id: str = column(models.MessageTemplate.channel_id)
    business_account_id: str = column(models.MessageTemplate.business_account_id)
    platform_template_id: str | None = column(
        models.MessageTemplate.platform_template_id,
        description="Assigned by the platform once submitted; null before",
    )
    name: str = column(models.MessageTemplate.name)
    language: str = column(models.MessageTemplate.language)
    category: str = column(models.MessageTemplate.category)
    status: str = column(models.MessageTemplate.status, description="PENDING, APPROVED or REJECTED")
    components: JSON = column(
        models.MessageTemplate.components, as_type=JSON, rest=Rest(annotation=list[dict[str, Any]])
    )
    quality_score: str = column(
        models.MessageTemplate.quality_score, description="GREEN, YELLOW, RED or empty"
    )
    rejected_reason: str | None = column(models.MessageTemplate.rejected_reason)
    submission_error: str | None = column(
        models.MessageTemplate.submission_error,
        description=("Why the platform could not be reached yet (submission is retried)"),
    )
    platform_status: str | None = column(
        models.MessageTemplate.platform_status,
        description=("Meta's own status word (APPROVED, PAUSED, FLAGGED, DISABLED…)"),
        rest=Rest(description=SAME, default=None),
    )
    previous_category: str | None = column(
        models.MessageTemplate.previous_category,
        description="The category before Meta's last recategorization",
        rest=Rest(description=SAME, default=None),
    )
    category_updated_at: datetime | None = column(
        models.MessageTemplate.category_updated_at, rest=Rest(default=None)
    )
    created_at: datetime = column(models.MessageTemplate.created_at)
    updated_at: datetime = column(models.MessageTemplate.updated_at)


TEMPLATE = Shape(
    MessageTemplate,
    rest_name="TemplateResponse",
    rest_doc="The REST shape (MessageTemplateResponse, plus why it was refused or is waiting).",
)
TemplateResponse = TEMPLATE.rest_model
template_to_public = TEMPLATE.to_public


class SyncResponse(BaseModel):
    success: bool
    message: str
    synced_count: int


class Violation(BaseModel):
    rule: str
    message: str


class ValidationResponse(BaseModel):
    valid: bool
    violations: list[Violation]


class LibraryTemplate(BaseModel):
    id: str
    name: str
    language: str
    category: str
    topic: str
    usecase: str
    industry: str
    header: dict[str, Any] | None
    body: str
    body_params: list[str]
    buttons: list[dict[str, Any]]


class LibraryResponse(BaseModel):
    data: list[LibraryTemplate]


def library_to_public(entry: dict[str, Any]) -> dict[str, Any]:
    """A library entry in the documented shape (docs/api.md), whichever platform answered it."""
    header = entry.get("header")
    return {
        "id": str(entry.get("id", "")),
        "name": str(entry.get("name", "")),
        "language": str(entry.get("language", "")),
        "category": str(entry.get("category", "")),
        "topic": str(entry.get("topic", "")),
        "usecase": str(entry.get("usecase", "")),
        "industry": str(entry.get("industry", "")),
        "header": header if isinstance(header, dict) else None,
        "body": str(entry.get("body", "")),
        "body_params": [str(p) for p in entry.get("body_params") or []],
        "buttons": [b for b in entry.get("buttons") or [] if isinstance(b, dict)],
    }
