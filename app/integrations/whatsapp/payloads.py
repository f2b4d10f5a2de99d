"""The platform's webhook payloads and their signature.

Meta posts `{"object": "whatsapp_business_account", "entry": [{"id": <WABA id>, "changes":
[{"field": …, "value": …}]}]}` with `X-Hub-Signature-256: sha256=<HMAC-SHA256 of the raw body,
keyed with the app secret>`. The simulator builds its callbacks here, so they are
byte-for-byte the platform's shape.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Any

from app.integrations.whatsapp.types import is_user_id

SIGNATURE_HEADER = "X-Hub-Signature-256"


def sign(app_secret: str, body: bytes) -> str:
    digest = hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def signature_valid(app_secret: str, body: bytes, header: str | None) -> bool:
    return header is not None and hmac.compare_digest(sign(app_secret, body), header.strip())


def envelope(business_account_id: str, field: str, value: dict[str, Any]) -> dict[str, Any]:
    return {
        "object": "whatsapp_business_account",
        "entry": [{"id": business_account_id, "changes": [{"field": field, "value": value}]}],
    }


def _metadata(phone_number_id: str, display_phone_number: str) -> dict[str, str]:
    return {
        "display_phone_number": display_phone_number.lstrip("+"),
        "phone_number_id": phone_number_id,
    }


def messages_change(
    business_account_id: str,
    phone_number_id: str,
    display_phone_number: str,
    **parts: list[dict[str, Any]],
) -> dict[str, Any]:
    """A `messages` webhook of one phone number; `parts` are its `statuses`, `contacts` and
    `messages` lists."""
    return envelope(
        business_account_id,
        "messages",
        {
            "messaging_product": "whatsapp",
            "metadata": _metadata(phone_number_id, display_phone_number),
            **parts,
        },
    )


def message_status(
    business_account_id: str,
    phone_number_id: str,
    display_phone_number: str,
    message_id: str,
    recipient: str,
    status: str,
    *,
    timestamp: int | None = None,
    errors: list[dict[str, Any]] | None = None,
    pricing: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A `statuses[]` change. A recipient known by business-scoped user id only is named in
    `recipient_user_id` (no `recipient_id`)."""
    entry: dict[str, Any] = {
        "id": message_id,
        "status": status,
        "timestamp": str(timestamp if timestamp is not None else int(time.time())),
    }
    if is_user_id(recipient):
        entry["recipient_user_id"] = recipient
    else:
        entry["recipient_id"] = recipient.lstrip("+")
    if errors:
        entry["errors"] = errors
    if pricing:
        entry["pricing"] = pricing
    return messages_change(
        business_account_id, phone_number_id, display_phone_number, statuses=[entry]
    )


def inbound_text(
    business_account_id: str,
    phone_number_id: str,
    display_phone_number: str,
    message_id: str,
    sender: str,
    text: str,
    *,
    profile_name: str = "",
    timestamp: int | None = None,
) -> dict[str, Any]:
    """An inbound text. A `sender` that is a business-scoped user id is a user who hides
    their number: `contacts[].user_id` and `messages[].from_user_id`, no `wa_id` nor `from`."""
    at = str(timestamp if timestamp is not None else int(time.time()))
    message: dict[str, Any] = {"id": message_id, "timestamp": at, "type": "text"}
    if is_user_id(sender):
        contact: dict[str, Any] = {"profile": {"name": profile_name}, "user_id": sender}
        message["from_user_id"] = sender
    else:
        contact = {"profile": {"name": profile_name}, "wa_id": sender.lstrip("+")}
        message["from"] = sender.lstrip("+")
    message["text"] = {"body": text}
    return messages_change(
        business_account_id,
        phone_number_id,
        display_phone_number,
        contacts=[contact],
        messages=[message],
    )


def template_status_update(
    business_account_id: str,
    template_id: str,
    name: str,
    language: str,
    event: str,
    reason: str | None = None,
) -> dict[str, Any]:
    return envelope(
        business_account_id,
        "message_template_status_update",
        {
            "event": event,
            "message_template_id": int(template_id) if template_id.isdigit() else template_id,
            "message_template_name": name,
            "message_template_language": language,
            "reason": reason or "NONE",
        },
    )


def template_quality_update(
    business_account_id: str,
    template_id: str,
    name: str,
    language: str,
    previous: str,
    new: str,
) -> dict[str, Any]:
    return envelope(
        business_account_id,
        "message_template_quality_update",
        {
            "previous_quality_score": previous,
            "new_quality_score": new,
            "message_template_id": int(template_id) if template_id.isdigit() else template_id,
            "message_template_name": name,
            "message_template_language": language,
        },
    )


def template_category_update(
    business_account_id: str,
    template_id: str,
    name: str,
    language: str,
    previous: str,
    new: str,
) -> dict[str, Any]:
    return envelope(
        business_account_id,
        "template_category_update",
        {
            "message_template_id": int(template_id) if template_id.isdigit() else template_id,
            "message_template_name": name,
            "message_template_language": language,
            "previous_category": previous,
            "new_category": new,
        },
    )


def phone_number_quality_update(
    business_account_id: str,
    display_phone_number: str,
    event: str,
    current_limit: str,
    **extra: Any,
) -> dict[str, Any]:
    return envelope(
        business_account_id,
        "phone_number_quality_update",
        {
            "display_phone_number": display_phone_number.lstrip("+"),
            "event": event,
            "current_limit": current_limit,
            **extra,
        },
    )


def at_time(payload: dict[str, Any], seconds: int) -> dict[str, Any]:
    """The webhook with Meta's send time (`entry[].time`) set on each entry."""
    for entry in payload["entry"]:
        entry["time"] = seconds
    return payload
