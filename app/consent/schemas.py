"""Consent settings: the input REST and GraphQL share, and the public shape."""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Annotated, Any

import strawberry
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
)

from app.consent import models
from app.kit.shape import SAME, Rest, Shape, column
from app.kit.validation import refuse_null, without_null

MAX_KEYWORDS = 50
MAX_KEYWORD_LENGTH = 50
MAX_REPLY_LENGTH = 1024
# White space around a keyword: the characters every regex engine's `\s` agrees on
# (JavaScript's adds U+FEFF, Unicode's U+0085); the keywords' pattern names them one by one,
# so the OpenAPI document and the server draw the same line.
WHITE_SPACE = (
    "\t\n\x0b\x0c\r \xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + ("\u2028\u2029\u202f\u205f\u3000\ufeff")
)
NOT_BLANK = f"[^{WHITE_SPACE}]"


def normalize_keyword(text: str) -> str:
    """A keyword or message body as they are compared: Unicode NFC, white space around it
    trimmed, case folded ("  Stop " and "STOP" are "stop")."""
    return unicodedata.normalize("NFC", text).strip(WHITE_SPACE).casefold()


def _keyword(value: str) -> str:
    keyword = normalize_keyword(value)
    if not keyword:
        raise ValueError("a keyword cannot be blank")
    return keyword


# Length and "not blank" on the text as sent, so the OpenAPI document states both (case
# folding may lengthen a keyword: "ß" is "ss").
Keyword = Annotated[
    str,
    StringConstraints(max_length=MAX_KEYWORD_LENGTH, pattern=NOT_BLANK),
    AfterValidator(_keyword),
]
Keywords = Annotated[list[Keyword], Field(max_length=MAX_KEYWORDS)]
Reply = Annotated[str, Field(min_length=1, max_length=MAX_REPLY_LENGTH)]
NOT_IN_BOTH = (
    "Replaces the stored list. A keyword may not also be in the other list, as compared "
    "(trimmed, case-folded); the stored other list counts when only one is sent (400)."
)


class ConsentSettingsUpdate(BaseModel):
    """Fields present replace the stored ones; a reply set to null sends no confirmation."""

    model_config = ConfigDict(
        extra="ignore", json_schema_extra=without_null("opt_out_keywords", "opt_in_keywords")
    )

    opt_out_keywords: Keywords | None = Field(default=None, description=NOT_IN_BOTH)
    opt_in_keywords: Keywords | None = Field(default=None, description=NOT_IN_BOTH)
    opt_out_reply: Reply | None = None
    opt_in_reply: Reply | None = None

    _no_null = field_validator("opt_out_keywords", "opt_in_keywords", mode="before")(refuse_null)

    @field_validator("opt_out_keywords", "opt_in_keywords")
    @classmethod
    def _distinct(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else list(dict.fromkeys(value))

    def changes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set}


@strawberry.type(
    description="How inbound WhatsApp texts change marketing consent (docs/api.md, Consent)."
)
class ConsentSettings:
    """The public shape, declared once (app/kit/shape.py)."""

    opt_out_keywords: list[str] = column(
        models.ConsentSettings.opt_out_keywords,
        rest=Rest(convert=list),
        description=("Trimmed, case-folded texts that opt the sender out (source keyword)"),
    )
    opt_in_keywords: list[str] = column(
        models.ConsentSettings.opt_in_keywords,
        rest=Rest(convert=list),
        description="Texts that opt the sender back in",
    )
    opt_out_reply: str | None = column(
        models.ConsentSettings.opt_out_reply,
        description=("Sent back when a keyword opts someone out; null sends nothing"),
    )
    opt_in_reply: str | None = column(
        models.ConsentSettings.opt_in_reply,
        description=("Sent back when a keyword opts someone back in; null sends nothing"),
    )
    updated_at: datetime | None = column(
        models.ConsentSettings.updated_at,
        description="null while the defaults apply",
        rest=Rest(description=SAME),
    )


CONSENT_SETTINGS = Shape(
    ConsentSettings,
    rest_name="ConsentSettingsResponse",
    rest_doc=None,
)
ConsentSettingsResponse = CONSENT_SETTINGS.rest_model
consent_settings_to_public = CONSENT_SETTINGS.to_public
