"""Channel inputs shared by REST and GraphQL, and the public (REST) shape."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

import strawberry
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

from app.channels import models
from app.kit.phone import MAX_PHONE_LENGTH
from app.kit.send_governor import MAX_MESSAGES_PER_SECOND
from app.kit.shape import SAME, Rest, Shape, column
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


@strawberry.type(description="A messaging phone number of the organization.")
class Channel:
    """The public shape, declared once (app/kit/shape.py)."""

    id: strawberry.ID = column(models.Channel.id, as_type=strawberry.ID)
    organization_id: str = column(models.Channel.organization_id)
    display_phone_number: str = column(models.Channel.display_phone_number)
    phone_number_id: str = column(
        models.Channel.phone_number_id, description="The number's id on the platform"
    )
    business_account_id: str = column(models.Channel.business_account_id)
    name: str | None = column(models.Channel.name)
    livemode: bool = column(
        models.Channel.livemode,
        description="False when created with a test key: its traffic goes to the simulator",
    )
    messages_per_second: int = column(
        models.Channel.messages_per_second,
        description="Send budget shared by the channel's campaigns and replies (1 to 1000)",
    )
    agent_id: str | None = column(
        models.Channel.agent_id,
        description="The agent that answers the channel's inbound messages; null: people do",
    )
    quality_rating: str | None = column(
        models.Channel.quality_rating,
        description="Meta's rating of the number: GREEN, YELLOW, RED, UNKNOWN; "
        "null until Meta says",
        rest=Rest(description=SAME),
    )
    messaging_limit: str | None = column(
        models.Channel.messaging_limit,
        description="Meta's messaging limit tier (TIER_250 … TIER_UNLIMITED)",
        rest=Rest(
            description="Meta's messaging limit tier (TIER_250 … TIER_UNLIMITED); "
            "null until Meta says"
        ),
    )
    quality_event: str | None = column(
        models.Channel.quality_event,
        description="Meta's last quality event (FLAGGED, UPGRADE…)",
        rest=Rest(description=SAME),
    )
    quality_updated_at: datetime | None = column(
        models.Channel.quality_updated_at,
        description="When Meta sent its last quality update",
        rest=Rest(description=SAME),
    )
    account_status: str | None = column(
        models.Channel.account_status,
        description="Meta's last account_update event",
        rest=Rest(description=SAME),
    )
    created_at: datetime = column(models.Channel.created_at)
    updated_at: datetime = column(models.Channel.updated_at)


CHANNEL = Shape(
    Channel,
    rest_name="ChannelResponse",
    rest_doc="The REST shape; documents the OpenAPI schema. Runtime uses `channel_to_public`.",
)
ChannelResponse = CHANNEL.rest_model
channel_to_public = CHANNEL.to_public
