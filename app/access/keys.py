"""API key format and hashing (docs/api.md, Authentication)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string

LIVE_PREFIX = "service_sk_live_"
TEST_PREFIX = "service_sk_test_"
SECRET_LENGTH = 40
_BASE62 = string.ascii_letters + string.digits
_KEY_PATTERN = re.compile(r"^service_sk_(live|test)_[0-9A-Za-z]{32,128}$")


def generate_key(livemode: bool) -> str:
    prefix = LIVE_PREFIX if livemode else TEST_PREFIX
    return prefix + "".join(secrets.choice(_BASE62) for _ in range(SECRET_LENGTH))


def is_well_formed(key: str) -> bool:
    return _KEY_PATTERN.match(key) is not None


def is_live(key: str) -> bool:
    return key.startswith(LIVE_PREFIX)


def hash_key(key: str, secret_key: str) -> str:
    """Keyed HMAC so the stored hashes are useless without the server secret."""
    return hmac.new(secret_key.encode(), key.encode(), hashlib.sha256).hexdigest()


def hashes_match(stored: str, candidate: str) -> bool:
    return hmac.compare_digest(stored, candidate)


def display_prefix(key: str) -> str:
    """`service_sk_test_AbCd…`: enough to recognise a key, too little to use it."""
    return key[: len(TEST_PREFIX) + 4]
