"""Webhook subscription inputs shared by REST and GraphQL, and the public (REST) shapes."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import strawberry
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints, field_validator

from app.events.types import SUBSCRIBABLE_EVENTS
from app.kit.shape import Rest, Shape, column
from app.kit.validation import HTTP_URL_PATTERN, refuse_null, without_null
from app.webhooks import models
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


def _listed(events: list[str] | None) -> list[str]:
    return list(events or [])


@strawberry.type
class WebhookSubscription:
    """The public shape, declared once (app/kit/shape.py)."""

    id: strawberry.ID = column(models.WebhookSubscription.id, as_type=strawberry.ID)
    organization_id: str = column(models.WebhookSubscription.organization_id)
    url: str = column(models.WebhookSubscription.url)
    secret: str = column(
        models.WebhookSubscription.secret, description="HMAC SHA-256 signing secret of deliveries"
    )
    events: list[str] = column(models.WebhookSubscription.events, rest=Rest(convert=_listed))
    is_active: bool = column(models.WebhookSubscription.is_active)
    disabled_reason: str | None = column(
        models.WebhookSubscription.disabled_reason,
        description="Why the service switched the subscription off; null when a user did",
        rest=Rest(
            description=(
                "Why the service switched the subscription off (e.g. the "
                "receiver answered 410 Gone); null while active or when a user switched it off"
            )
        ),
    )
    created_at: datetime = column(models.WebhookSubscription.created_at)
    updated_at: datetime = column(models.WebhookSubscription.updated_at)


WEBHOOK = Shape(
    WebhookSubscription,
    rest_name="WebhookSubscriptionResponse",
    rest_doc="The REST shape; documents the OpenAPI schema. Runtime uses `webhook_to_public`.",
)
WebhookSubscriptionResponse = WEBHOOK.rest_model
webhook_to_public = WEBHOOK.to_public


class WebhookListResponse(BaseModel):
    """`GET /webhooks`: the documented `webhooks` array, plus cursor fields for paging."""

    # The derived model is a value to mypy (app/kit/shape.py); pydantic reads it as a class.
    webhooks: list[WebhookSubscriptionResponse]  # type: ignore[valid-type]
    has_more: bool
    next_cursor: str | None


@strawberry.type(description="One attempt to deliver one event to a subscription.")
class WebhookDeliveryAttempt:
    """The public shape, declared once (app/kit/shape.py)."""

    id: strawberry.ID = column(models.WebhookDeliveryAttempt.id, as_type=strawberry.ID)
    event_id: str = column(models.WebhookDeliveryAttempt.event_id)
    event_type: str = column(models.WebhookDeliveryAttempt.event_type)
    status_code: int | None = column(models.WebhookDeliveryAttempt.status_code)
    success: bool = column(models.WebhookDeliveryAttempt.success)
    attempt: int = column(models.WebhookDeliveryAttempt.attempt)
    duration_ms: int = column(models.WebhookDeliveryAttempt.duration_ms)
    error: str | None = column(models.WebhookDeliveryAttempt.error)
    created_at: datetime = column(models.WebhookDeliveryAttempt.created_at)


ATTEMPT = Shape(
    WebhookDeliveryAttempt,
    rest_name="WebhookDeliveryAttemptResponse",
    rest_doc="One delivery attempt, as `GET /webhooks/{id}/deliveries` lists it.",
)
WebhookDeliveryAttemptResponse = ATTEMPT.rest_model
attempt_to_public = ATTEMPT.to_public


class WebhookTestResponse(BaseModel):
    """`POST /webhooks/{id}/test`: the queued event and the delivery that carries it."""

    event_id: str
    delivery_id: str
    status: str
