"""Conversation message inputs, and the public shape of a message (GraphQL type, REST model,
serializer and list columns: app/kit/shape.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import strawberry
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from app.conversations import models
from app.kit.shape import GRAPHQL_ONLY, Rest, Shape, column


@strawberry.type(description="One message of a ticket's conversation.")
class ConversationMessage:
    """The public shape, declared once (app/kit/shape.py)."""

    id: strawberry.ID = column(models.Message.id, as_type=strawberry.ID)
    organization_id: str = column(models.Message.organization_id)
    ticket_id: str = column(models.Message.ticket_id)
    channel_id: str | None = column(models.Message.channel_id)
    livemode: bool = column(
        models.Message.livemode, description="The mode of the channel it went through"
    )
    direction: str = column(models.Message.direction)
    # Stored as `kind`: `type` would shadow the builtin on the model.
    type: str = column(
        models.Message.kind,
        description="text, template, or the inbound message's type (REST's `type`)",
    )
    kind: str = column(
        models.Message.kind,
        description="The former name of `type`",
        deprecation_reason="Use `type`, as REST names it",
        rest=GRAPHQL_ONLY,
    )
    text: str | None = column(models.Message.text)
    template_name: str | None = column(models.Message.template_name)
    platform_message_id: str | None = column(models.Message.platform_message_id)
    status: str = column(models.Message.status)
    error: str | None = column(models.Message.error)
    sent_at: datetime | None = column(models.Message.sent_at)
    delivered_at: datetime | None = column(models.Message.delivered_at)
    read_at: datetime | None = column(models.Message.read_at)
    failed_at: datetime | None = column(models.Message.failed_at)
    agent_id: str | None = column(
        models.Message.agent_id,
        description="The agent that wrote an outbound message (an AI reply); null for people",
    )
    pricing_category: str | None = column(
        models.Message.pricing_category,
        description="Meta's pricing category of the message (service, marketing, …)",
        rest=Rest(default=None),
    )
    billable: bool | None = column(
        models.Message.billable,
        description="Whether Meta bills the message",
        rest=Rest(default=None),
    )
    created_at: datetime = column(models.Message.created_at)
    updated_at: datetime = column(models.Message.updated_at)


MESSAGE = Shape(ConversationMessage, rest_name="MessageResponse")
MessageResponse = MESSAGE.rest_model  # documents OpenAPI (Operation.response_model)
message_to_public = MESSAGE.to_public  # REST bodies and event payloads


class MessageSend(BaseModel):
    """A reply on a ticket: `text` (a `/shortcut` is expanded from the quick replies), or an
    approved template by name (allowed outside the 24-hour window)."""

    # Exactly one of the two is given (a null counts as not given): the document says so.
    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={
            "oneOf": [
                {"required": ["text"], "properties": {"text": {"type": "string"}}},
                {
                    "required": ["template_name"],
                    "properties": {"template_name": {"type": "string"}},
                },
            ]
        },
    )

    text: str | None = Field(default=None, min_length=1, max_length=4096)
    template_name: str | None = Field(default=None, min_length=1, max_length=255)
    template_language: str | None = Field(default=None, min_length=2, max_length=20)
    body_parameters: list[Annotated[str, StringConstraints(max_length=1024)]] = Field(
        default_factory=list, max_length=20
    )

    @model_validator(mode="after")
    def _one_kind(self) -> MessageSend:
        if (self.text is None) == (self.template_name is None):
            raise ValueError("give either text or template_name")
        return self
