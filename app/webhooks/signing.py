"""Webhook secrets and the signature headers every delivery carries (docs/api.md).

Two schemes sign the same raw body bytes, each with its own key taken from the one secret:

- `X-Service-Signature: sha256=<hex>`: HMAC-SHA256 of the body, key = the whole secret string
  (prefix included) as UTF-8, as integrators compute it (docs/api.md).
- Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`): HMAC-SHA256 of
  `{id}.{timestamp}.{body}`, key = base64-decoded secret after `whsec_`, so
  `standardwebhooks.Webhook(secret).verify(body, headers)` works as is.

Several secrets (rotation: the new one first, the old one while receivers switch over) give
one signature each. The documented API is silent on how `X-Service-Signature` lists several; we use
a comma-separated list, `sha256=<hex>,sha256=<hex>`, which with one secret is exactly the
documented single value. `webhook-signature` separates them with spaces, as that spec says.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets as random_source

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
SERVICE_SIGNATURE_PREFIX = "sha256="


def generate_secret() -> str:
    """`whsec_` + standard base64 of 32 random bytes (50 characters)."""
    return SECRET_PREFIX + base64.b64encode(random_source.token_bytes(SECRET_BYTES)).decode("ascii")


def service_signature(secret: str, body: bytes) -> str:
    """One `sha256=<hex>` entry of `X-Service-Signature`."""
    digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return SERVICE_SIGNATURE_PREFIX + digest


def _standard_webhooks_key(secret: str) -> bytes:
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("webhook secret is not whsec_ followed by standard base64") from exc
    if not key:
        raise ValueError("webhook secret is empty")
    return key


def standard_webhooks_signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """One `v1,<base64>` entry of `webhook-signature`."""
    signed_content = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_standard_webhooks_key(secret), signed_content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def sign_delivery(
    secrets: list[str], delivery_id: str, event_type: str, body: bytes, timestamp: int
) -> dict[str, str]:
    """Every header of one delivery attempt; `body` must be the exact bytes that are sent.

    `delivery_id` is both `X-Service-Delivery` and `webhook-id`: stable across retries, so
    receivers can use it to drop duplicates. Sign each attempt afresh (receivers that follow
    Standard Webhooks refuse timestamps more than five minutes off).
    """
    if not secrets:
        raise ValueError("at least one secret is required to sign a delivery")
    stamp = str(timestamp)
    return {
        "Content-Type": "application/json",
        "X-Service-Signature": ",".join(service_signature(secret, body) for secret in secrets),
        "X-Service-Event": event_type,
        "X-Service-Delivery": delivery_id,
        "X-Service-Timestamp": stamp,
        "webhook-id": delivery_id,
        "webhook-timestamp": stamp,
        "webhook-signature": " ".join(
            standard_webhooks_signature(secret, delivery_id, timestamp, body) for secret in secrets
        ),
    }


def verify_service_signature(secret: str, body: bytes, header: str) -> bool:
    """Whether any entry of an `X-Service-Signature` header matches `secret` (for receivers)."""
    expected = service_signature(secret, body)
    return any(
        hmac.compare_digest(expected.encode("ascii"), entry.strip().lower().encode("utf-8"))
        for entry in header.split(",")
    )
