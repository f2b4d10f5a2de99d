"""Places held per key (an organization), at most so many per key and, optionally, in all."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


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


class WaitingQuota:
    """A `KeyedQuota` whose places are waited for instead of refused: `held(key)` waits until
    the key may take one, in arrival order among the keys that may. A freed place goes at once
    to the first waiter whose key is under its cap, so one key at its cap never keeps a place
    from the others. Used from one event loop."""

    def __init__(self, per_key: int, total: int) -> None:
        self._quota = KeyedQuota(per_key, total)
        self._waiting: deque[tuple[str, asyncio.Future[None]]] = deque()

    def held_by(self, key: str) -> int:
        return self._quota.held_by(key)

    @asynccontextmanager
    async def held(self, key: str) -> AsyncIterator[None]:
        # A free place never coexists with a waiter that may take it (`_release` hands it
        # over at once): taking one directly is fair.
        if not self._quota.take(key):
            handed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append((key, handed))
            try:
                await handed
            except asyncio.CancelledError:
                if handed.done() and not handed.cancelled():
                    self._release(key)  # handed over just as the waiter was cancelled
                else:
                    self._waiting.remove((key, handed))
                raise
        try:
            yield
        finally:
            self._release(key)

    def _release(self, key: str) -> None:
        self._quota.release(key)
        for index, (waiting_key, handed) in enumerate(self._waiting):
            if self._quota.take(waiting_key):
                del self._waiting[index]
                handed.set_result(None)
                return
