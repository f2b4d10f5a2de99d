"""The serializers compiled for public shapes (app/kit/serialize.py, app/kit/shape.py)."""

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
from app.kit.serialize import compile_serializer
from app.quick_replies.schemas import QuickReplyResponse, quick_reply_to_public
from app.webhooks.schemas import (
    WebhookDeliveryAttemptResponse,
    WebhookSubscriptionResponse,
    attempt_to_public,
    webhook_to_public,
)


def test_fields_in_the_entries_order_with_conversions_in_place() -> None:
    to_public = compile_serializer(
        "Shape",
        [
            ("id", "id", None),
            ("tags", "tags", lambda tags: tags or []),
            ("created_at", "created_at", None),
        ],
    )
    now = datetime.now(UTC)
    row = SimpleNamespace(id="a", tags=None, created_at=now, secret="never")
    shape = to_public(row)
    assert list(shape.items()) == [("id", "a"), ("tags", []), ("created_at", now)]


def test_a_renamed_field_a_whole_row_value_and_a_name_that_is_no_identifier() -> None:
    to_public = compile_serializer(
        "One", [("type", "kind", None), ("both", "", lambda row: f"{row.kind}/{row.id}")]
    )
    assert to_public(SimpleNamespace(id="x", kind="text")) == {"type": "text", "both": "text/x"}
    with pytest.raises(ValueError, match="not an identifier"):
        compile_serializer("Bad", [("a-b", "a", None)])


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
    ticket = _row(
        TicketResponse,
        contact_name="Ada",
        contact_phone_number="+1",
        contact_tags=None,
        contact_notes=None,
        contact_custom_fields=None,
    )
    # The contact's brief comes from the joined contact's labelled columns.
    assert ticket_to_public(ticket)["contact"] == {
        "id": "contact_id-value",
        "name": "Ada",
        "phone_number": "+1",
        "tags": [],
        "notes": None,
        "custom_fields": None,
    }
