"""Webhook subscription inputs shared by REST and GraphQL, and the public (REST) shapes."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.json_schema import SkipJsonSchema

from app.webhooks.events import MAX_URL_LENGTH, SUBSCRIBABLE_EVENTS

# Cap on the list a caller sends (before repeats are dropped): list inputs stop at 100 items.
MAX_EVENT_ITEMS = 100
MAX_EVENT_NAME_LENGTH = 100

# The prefix rule, the allowed names and "at least one" are the service's checks (400 with
# the spec's messages); the schema documents them so clients and fuzzers see the rules.
_URL_SCHEMA: dict[str, Any] = {"maxLength": MAX_URL_LENGTH, "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://"}
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

    model_config = ConfigDict(extra="ignore")

    # SkipJsonSchema: absent is fine, but null is refused, and the document says so.
    url: str | SkipJsonSchema[None] = Field(default=None, json_schema_extra=_URL_SCHEMA)
    events: EventList | SkipJsonSchema[None] = None
    is_active: bool | SkipJsonSchema[None] = None

    @model_validator(mode="after")
    def _no_null(self) -> WebhookUpdate:
        for name in self.model_fields_set:
            if getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null")
        return self

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
    created_at: str
    updated_at: str


class WebhookListResponse(BaseModel):
    """`GET /webhooks`: the spec's `webhooks` array, plus cursor fields for paging."""

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


def webhook_to_public(webhook: Any) -> dict[str, Any]:
    """REST shape of a subscription row or entity, for app.kit.jsonutil.dumps."""
    return {
        "id": webhook.id,
        "organization_id": webhook.organization_id,
        "url": webhook.url,
        "secret": webhook.secret,
        "events": list(webhook.events or []),
        "is_active": webhook.is_active,
        # datetimes stay objects: orjson writes them as ISO 8601 with a Z.
        "created_at": webhook.created_at,
        "updated_at": webhook.updated_at,
    }


def attempt_to_public(attempt: Any) -> dict[str, Any]:
    """REST shape of one delivery attempt row."""
    return {
        "id": attempt.id,
        "event_id": attempt.event_id,
        "event_type": attempt.event_type,
        "status_code": attempt.status_code,
        "success": attempt.success,
        "attempt": attempt.attempt,
        "duration_ms": attempt.duration_ms,
        "error": attempt.error,
        "created_at": attempt.created_at,
    }
