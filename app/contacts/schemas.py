"""Contact inputs shared by REST and GraphQL, and the public (REST) shape."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from app.kit.jsonutil import dumps
from app.kit.phone import MAX_PHONE_LENGTH

MAX_TAGS = 100
MAX_TAG_LENGTH = 100
MAX_CUSTOM_FIELDS_BYTES = 16 * 1024


# A tag: 1 to 100 characters once trimmed, at least one of them not white space.
Tag = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True, min_length=1, max_length=MAX_TAG_LENGTH, pattern=r"\S"
    ),
]


def _unique(tags: list[str]) -> list[str]:
    return list(dict.fromkeys(tags))


def _check_custom_fields(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None and len(dumps(value)) > MAX_CUSTOM_FIELDS_BYTES:
        raise ValueError(f"custom_fields must serialize to at most {MAX_CUSTOM_FIELDS_BYTES} bytes")
    return value


class ContactCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    # Format (and a length past 50) of phone_number is checked by the service: 400, per the spec.
    phone_number: str = Field(json_schema_extra={"maxLength": MAX_PHONE_LENGTH})
    name: str = Field(min_length=1, max_length=255)
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    notes: str | None = Field(default=None, max_length=10_000)
    custom_fields: dict[str, Any] | None = None

    _tags = field_validator("tags")(_unique)
    _custom_fields = field_validator("custom_fields")(_check_custom_fields)


class ContactUpdate(BaseModel):
    """Partial update: only the fields present in the body change; tags are replaced."""

    model_config = ConfigDict(extra="ignore")

    # SkipJsonSchema: absent is fine, but null is refused, and the document says so.
    phone_number: str | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra={"maxLength": MAX_PHONE_LENGTH}
    )
    name: Annotated[str, StringConstraints(min_length=1, max_length=255)] | SkipJsonSchema[None] = (
        None
    )
    tags: Annotated[list[Tag], Field(max_length=MAX_TAGS)] | SkipJsonSchema[None] = None
    notes: str | None = Field(default=None, max_length=10_000)
    custom_fields: dict[str, Any] | None = None

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _unique(value)

    _custom_fields = field_validator("custom_fields")(_check_custom_fields)

    @model_validator(mode="after")
    def _no_null_for_required(self) -> ContactUpdate:
        for name in ("phone_number", "name", "tags"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null")
        return self

    def changes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set}


class ContactResponse(BaseModel):
    """The REST shape; documents the OpenAPI schema. Runtime uses `contact_to_public`."""

    id: str
    organization_id: str
    phone_number: str
    name: str
    tags: list[str]
    notes: str | None
    custom_fields: dict[str, Any] | None
    created_at: str
    updated_at: str


def contact_to_public(contact: Any) -> dict[str, Any]:
    """REST/event shape of a contact row or entity (anything with the attributes), for
    serialization with app.kit.jsonutil.dumps."""
    return {
        "id": contact.id,
        "organization_id": contact.organization_id,
        "phone_number": contact.phone_number,
        "name": contact.name,
        "tags": contact.tags or [],
        "notes": contact.notes,
        "custom_fields": contact.custom_fields,
        # datetimes stay objects: orjson writes them as ISO 8601 with a Z, faster than Python.
        "created_at": contact.created_at,
        "updated_at": contact.updated_at,
    }
