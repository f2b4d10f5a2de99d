"""Channel inputs shared by REST and GraphQL, and the public (REST) shape."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import PydanticCustomError

from app.kit.phone import MAX_PHONE_LENGTH
from app.kit.send_governor import MAX_MESSAGES_PER_SECOND
from app.kit.serialize import public_shape
from app.kit.validation import NO_BLANKS_PATTERN, refuse_null, without_null

MAX_UPSTREAM_ID_LENGTH = 64
MAX_ACCESS_TOKEN_LENGTH = 4096
# The send budget of a channel (app/kit/send_governor.py): Meta's default throughput is 80
# messages/s per number, raised up to 1,000 for numbers that qualify.
DEFAULT_MESSAGES_PER_SECOND = 80


def _json_integer(value: Any) -> Any:
    # JSON Schema's integer: 425 and 425.0, never "425" or true (pydantic's lax mode takes
    # both, its strict mode refuses 425.0).
    if isinstance(value, bool | str | bytes):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


MessagesPerSecond = Annotated[
    int, Field(ge=1, le=MAX_MESSAGES_PER_SECOND), BeforeValidator(_json_integer)
]
MESSAGES_PER_SECOND_SCHEMA = {"type": "integer", "minimum": 1, "maximum": MAX_MESSAGES_PER_SECOND}

# Upstream ids go into the upstream platform's URL paths: URL-safe characters only.
UPSTREAM_ID_PATTERN = r"^[A-Za-z0-9_-]+$"
UpstreamId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_UPSTREAM_ID_LENGTH, pattern=UPSTREAM_ID_PATTERN),
]


def is_upstream_id(value: str) -> bool:
    """Whether `value` could be a channel's `phone_number_id` or `business_account_id`."""
    return len(value) <= MAX_UPSTREAM_ID_LENGTH and re.match(UPSTREAM_ID_PATTERN, value) is not None


class ChannelCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    # Format (and a length past 50) is checked by the service: 400, as for contacts' numbers.
    display_phone_number: str = Field(json_schema_extra={"maxLength": MAX_PHONE_LENGTH})
    phone_number_id: UpstreamId
    business_account_id: UpstreamId
    # No white space anywhere: a token pasted with a stray space would only fail upstream.
    access_token: str = Field(
        min_length=1, max_length=MAX_ACCESS_TOKEN_LENGTH, pattern=NO_BLANKS_PATTERN, repr=False
    )
    name: str | None = Field(default=None, min_length=1, max_length=255)
    messages_per_second: MessagesPerSecond = DEFAULT_MESSAGES_PER_SECOND


class ChannelUpdate(BaseModel):
    """Partial update: only the fields present in the body change (the number, its account
    and its token are fixed; register a new channel to change them). `agent_id` names the
    agent that answers the channel's inbound messages, or null for none."""

    # Absent is fine; null is refused for the budget (it has no "unset"), allowed for the
    # name (clears it).
    model_config = ConfigDict(extra="ignore", json_schema_extra=without_null("messages_per_second"))

    name: str | None = Field(default=None, min_length=1, max_length=255)
    messages_per_second: Annotated[
        MessagesPerSecond | None, WithJsonSchema(MESSAGES_PER_SECOND_SCHEMA)
    ] = None
    # The agent that answers the channel's inbound messages, or null: people. Documented as a
    # UUID (as POST /calls' agent_id is): a malformed id answers 400; any UUID form is taken.
    agent_id: Annotated[
        str | None,
        Field(max_length=64),
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "string", "format": "uuid", "minLength": 1, "maxLength": 64},
                    {"type": "null"},
                ]
            }
        ),
    ] = None
    _no_null = field_validator("messages_per_second", mode="before")(refuse_null)

    def changes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set}


class ChannelResponse(BaseModel):
    """The REST shape; documents the OpenAPI schema. Runtime uses `channel_to_public`."""

    id: str
    organization_id: str
    display_phone_number: str
    phone_number_id: str
    business_account_id: str
    name: str | None
    livemode: bool
    messages_per_second: int
    agent_id: str | None
    quality_rating: str | None = Field(
        description="Meta's rating of the number: GREEN, YELLOW, RED, UNKNOWN; null until Meta says"
    )
    messaging_limit: str | None = Field(
        description="Meta's messaging limit tier (TIER_250 … TIER_UNLIMITED); null until Meta says"
    )
    quality_event: str | None = Field(description="Meta's last quality event (FLAGGED, UPGRADE…)")
    quality_updated_at: str | None = Field(description="When Meta sent its last quality update")
    account_status: str | None = Field(description="Meta's last account_update event")
    created_at: str
    updated_at: str


# The REST shape of a channel row or entity; the access token is not part of it, ever.
channel_to_public = public_shape(ChannelResponse)
