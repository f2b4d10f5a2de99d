"""Event names a webhook subscription may name, and the checks on a subscription's input."""

from __future__ import annotations

from app.kit.errors import InvalidInput

# Exactly the spec's list, in the spec's order (the order error messages list them in).
SUBSCRIBABLE_EVENTS: tuple[str, ...] = (
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
)
_SUBSCRIBABLE = frozenset(SUBSCRIBABLE_EVENTS)

# Sent by the service itself, never subscribable: `POST /webhooks/{id}/test`, and the notice
# that a subscription was switched off.
WEBHOOK_TEST = "webhook.test"
WEBHOOK_DISABLED = "webhook.disabled"

MAX_URL_LENGTH = 2048
URL_SCHEME_MESSAGE = "URL must start with http:// or https://"


def validate_event_names(names: list[str]) -> list[str]:
    """The names without repeats, in the caller's order; InvalidInput names every bad one."""
    if not names:
        raise InvalidInput("At least one event is required", field="events")
    unique = list(dict.fromkeys(names))
    invalid = [name for name in unique if name not in _SUBSCRIBABLE]
    if invalid:
        raise InvalidInput(
            f"Invalid event(s): {', '.join(invalid)}. "
            f"Allowed events: {', '.join(SUBSCRIBABLE_EVENTS)}",
            field="events",
        )
    return unique


def validate_url_scheme(url: str) -> str:
    """The URL without surrounding whitespace, if it is http(s) and not too long.

    Only the prefix rule of the spec; `app.webhooks.ssrf` checks the rest of the URL. The scheme
    is matched case-insensitively, as RFC 3986 defines schemes.
    """
    stripped = url.strip()
    if len(stripped) > MAX_URL_LENGTH:
        raise InvalidInput(f"URL must be at most {MAX_URL_LENGTH} characters", field="url")
    if not stripped.lower().startswith(("http://", "https://")):
        raise InvalidInput(URL_SCHEME_MESSAGE, field="url")
    return stripped
