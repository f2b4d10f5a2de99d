"""Public shapes derived from the response schemas (app/kit/serialize.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel

from app.calls.schemas import CallLogResponse, call_log_to_public
from app.campaigns.schemas import CampaignResponse, campaign_to_public
from app.channels.schemas import ChannelResponse, channel_to_public
from app.contacts.schemas import ContactResponse, contact_to_public
from app.conversations.schemas import MessageResponse, message_to_public
from app.inbox.schemas import TicketResponse, ticket_to_public
from app.kit.serialize import public_shape
from app.quick_replies.schemas import QuickReplyResponse, quick_reply_to_public
from app.webhooks.schemas import (
    WebhookDeliveryAttemptResponse,
    WebhookSubscriptionResponse,
    attempt_to_public,
    webhook_to_public,
)


class Shape(BaseModel):
    id: str
    tags: list[str]
    created_at: str


def test_fields_in_the_models_order_with_conversions_in_place() -> None:
    to_public = public_shape(Shape, tags=lambda tags: tags or [])
    now = datetime.now(UTC)
    row = SimpleNamespace(id="a", tags=None, created_at=now, secret="never")
    shape = to_public(row)
    assert list(shape.items()) == [("id", "a"), ("tags", []), ("created_at", now)]


def test_a_single_field_model_and_an_unknown_conversion() -> None:
    class One(BaseModel):
        id: str

    assert public_shape(One)(SimpleNamespace(id="x")) == {"id": "x"}
    with pytest.raises(ValueError, match="no field"):
        public_shape(One, name=str)


CONTACT_OPT_OUT_COLUMNS = {"marketing_opt_out_at": None, "marketing_opt_out_source": None}


def _row(model: type[BaseModel], **values: Any) -> SimpleNamespace:
    return SimpleNamespace(**{name: f"{name}-value" for name in model.model_fields}, **values)


@pytest.mark.parametrize(
    ("model", "to_public", "values"),
    [
        # The opt-out is served from two columns (docs/api.md, "Consent").
        (ContactResponse, contact_to_public, CONTACT_OPT_OUT_COLUMNS),
        (CallLogResponse, call_log_to_public, {"cost": "1.5"}),
        (CampaignResponse, campaign_to_public, {}),
        (ChannelResponse, channel_to_public, {}),
        (QuickReplyResponse, quick_reply_to_public, {}),
        (WebhookSubscriptionResponse, webhook_to_public, {"events": ("a", "b")}),
        (WebhookDeliveryAttemptResponse, attempt_to_public, {}),
        # REST's `type` is the model's `kind`.
        (MessageResponse, message_to_public, {"kind": "template"}),
    ],
)
def test_each_serializer_serves_exactly_its_documented_fields(
    model: type[BaseModel], to_public: Any, values: dict[str, Any]
) -> None:
    fields = {name: f"{name}-value" for name in model.model_fields}
    row = SimpleNamespace(**{**fields, **values}, access_token_sealed="never served")
    assert list(to_public(row)) == list(model.model_fields)


def test_conversions_of_the_derived_serializers() -> None:
    contact = _row(ContactResponse, **CONTACT_OPT_OUT_COLUMNS)
    contact.tags = None
    assert contact_to_public(contact)["tags"] == []
    call = _row(CallLogResponse)
    call.cost, call.transcript = "2.25", None
    assert (call_log_to_public(call)["cost"], call_log_to_public(call)["transcript"]) == (2.25, [])
    message = _row(MessageResponse, kind="template")
    assert message_to_public(message)["type"] == "template"
    webhook = _row(WebhookSubscriptionResponse)
    webhook.events = ("lead.created",)
    assert webhook_to_public(webhook)["events"] == ["lead.created"]
    ticket = _row(TicketResponse)
    ticket.contact = SimpleNamespace(
        id="c", name="Ada", phone_number="+1", tags=["x"], notes=None, custom_fields=None, secret=1
    )
    assert ticket_to_public(ticket)["contact"] == {
        "id": "c",
        "name": "Ada",
        "phone_number": "+1",
        "tags": ["x"],
        "notes": None,
        "custom_fields": None,
    }
