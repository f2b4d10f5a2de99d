"""Contact inputs shared by REST and GraphQL, and the public (REST) shape."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

import strawberry
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    field_validator,
)
from strawberry.scalars import JSON

from app.contacts import models
from app.core.jsonutil import dumps
from app.kit.phone import MAX_PHONE_LENGTH
from app.kit.shape import SAME, Rest, Shape, column, computed
from app.kit.validation import (
    DisplayName,
    JsonObject,
    not_blank,
    refuse_null,
    trimmed_schema,
    without_null,
)

MAX_TAGS = 100
# Tags as sent, repeats included (docs/api.md: repeats are dropped, then at most 100 remain).
MAX_TAG_ITEMS = 1000
MAX_TAG_LENGTH = 100
MAX_CUSTOM_FIELDS_BYTES = 16 * 1024


# A tag: 1 to 100 characters, at least one of them not white space; stored trimmed.
Tag = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_TAG_LENGTH),
    AfterValidator(not_blank),
    WithJsonSchema(trimmed_schema(MAX_TAG_LENGTH, "Surrounding white space is removed")),
]


def _unique(tags: list[str]) -> list[str]:
    return list(dict.fromkeys(tags))


def _drop_repeats(value: Any) -> Any:
    """Repeats go before the 100-tag cap is judged: 1,000 copies of one tag are one tag.
    (Tags that differ only by surrounding white space are merged after trimming.)"""
    if not isinstance(value, list):
        return value
    if len(value) > MAX_TAG_ITEMS:
        raise ValueError(f"at most {MAX_TAG_ITEMS} tags may be sent")
    seen: set[str] = set()
    distinct = []
    for item in value:
        if isinstance(item, str):
            if item in seen:
                continue
            seen.add(item)
        distinct.append(item)
    return distinct


# At most 100 distinct tags; repeats are dropped first.
Tags = Annotated[
    list[Tag],
    BeforeValidator(_drop_repeats),
    Field(
        max_length=MAX_TAGS,
        # What is sent may repeat tags (up to 1,000 items); the distinct cap is stated.
        json_schema_extra={
            "maxItems": MAX_TAG_ITEMS,
            "description": f"At most {MAX_TAGS} distinct tags; repeats are dropped first",
        },
    ),
]


def _check_custom_fields(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None and len(dumps(value)) > MAX_CUSTOM_FIELDS_BYTES:
        raise ValueError(f"custom_fields must serialize to at most {MAX_CUSTOM_FIELDS_BYTES} bytes")
    return value


class ContactCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    # Format (and a length past 50) of phone_number is checked by the service: 400 (docs/api.md).
    phone_number: str = Field(json_schema_extra={"maxLength": MAX_PHONE_LENGTH})
    name: DisplayName
    tags: Tags = Field(default_factory=list)
    notes: str | None = Field(default=None, max_length=10_000)
    custom_fields: JsonObject | None = None

    _tags = field_validator("tags")(_unique)
    _custom_fields = field_validator("custom_fields")(_check_custom_fields)


class ContactUpdate(BaseModel):
    """Partial update: only the fields present in the body change; tags are replaced."""

    # Absent is fine, but null is refused (`_no_null`), and the document says so.
    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra=without_null(
            "phone_number", "name", "tags", "marketing_opt_out", "do_not_call"
        ),
    )

    phone_number: str | None = Field(
        default=None, json_schema_extra={"maxLength": MAX_PHONE_LENGTH}
    )
    name: DisplayName | None = None
    tags: Tags | None = None
    notes: str | None = Field(default=None, max_length=10_000)
    custom_fields: JsonObject | None = None

    # true: opted out now (source api), unless already opted out; false: the opt-out is cleared.
    marketing_opt_out: bool | None = None
    do_not_call: bool | None = None

    _no_null = field_validator(
        "phone_number", "name", "tags", "marketing_opt_out", "do_not_call", mode="before"
    )(refuse_null)

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _unique(value)

    _custom_fields = field_validator("custom_fields")(_check_custom_fields)

    def changes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set}


class OptOutSource(StrEnum):
    """How a marketing opt-out came (docs/api.md, "Consent")."""

    KEYWORD = "keyword"
    PLATFORM = "platform"
    API = "api"
    IMPORT = "import"


class MarketingOptOut(BaseModel):
    at: datetime
    source: Literal["keyword", "platform", "api", "import"]


def marketing_opt_out_of(contact: Any) -> dict[str, Any] | None:
    """The opt-out of a contact row or entity as the public shape nests it."""
    if contact.marketing_opt_out_at is None:
        return None
    return {"at": contact.marketing_opt_out_at, "source": contact.marketing_opt_out_source}


@strawberry.type(
    name="MarketingOptOut",
    description="The contact opted out of marketing messages (docs/api.md, Consent).",
)
class MarketingOptOutType:
    at: datetime
    source: str = strawberry.field(description="keyword, platform, api or import")


def _marketing_opt_out(root: strawberry.Parent[Any]) -> MarketingOptOutType | None:
    # `root` is the contact row or entity the field resolves on.
    found = marketing_opt_out_of(root)
    return None if found is None else MarketingOptOutType(**found)


def _tags(tags: list[str] | None) -> list[str]:
    return tags or []


@strawberry.type
class ContactShape:
    """The public shape of a contact, declared once (app/kit/shape.py); the GraphQL type
    `Contact` (app/contacts/graphql.py) adds its links to calls and tickets."""

    id: strawberry.ID = column(models.Contact.id, as_type=strawberry.ID)
    organization_id: str = column(models.Contact.organization_id)
    phone_number: str = column(models.Contact.phone_number)
    name: str = column(models.Contact.name)
    tags: list[str] = column(models.Contact.tags, rest=Rest(convert=_tags))
    notes: str | None = column(models.Contact.notes)
    custom_fields: JSON | None = column(
        models.Contact.custom_fields,
        as_type=JSON,
        rest=Rest(annotation=dict[str, Any] | None),
    )
    platform_user_id: str | None = column(
        models.Contact.platform_user_id,
        description="WhatsApp's business-scoped user id (BSUID), when the user wrote with one",
        rest=Rest(description=SAME, default=None),
    )
    do_not_call: bool = column(models.Contact.do_not_call, rest=Rest(convert=bool))
    created_at: datetime = column(models.Contact.created_at)
    updated_at: datetime = column(models.Contact.updated_at)
    marketing_opt_out: MarketingOptOutType | None = computed(
        _marketing_opt_out,
        sources=(models.Contact.marketing_opt_out_at, models.Contact.marketing_opt_out_source),
        description="Null unless the contact opted out of marketing messages.",
        rest=Rest(annotation=MarketingOptOut | None, value=marketing_opt_out_of),
    )


CONTACT = Shape(
    ContactShape,
    rest_name="ContactResponse",
    rest_doc="The REST shape; documents the OpenAPI schema. Runtime uses `contact_to_public`.",
    rest_order=(
        "id",
        "organization_id",
        "phone_number",
        "name",
        "tags",
        "notes",
        "custom_fields",
        "platform_user_id",
        "marketing_opt_out",
        "do_not_call",
        "created_at",
        "updated_at",
    ),
)
ContactResponse = CONTACT.rest_model
contact_to_public = CONTACT.to_public
