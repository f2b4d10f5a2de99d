"""Call log inputs shared by REST and GraphQL, the record input, and the public (REST) shape."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from app.kit.pagination import MAX_LIMIT

CallDirection = Literal["inbound", "outbound"]
CallStatus = Literal["completed", "in-progress", "busy", "failed", "no-answer"]
Speaker = Literal["agent", "caller"]

DEFAULT_PAGE_SIZE = 20
# The spec bounds page below only; above, a 32-bit integer (GraphQL's Int) keeps the offset,
# and the page echoed in the envelope, within what every layer can represent.
MAX_PAGE = 2**31 - 1
MAX_SEARCH_LENGTH = 255


class CallLogListQuery(BaseModel):
    """Envelope B inputs and the list filters (REST query string, GraphQL arguments)."""

    # Frozen: parsed query strings are shared between requests (see RequestContext.query).
    model_config = ConfigDict(extra="ignore", frozen=True)

    page: int = Field(default=1, ge=1, le=MAX_PAGE)
    page_size: int = Field(default=DEFAULT_PAGE_SIZE, ge=1, le=MAX_LIMIT)
    direction: CallDirection | None = None
    status: CallStatus | None = None
    search: str | None = Field(
        default=None,
        max_length=MAX_SEARCH_LENGTH,
        description="Case-insensitive substring of call_id, from_number or to_number",
    )


class TranscriptSegment(BaseModel):
    model_config = ConfigDict(extra="ignore")

    speaker: Speaker
    text: str = Field(max_length=100_000)
    timestamp: float = Field(ge=0, description="Seconds from the start of the call")


class CallLogRecord(BaseModel):
    """What the telephony side knows about a call when it records (or re-records) its log."""

    model_config = ConfigDict(extra="forbid")

    call_id: str = Field(min_length=1, max_length=255)
    from_number: str
    to_number: str
    direction: CallDirection
    status: CallStatus
    agent_id: str | None = None
    chat_phone_number_id: str | None = None
    phone_number_id: str | None = Field(default=None, max_length=255)
    contact_id: str | None = None
    duration_seconds: int = Field(default=0, ge=0)
    started_at: AwareDatetime | None = None
    ended_at: AwareDatetime | None = None
    recording_url: str | None = Field(default=None, max_length=2048)
    transcript: list[TranscriptSegment] = Field(default_factory=list)
    summary: str | None = None
    cost: float = Field(default=0.0, ge=0, le=999_999)


class CallLogResponse(BaseModel):
    """The REST shape; documents the OpenAPI schema. Runtime uses `call_log_to_public`."""

    id: str
    organization_id: str
    call_id: str
    agent_id: str | None
    chat_phone_number_id: str | None
    phone_number_id: str | None
    contact_id: str | None
    from_number: str
    to_number: str
    direction: CallDirection
    status: CallStatus
    duration_seconds: int
    started_at: str
    ended_at: str | None
    recording_url: str | None
    transcript: list[TranscriptSegment]
    summary: str | None
    cost: float
    livemode: bool
    created_at: str
    updated_at: str


def call_log_to_public(call_log: Any) -> dict[str, Any]:
    """REST/event shape of a call log row or entity, for app.kit.jsonutil.dumps."""
    return {
        "id": call_log.id,
        "organization_id": call_log.organization_id,
        "call_id": call_log.call_id,
        "agent_id": call_log.agent_id,
        "chat_phone_number_id": call_log.chat_phone_number_id,
        "phone_number_id": call_log.phone_number_id,
        "contact_id": call_log.contact_id,
        "from_number": call_log.from_number,
        "to_number": call_log.to_number,
        "direction": call_log.direction,
        "status": call_log.status,
        "duration_seconds": call_log.duration_seconds,
        # datetimes stay objects: orjson writes them as ISO 8601 with a Z.
        "started_at": call_log.started_at,
        "ended_at": call_log.ended_at,
        "recording_url": call_log.recording_url,
        "transcript": call_log.transcript or [],
        "summary": call_log.summary,
        "cost": float(call_log.cost),
        "livemode": call_log.livemode,
        "created_at": call_log.created_at,
        "updated_at": call_log.updated_at,
    }
