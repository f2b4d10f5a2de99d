"""Failed credential checks per client address: trying many keys or tokens (spraying) is
throttled, 429 instead of 401.

Each failure spends one unit of the address's bucket (SWITCHBOARD_AUTH_FAILURE_RATE_LIMIT_PER_
ADDRESS, in the shared rate limiter). When the bucket is empty the address's failures are
refused with 429 until it has room again, and only its failures: a valid credential from the
same address (a neighbour behind the same NAT or proxy) is always served. The refusal is
remembered in the process (each process learns of it from the address's first failure it
sees), so while it lasts a failure costs no limiter round trip, and a request whose credential
cannot be valid on its face (no header, a malformed key, a JWT with a bad signature) is refused
after a dictionary look-up alone, before any database work (app/access/gate.py). Random
well-formed keys cost what any request's key costs: a keyed hash and one indexed look-up.
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

    def refused_for(self, address: str) -> float | None:
        """Seconds until `address`'s failures are answered 401 again, or None; no I/O."""
        if not self._refused_until:
            return None
        until = self._refused_until.get(address)
        if until is None:
            return None
        remaining = until - self._clock()
        if remaining > 0:
            return remaining
        del self._refused_until[address]
        return None

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
