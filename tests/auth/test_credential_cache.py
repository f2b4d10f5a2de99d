"""CredentialCache rules: nothing served while disabled, no stale row stored after a
revocation that raced with its lookup, bounded size, and a time limit."""

from __future__ import annotations

import time

import pytest

from app.access.cache import CredentialCache


def test_a_disabled_cache_neither_stores_nor_serves() -> None:
    cache = CredentialCache()
    cache.put("h", "row", cache.generation)
    assert cache.get("h") is None
    cache.set_enabled(True)
    cache.put("h", "row", cache.generation)
    assert cache.get("h") == "row"
    cache.set_enabled(False)
    assert cache.get("h") is None


def test_a_lookup_that_raced_with_a_revocation_is_not_stored() -> None:
    cache = CredentialCache()
    cache.set_enabled(True)
    generation = cache.generation  # lookup starts, reads the not-yet-revoked row...
    cache.revoke("h")  # ...the revocation notification arrives meanwhile
    cache.put("h", "stale row", generation)
    assert cache.get("h") is None


def test_revoke_drops_the_entry() -> None:
    cache = CredentialCache()
    cache.set_enabled(True)
    cache.put("h", "row", cache.generation)
    cache.revoke("h")
    assert cache.get("h") is None


def test_the_oldest_entry_goes_first_when_full() -> None:
    cache = CredentialCache(max_entries=2)
    cache.set_enabled(True)
    for name in ("a", "b", "c"):
        cache.put(name, name.upper(), cache.generation)
    assert [cache.get(name) for name in ("a", "b", "c")] == [None, "B", "C"]


def test_entries_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = CredentialCache(ttl_seconds=10)
    cache.set_enabled(True)
    cache.put("h", "row", cache.generation)
    later = time.monotonic() + 11
    monkeypatch.setattr("app.access.cache.time.monotonic", lambda: later)
    assert cache.get("h") is None
