"""app.kit.crypto: sealed values open only with the right key, purpose, context and content."""

from __future__ import annotations

import pytest

from app.kit.crypto import DecryptionFailed, SecretBox, secret_box

SECRET = "a-secret-key-of-at-least-thirty-two-characters"
OLD_SECRET = "the-previous-secret-key-thirty-two-characters"
CONTEXT = b"channel:org:row"


def test_round_trip_and_format() -> None:
    box = SecretBox([SECRET], "purpose-a")
    sealed = box.encrypt("token-value", CONTEXT)
    version, key_id, _payload = sealed.split(".")
    assert version == "sb1"
    assert key_id == box.primary_key_id
    assert len(key_id) == 8
    assert "token-value" not in sealed
    assert box.decrypt(sealed, CONTEXT) == "token-value"
    assert box.encrypt("token-value", CONTEXT) != sealed  # a fresh nonce every time
    assert not box.needs_reencryption(sealed)


def test_unicode_and_empty_values() -> None:
    box = SecretBox([SECRET], "purpose-a")
    for value in ("", "ключ-🔑", "x" * 5000):
        assert box.decrypt(box.encrypt(value, CONTEXT), CONTEXT) == value


def test_context_purpose_and_key_must_match() -> None:
    box = SecretBox([SECRET], "purpose-a")
    sealed = box.encrypt("token-value", CONTEXT)
    with pytest.raises(DecryptionFailed):
        box.decrypt(sealed, b"channel:org:another-row")
    with pytest.raises(DecryptionFailed):
        SecretBox([SECRET], "purpose-b").decrypt(sealed, CONTEXT)
    with pytest.raises(DecryptionFailed):
        SecretBox([OLD_SECRET], "purpose-a").decrypt(sealed, CONTEXT)
    # Key ids differ per purpose and per secret.
    assert SecretBox([SECRET], "purpose-b").primary_key_id != box.primary_key_id
    assert SecretBox([OLD_SECRET], "purpose-a").primary_key_id != box.primary_key_id


@pytest.mark.parametrize(
    "mangle",
    [
        lambda s: s.replace("sb1.", "sb2.", 1),
        lambda s: s[:-2] + ("A" if s[-2] != "A" else "B") + s[-1],  # altered ciphertext
        lambda s: s.rsplit(".", 1)[0] + ".!!!",
        lambda s: s.rsplit(".", 1)[0] + ".AAAA",  # shorter than a nonce
        lambda s: "plain-text-token",
        lambda s: s + ".extra",
    ],
)
def test_tampered_values_do_not_open(mangle: object) -> None:
    box = SecretBox([SECRET], "purpose-a")
    sealed = box.encrypt("token-value", CONTEXT)
    with pytest.raises(DecryptionFailed):
        box.decrypt(mangle(sealed), CONTEXT)  # type: ignore[operator]


def test_rotation_keyring() -> None:
    old_box = SecretBox([OLD_SECRET], "purpose-a")
    sealed_with_old = old_box.encrypt("token-value", CONTEXT)
    rotated = SecretBox([SECRET, OLD_SECRET], "purpose-a")
    assert rotated.decrypt(sealed_with_old, CONTEXT) == "token-value"
    assert rotated.needs_reencryption(sealed_with_old)
    resealed = rotated.encrypt(rotated.decrypt(sealed_with_old, CONTEXT), CONTEXT)
    assert not rotated.needs_reencryption(resealed)
    assert resealed.split(".")[1] == SecretBox([SECRET], "purpose-a").primary_key_id
    assert rotated.needs_reencryption("garbage")


def test_box_is_built_once_per_process() -> None:
    assert secret_box("purpose-a", SECRET) is secret_box("purpose-a", SECRET)
    with pytest.raises(ValueError):
        SecretBox([], "purpose-a")
    with pytest.raises(ValueError):
        SecretBox([""], "purpose-a")
    with pytest.raises(ValueError):
        SecretBox([SECRET], "")
