"""Quick reply inputs shared by REST and GraphQL, and the public (REST) shape."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

import strawberry
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from app.kit.shape import GRAPHQL_ONLY, Shape, column
from app.kit.validation import NOT_BLANK_CHAR, without_null
from app.quick_replies import models

MAX_SHORTCUT_LENGTH = 100
# A WhatsApp text message body holds at most 4096 characters; a snippet is one.
MAX_CONTENT_LENGTH = 4096
# The same rule twice: for OpenAPI (ECMA regex, anchored), and for the check (fullmatch).
# White space by every regex dialect in play (app/kit/validation.py).
SHORTCUT_PATTERN = f"^/{NOT_BLANK_CHAR}*$"
_SHORTCUT = re.compile(f"/{NOT_BLANK_CHAR}*")


def _check_shortcut(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("shortcut must start with '/'")
    if not _SHORTCUT.fullmatch(value):
        raise ValueError("shortcut must not contain white space")
    return value


# 1 to 100 characters: a '/' then anything but white space (the composer ends a shortcut at a
# space). The pattern documents the same rule for OpenAPI; the validator gives clear messages.
Shortcut = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_SHORTCUT_LENGTH,
        json_schema_extra={"pattern": SHORTCUT_PATTERN},
    ),
    AfterValidator(_check_shortcut),
]
Content = Annotated[str, Field(min_length=1, max_length=MAX_CONTENT_LENGTH)]
SHORTCUT_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_SHORTCUT_LENGTH,
    "pattern": SHORTCUT_PATTERN,
}
CONTENT_SCHEMA = {"type": "string", "minLength": 1, "maxLength": MAX_CONTENT_LENGTH}


class QuickReplyCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    shortcut: Shortcut
    content: Content


class QuickReplyUpdate(BaseModel):
    """Partial update: only the fields present in the body change."""

    # Absent is fine, but null is refused (`_no_null`), and the document says so: it shows the
    # non-null schemas only, without `default: null`.
    model_config = ConfigDict(extra="ignore", json_schema_extra=without_null("shortcut", "content"))

    shortcut: Annotated[Shortcut | None, WithJsonSchema(SHORTCUT_SCHEMA)] = None
    content: Annotated[Content | None, WithJsonSchema(CONTENT_SCHEMA)] = None

    @field_validator("shortcut", "content", mode="before")
    @classmethod
    def _no_null(cls, value: Any, info: ValidationInfo) -> Any:
        # Runs only on values sent (defaults are not validated): an explicit null.
        if value is None:
            raise ValueError(f"{info.field_name} cannot be null")
        return value

    def changes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set}


@strawberry.type(description="A canned message snippet, inserted by typing its shortcut.")
class QuickReply:
    """The public shape of a quick reply, declared once (app/kit/shape.py)."""

    id: strawberry.ID = column(models.QuickReply.id, as_type=strawberry.ID)
    shortcut: str = column(
        models.QuickReply.shortcut, description="Slash-prefixed trigger, e.g. /thanks"
    )
    content: str = column(models.QuickReply.content, description="The text the shortcut expands to")
    created_at: datetime = column(models.QuickReply.created_at)
    updated_at: datetime = column(models.QuickReply.updated_at, rest=GRAPHQL_ONLY)


QUICK_REPLY = Shape(
    QuickReply,
    rest_name="QuickReplyResponse",
    rest_doc="docs/api.md's shape; documents OpenAPI. Runtime uses `quick_reply_to_public`.",
)
QuickReplyResponse = QUICK_REPLY.rest_model
quick_reply_to_public = QUICK_REPLY.to_public
