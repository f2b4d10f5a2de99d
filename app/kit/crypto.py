"""Authenticated encryption of secrets the service must store and use again (upstream tokens).

AES-256-GCM, keyed from the service's secret key (`SWITCHBOARD_SECRET_KEY`) through HKDF-SHA256
with a purpose label: each purpose gets its own key, so a ciphertext made for one use never
decrypts as another, and the secret key itself never touches data.

Stored form: ``sb1.<key id>.<base64url(nonce || ciphertext || tag)>``

- ``sb1`` names this format, so a later one can be told apart.
- The key id is 8 hex characters derived (HKDF, a label of its own) from the same secret and
  purpose: it says which key made the value without revealing anything about the key. A
  `SecretBox` holds a keyring: the first secret encrypts, every secret decrypts the values made
  with it. Rotating = put the new secret first and the old one after it, re-encrypt the values
  `needs_reencryption` reports, then drop the old secret.
- Associated data binds a ciphertext to where it belongs (e.g. its organization and row id):
  copied into another row, it does not decrypt.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

FORMAT = "sb1"
NONCE_BYTES = 12
KEY_BYTES = 32
KEY_ID_BYTES = 4
_SALT = b"switchboard/secret-box/v1"


class DecryptionFailed(Exception):
    """The value is not ours, was altered, belongs elsewhere, or its key is no longer held."""


def _derive(secret: str, label: str, length: int) -> bytes:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=length, salt=_SALT, info=label.encode())
    return hkdf.derive(secret.encode())


@dataclass(frozen=True, slots=True)
class _Key:
    key_id: str
    aead: AESGCM


def _key(secret: str, purpose: str) -> _Key:
    if not secret:
        raise ValueError("an empty secret cannot key a SecretBox")
    material = _derive(secret, f"switchboard:{purpose}:encryption-key", KEY_BYTES)
    key_id = _derive(secret, f"switchboard:{purpose}:key-id", KEY_ID_BYTES).hex()
    return _Key(key_id, AESGCM(material))


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SecretBox:
    """Encrypts with the first secret of the ring, decrypts with whichever made the value."""

    def __init__(self, secrets: Sequence[str], purpose: str) -> None:
        if not secrets:
            raise ValueError("a SecretBox needs at least one secret")
        if not purpose:
            raise ValueError("a SecretBox needs a purpose label")
        self.purpose = purpose
        self._keys = tuple(_key(secret, purpose) for secret in secrets)

    @property
    def primary_key_id(self) -> str:
        return self._keys[0].key_id

    def encrypt(self, plaintext: str, associated_data: bytes) -> str:
        key = self._keys[0]
        nonce = os.urandom(NONCE_BYTES)
        sealed = key.aead.encrypt(nonce, plaintext.encode(), associated_data)
        return f"{FORMAT}.{key.key_id}.{_b64encode(nonce + sealed)}"

    def decrypt(self, stored: str, associated_data: bytes) -> str:
        version, key_id, payload = self._parts(stored)
        if version != FORMAT:
            raise DecryptionFailed(f"unknown format {version!r}")
        try:
            raw = _b64decode(payload)
        except (binascii.Error, ValueError) as exc:
            raise DecryptionFailed("payload is not base64url") from exc
        if len(raw) <= NONCE_BYTES:
            raise DecryptionFailed("payload too short")
        nonce, sealed = raw[:NONCE_BYTES], raw[NONCE_BYTES:]
        # Two secrets may share a 32-bit id (rarely): the tag tells which one really matches.
        for key in self._keys:
            if key.key_id != key_id:
                continue
            try:
                return key.aead.decrypt(nonce, sealed, associated_data).decode()
            except InvalidTag:
                continue
        raise DecryptionFailed("no key of this box opens the value (wrong key, row or content)")

    def needs_reencryption(self, stored: str) -> bool:
        """True when the value was made with an older secret of the ring (or is unreadable)."""
        try:
            version, key_id, _payload = self._parts(stored)
        except DecryptionFailed:
            return True
        return version != FORMAT or key_id != self.primary_key_id

    @staticmethod
    def _parts(stored: str) -> tuple[str, str, str]:
        parts = stored.split(".")
        if len(parts) != 3:
            raise DecryptionFailed("not a sealed value")
        return parts[0], parts[1], parts[2]


@lru_cache(maxsize=32)
def secret_box(purpose: str, *secrets: str) -> SecretBox:
    """The process's box for `purpose`: key derivation runs once, not on every request."""
    return SecretBox(secrets, purpose)
