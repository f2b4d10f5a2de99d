"""Delivery signatures: X-Service-Signature by hand, Standard Webhooks with its own library."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from app.webhooks.signing import (
    generate_secret,
    service_signature,
    sign_delivery,
    verify_service_signature,
)

BODY = b'{"id":"evt_1","type":"lead.created","data":{"name":"Zo\xc3\xab"}}'
DELIVERY_ID = "whd_0123456789"


def signed(secrets: list[str], body: bytes = BODY, timestamp: int | None = None) -> dict[str, str]:
    stamp = int(time.time()) if timestamp is None else timestamp
    return sign_delivery(secrets, DELIVERY_ID, "lead.created", body, stamp)


def test_secret_format() -> None:
    secret = generate_secret()
    assert re.fullmatch(r"whsec_[A-Za-z0-9+/]{43}=", secret)
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert generate_secret() != secret


def test_every_contract_header_is_present() -> None:
    secret = generate_secret()
    headers = signed([secret], timestamp=1_700_000_000)
    assert set(headers) == {
        "Content-Type",
        "X-Service-Signature",
        "X-Service-Event",
        "X-Service-Delivery",
        "X-Service-Timestamp",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    }
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Service-Event"] == "lead.created"
    assert headers["X-Service-Delivery"] == headers["webhook-id"] == DELIVERY_ID
    assert headers["X-Service-Timestamp"] == headers["webhook-timestamp"] == "1700000000"


def test_service_signature_is_hmac_of_the_raw_body_keyed_by_the_whole_secret() -> None:
    secret = generate_secret()
    headers = signed([secret])
    by_hand = hmac.new(secret.encode("utf-8"), BODY, hashlib.sha256).hexdigest()
    assert headers["X-Service-Signature"] == f"sha256={by_hand}"
    assert verify_service_signature(secret, BODY, headers["X-Service-Signature"])


def test_standard_webhooks_library_verifies_the_delivery() -> None:
    secret = generate_secret()
    headers = signed([secret])
    assert Webhook(secret).verify(BODY, headers) == {
        "id": "evt_1",
        "type": "lead.created",
        "data": {"name": "Zoë"},
    }


def test_standard_webhooks_signature_by_hand() -> None:
    secret = generate_secret()
    headers = signed([secret], timestamp=1_700_000_000)
    key = base64.b64decode(secret.removeprefix("whsec_"))
    content = f"{DELIVERY_ID}.1700000000.".encode() + BODY
    expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    assert headers["webhook-signature"] == f"v1,{expected}"


def test_two_secrets_during_rotation_both_verify() -> None:
    new, old = generate_secret(), generate_secret()
    headers = signed([new, old])
    assert headers["X-Service-Signature"] == (
        f"{service_signature(new, BODY)},{service_signature(old, BODY)}"
    )
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (new, old):
        assert verify_service_signature(secret, BODY, headers["X-Service-Signature"])
        assert Webhook(secret).verify(BODY, headers)["id"] == "evt_1"
    stranger = generate_secret()
    assert not verify_service_signature(stranger, BODY, headers["X-Service-Signature"])
    with pytest.raises(WebhookVerificationError):
        Webhook(stranger).verify(BODY, headers)


def test_tampered_body_fails_both_checks() -> None:
    secret = generate_secret()
    headers = signed([secret])
    tampered = BODY.replace(b"lead.created", b"lead.updated")
    assert not verify_service_signature(secret, tampered, headers["X-Service-Signature"])
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(tampered, headers)


def test_tampered_delivery_id_or_timestamp_fails_standard_webhooks() -> None:
    secret = generate_secret()
    headers = signed([secret])
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY, {**headers, "webhook-id": "whd_other"})
    later = str(int(headers["webhook-timestamp"]) + 1)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY, {**headers, "webhook-timestamp": later})


def test_verify_service_signature_rejects_garbage() -> None:
    secret = generate_secret()
    for header in ("", "sha256=", "sha256=00", "md5=abc", "ü"):
        assert not verify_service_signature(secret, BODY, header)


def test_signing_needs_a_secret() -> None:
    with pytest.raises(ValueError, match="at least one secret"):
        signed([])


def test_secret_that_is_not_base64_is_refused() -> None:
    with pytest.raises(ValueError, match="base64"):
        signed(["whsec_not base64!"])
