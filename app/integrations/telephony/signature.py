"""The carrier's request signature (Twilio's X-Twilio-Signature scheme).

The signed text is the full URL the carrier requested (query string included) followed by
every POST parameter, sorted by name (then value, for repeated names), as name and value
without separators; the signature is base64 of its HMAC-SHA1 under the account's auth token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable

SIGNATURE_HEADER = "X-Twilio-Signature"


def compute_signature(auth_token: str, url: str, params: Iterable[tuple[str, str]]) -> str:
    text = url + "".join(name + value for name, value in sorted(params))
    digest = hmac.new(auth_token.encode(), text.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def is_valid_signature(
    auth_token: str, url: str, params: Iterable[tuple[str, str]], signature: str | None
) -> bool:
    if not signature:
        return False
    expected = compute_signature(auth_token, url, params)
    return hmac.compare_digest(expected.encode(), signature.encode())
