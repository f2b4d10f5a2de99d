"""Event names a webhook subscription may name, and the checks on a subscription's input."""

from __future__ import annotations

from app.events.types import SUBSCRIBABLE_EVENTS
from app.kit.errors import InvalidInput

_SUBSCRIBABLE = frozenset(SUBSCRIBABLE_EVENTS)

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

    Only the documented prefix rule; `app.webhooks.ssrf` checks the rest of the URL. The scheme
    is matched case-insensitively, as RFC 3986 defines schemes.
    """
    stripped = url.strip()
    if len(stripped) > MAX_URL_LENGTH:
        raise InvalidInput(f"URL must be at most {MAX_URL_LENGTH} characters", field="url")
    if not stripped.lower().startswith(("http://", "https://")):
        raise InvalidInput(URL_SCHEME_MESSAGE, field="url")
    return stripped
