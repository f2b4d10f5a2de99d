"""Failed credential checks per client address: trying many keys or tokens (spraying) is
throttled like any other request, 429 instead of 401.

Each failure spends one unit of the address's bucket (SWITCHBOARD_AUTH_FAILURE_RATE_LIMIT_PER_
ADDRESS, in the shared rate limiter). When the bucket is empty the address is refused outright,
valid credential or not, until the bucket has room again: answering a valid key while refusing
invalid ones would still let a caller test keys at full speed. That refusal is remembered in the
process, so a request costs nothing more than a dictionary look-up (nothing at all while no
address is refused); each process learns of a refusal from the address's first failure it sees.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from app.kit.errors import RateLimited
from app.kit.ratelimit import RateLimit, RateLimiter

MAX_REFUSED_ADDRESSES = 10_000


class FailedAuthentications:
    def __init__(
        self,
        max_addresses: int = MAX_REFUSED_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_addresses = max_addresses
        self._clock = clock
        self._refused_until: dict[str, float] = {}

    def check(self, address: str) -> None:
        """RateLimited while `address` is refused; no I/O."""
        if not self._refused_until:
            return
        until = self._refused_until.get(address)
        if until is None:
            return
        remaining = until - self._clock()
        if remaining > 0:
            raise RateLimited(remaining)
        del self._refused_until[address]

    async def failed(self, limiter: RateLimiter, address: str, limit: RateLimit) -> None:
        """Count one failure of `address`; RateLimited (and refused from now) when over."""
        decision = await limiter.hit(f"auth-failures:{address}", limit)
        if decision.allowed:
            return
        self._refuse(address, decision.retry_after)
        raise RateLimited(decision.retry_after)

    def _refuse(self, address: str, seconds: float) -> None:
        now = self._clock()
        if len(self._refused_until) >= self.max_addresses:
            self._refused_until = {a: t for a, t in self._refused_until.items() if t > now}
            if len(self._refused_until) >= self.max_addresses:
                # Forgetting is safe: the shared bucket refuses the next failure again.
                self._refused_until.clear()
        self._refused_until[address] = now + seconds
