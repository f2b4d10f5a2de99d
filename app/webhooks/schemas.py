"""Webhook subscription inputs shared by REST and GraphQL, and the public (REST) shapes."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints, field_validator

from app.events.types import SUBSCRIBABLE_EVENTS
from app.kit.serialize import public_shape
from app.kit.validation import HTTP_URL_PATTERN, refuse_null, without_null
from app.webhooks.events import MAX_URL_LENGTH

# Cap on the list a caller sends (before repeats are dropped): list inputs stop at 100 items.
MAX_EVENT_ITEMS = 100
MAX_EVENT_NAME_LENGTH = 100

# The prefix rule, the allowed names and "at least one" are the service's checks (400 with
# the documented messages); the schema documents them so clients and fuzzers see the rules.
_URL_SCHEMA: dict[str, Any] = {"maxLength": MAX_URL_LENGTH, "pattern": HTTP_URL_PATTERN}
_EVENTS_SCHEMA: dict[str, Any] = {"minItems": 1}
_EVENT_NAME_SCHEMA: dict[str, Any] = {"enum": list(SUBSCRIBABLE_EVENTS)}

EventName = Annotated[
    str,
    StringConstraints(max_length=MAX_EVENT_NAME_LENGTH),
    Field(json_schema_extra=_EVENT_NAME_SCHEMA),
]
EventList = Annotated[
    list[EventName], Field(max_length=MAX_EVENT_ITEMS, json_schema_extra=_EVENTS_SCHEMA)
]


class WebhookCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    url: str = Field(json_schema_extra=_URL_SCHEMA)
    events: EventList


class WebhookUpdate(BaseModel):
    """Partial update: only the fields present in the body change; events are replaced."""

    # Absent is fine, but null is refused (`_no_null`), and the document says so.
    model_config = ConfigDict(
        extra="ignore", json_schema_extra=without_null("url", "events", "is_active")
    )

    url: str | None = Field(default=None, json_schema_extra=_URL_SCHEMA)
    events: EventList | None = None
    # Strict: `0` or `"false"` are refused, as the document's `boolean` says.
    is_active: StrictBool | None = None

    _no_null = field_validator("url", "events", "is_active", mode="before")(refuse_null)

    def changes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set}


class WebhookSubscriptionResponse(BaseModel):
    """The REST shape; documents the OpenAPI schema. Runtime uses `webhook_to_public`."""

    id: str
    organization_id: str
    url: str
    secret: str
    events: list[str]
    is_active: bool
    disabled_reason: str | None = Field(
        description="Why the service switched the subscription off (e.g. the receiver answered "
        "410 Gone); null while active or when a user switched it off"
    )
    created_at: str
    updated_at: str


class WebhookListResponse(BaseModel):
    """`GET /webhooks`: the documented `webhooks` array, plus cursor fields for paging."""

    webhooks: list[WebhookSubscriptionResponse]
    has_more: bool
    next_cursor: str | None


class WebhookDeliveryAttemptResponse(BaseModel):
    """One delivery attempt, as `GET /webhooks/{id}/deliveries` lists it."""

    id: str
    event_id: str
    event_type: str
    status_code: int | None
    success: bool
    attempt: int
    duration_ms: int
    error: str | None
    created_at: str


class WebhookTestResponse(BaseModel):
    """`POST /webhooks/{id}/test`: the queued event and the delivery that carries it."""

    event_id: str
    delivery_id: str
    status: str


# The REST shape of a subscription row or entity.
webhook_to_public = public_shape(
    WebhookSubscriptionResponse, events=lambda events: list(events or [])
)


attempt_to_public = public_shape(WebhookDeliveryAttemptResponse)
