"""The simulated carrier of test-mode calls (docs/api.md, Test mode): nothing leaves the process.

It accepts every call like the real carrier would; what then happens depends on the number
called, and is reported through the same status handler the real carrier's callbacks reach
(app/calls/telephony.py `apply_status`), by the calls domain's simulation job.
"""

from __future__ import annotations

import secrets

from app.integrations.telephony.base import CallPlacement, PlacedCall

# Reserved test numbers and how a call to each ends; any other number is answered.
MAGIC_OUTCOMES: dict[str, str] = {
    "+15005550002": "busy",
    "+15005550003": "no-answer",
    "+15005550004": "failed",
}
ANSWERED = "completed"
SIMULATED_SID_PREFIX = "CA"


def simulated_outcome(to_number: str) -> str:
    """The end status of a simulated call to `to_number` (E.164)."""
    return MAGIC_OUTCOMES.get(to_number, ANSWERED)


class SimulatedCarrier:
    """Accepts every call; the outcome is decided by `simulated_outcome`."""

    async def create_call(self, placement: CallPlacement) -> PlacedCall:
        return PlacedCall(sid=SIMULATED_SID_PREFIX + secrets.token_hex(16), status="queued")
