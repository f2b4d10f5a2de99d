"""Places held per key (an organization), at most so many per key and, optionally, in all."""

from __future__ import annotations


class KeyedQuota:
    """Counts what each key holds; `take` refuses past `per_key` for the key or `total` for
    all. Not thread-safe: each user keeps it on one event loop."""

    def __init__(self, per_key: int, total: int | None = None) -> None:
        self.per_key = per_key
        self.total = total
        self._held: dict[str, int] = {}

    @property
    def in_use(self) -> int:
        return sum(self._held.values())

    def held_by(self, key: str) -> int:
        return self._held.get(key, 0)

    def take(self, key: str) -> bool:
        """One more place for `key`, or False when it (or everyone) has none left."""
        held = self._held.get(key, 0)
        if held >= self.per_key or (self.total is not None and self.in_use >= self.total):
            return False
        self._held[key] = held + 1
        return True

    def release(self, key: str) -> None:
        held = self._held.get(key, 0) - 1
        if held > 0:
            self._held[key] = held
        else:
            self._held.pop(key, None)
