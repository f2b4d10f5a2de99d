"""Conversation message shapes."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator


class MessageResponse(BaseModel):
    id: str
    organization_id: str
    ticket_id: str
    channel_id: str | None
    livemode: bool
    direction: str
    type: str
    text: str | None
    template_name: str | None
    platform_message_id: str | None
    status: str
    error: str | None
    sent_at: str | None
    delivered_at: str | None
    read_at: str | None
    failed_at: str | None
    # The agent that wrote an outbound message (an AI reply); null for people and inbound.
    agent_id: str | None
    pricing_category: str | None = None
    billable: bool | None = None
    created_at: str
    updated_at: str


def message_to_public(message: Any) -> dict[str, Any]:
    return {
        "id": message.id,
        "organization_id": message.organization_id,
        "ticket_id": message.ticket_id,
        "channel_id": message.channel_id,
        "livemode": message.livemode,
        "direction": message.direction,
        "type": message.kind,
        "text": message.text,
        "template_name": message.template_name,
        "platform_message_id": message.platform_message_id,
        "status": message.status,
        "error": message.error,
        "sent_at": message.sent_at,
        "delivered_at": message.delivered_at,
        "read_at": message.read_at,
        "failed_at": message.failed_at,
        "agent_id": message.agent_id,
        "pricing_category": message.pricing_category,
        "billable": message.billable,
        "created_at": message.created_at,
        "updated_at": message.updated_at,
    }


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
