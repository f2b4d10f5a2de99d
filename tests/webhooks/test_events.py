"""Subscribable event names and the URL prefix rule of a subscription."""

from __future__ import annotations

import pytest

from app.events.types import SUBSCRIBABLE_EVENTS, WEBHOOK_DISABLED, WEBHOOK_TEST
from app.kit.errors import InvalidInput
from app.webhooks.events import validate_event_names, validate_url_scheme

SPEC_EVENTS = [
    "message.received",
    "message.sent",
    "message.failed",
    "conversation.started",
    "conversation.closed",
    "lead.created",
    "lead.updated",
    "ticket.created",
    "ticket.assigned",
    "ticket.resolved",
    "ai.reply.generated",
    "ai.tool.executed",
    "agent.handoff",
    "call.started",
    "call.completed",
    "campaign.started",
    "campaign.completed",
    "campaign.message.delivered",
    "campaign.message.failed",
]


def test_subscribable_events_are_the_spec_list_in_order() -> None:
    assert list(SUBSCRIBABLE_EVENTS) == SPEC_EVENTS
    assert len(SUBSCRIBABLE_EVENTS) == 19


def test_service_events_are_not_subscribable() -> None:
    for name in (WEBHOOK_TEST, WEBHOOK_DISABLED):
        with pytest.raises(InvalidInput, match=f"Invalid event\\(s\\): {name}\\."):
            validate_event_names([name])


def test_valid_names_are_deduplicated_in_order() -> None:
    names = ["lead.created", "message.sent", "lead.created", "call.started", "message.sent"]
    assert validate_event_names(names) == ["lead.created", "message.sent", "call.started"]


def test_invalid_names_are_named_and_allowed_ones_listed() -> None:
    with pytest.raises(InvalidInput) as refused:
        validate_event_names(["lead.created", "foo.bar", "Lead.Created", "foo.bar"])
    assert refused.value.message == (
        "Invalid event(s): foo.bar, Lead.Created. Allowed events: " + ", ".join(SPEC_EVENTS)
    )
    assert refused.value.status == 400


def test_empty_list_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"^At least one event is required$"):
        validate_event_names([])


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://hooks.example.com/in", "https://hooks.example.com/in"),
        ("  http://hooks.example.com/in\n", "http://hooks.example.com/in"),
        ("HTTPS://hooks.example.com/", "HTTPS://hooks.example.com/"),
    ],
)
def test_http_urls_pass(url: str, expected: str) -> None:
    assert validate_url_scheme(url) == expected


@pytest.mark.parametrize(
    "url", ["ftp://hooks.example.com/", "hooks.example.com", "", "http:/x", "httpx://a", "ws://a"]
)
def test_other_schemes_are_refused(url: str) -> None:
    with pytest.raises(InvalidInput, match=r"^URL must start with http:// or https://$"):
        validate_url_scheme(url)


def test_url_length_limit() -> None:
    prefix = "https://hooks.example.com/"
    assert validate_url_scheme(prefix + "a" * (2048 - len(prefix)))
    with pytest.raises(InvalidInput, match=r"^URL must be at most 2048 characters$"):
        validate_url_scheme(prefix + "a" * (2049 - len(prefix)))
