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
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": message_id,
        "status": status,
        "timestamp": str(timestamp if timestamp is not None else int(time.time())),
        "recipient_id": recipient.lstrip("+"),
    }
    if errors:
        entry["errors"] = errors
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
    wa_id = sender.lstrip("+")
    return messages_change(
        business_account_id,
        phone_number_id,
        display_phone_number,
        contacts=[{"profile": {"name": profile_name}, "wa_id": wa_id}],
        messages=[
            {
                "from": wa_id,
                "id": message_id,
                "timestamp": str(timestamp if timestamp is not None else int(time.time())),
                "type": "text",
                "text": {"body": text},
            }
        ],
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
