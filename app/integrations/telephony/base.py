"""What Switchboard asks of a voice carrier, whichever one answers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

# Carrier call states (Twilio's CallStatus values) and the call log status each one means.
# Everything before an end state is a call still under way.
CARRIER_STATUS_TO_CALL_STATUS: dict[str, str] = {
    "queued": "in-progress",
    "initiated": "in-progress",
    "ringing": "in-progress",
    "in-progress": "in-progress",
    "completed": "completed",
    "busy": "busy",
    "no-answer": "no-answer",
    "failed": "failed",
    "canceled": "failed",
}
END_STATUSES = frozenset({"completed", "busy", "no-answer", "failed"})


class CarrierError(Exception):
    """The carrier refused or could not take a request.

    `retryable` is true for what may succeed later (the carrier's 5xx and 429, a timeout, a
    refused connection); a 4xx means the request itself was wrong and is not sent again.
    """

    def __init__(self, message: str, *, status: int | None = None, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code

    @property
    def retryable(self) -> bool:
        return self.status is None or self.status == 429 or self.status >= 500


@dataclass(frozen=True, slots=True)
class CallPlacement:
    """An outbound call to place; the carrier reports its progress to `status_callback_url`."""

    to_number: str
    from_number: str
    status_callback_url: str
    # What the callee's answer runs: the media stream of the agent (live calls).
    twiml: str
    # Where the asynchronous answering-machine verdict goes (None: no detection).
    machine_detection_url: str | None = None
    record: bool = True


@dataclass(frozen=True, slots=True)
class PlacedCall:
    sid: str
    status: str  # the carrier's status (queued, initiated, …)


@dataclass(frozen=True, slots=True)
class ListedCall:
    """One call of the carrier's call list (what a placement lookup compares)."""

    sid: str
    status: str
    to_number: str
    from_number: str
    created_at: datetime | None  # when the carrier took the request


@dataclass(frozen=True, slots=True)
class CallDetails:
    """What the carrier reports about a call after the fact."""

    sid: str
    status: str
    duration_seconds: int | None
    cost: float | None  # USD, positive
    recording_url: str | None


class Carrier(Protocol):
    """Places calls. The real client and the simulator both implement it."""

    async def create_call(self, placement: CallPlacement) -> PlacedCall: ...
