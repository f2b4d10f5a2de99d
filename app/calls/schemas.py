"""Call log inputs shared by REST and GraphQL, the record input, and the public shapes."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import strawberry
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
)
from strawberry.scalars import JSON

from app.calls import models
from app.kit.pagination import MAX_LIMIT
from app.kit.shape import GRAPHQL_ONLY, Rest, Shape, column, computed, linked

CallDirection = Literal["inbound", "outbound"]
CallStatus = Literal["completed", "in-progress", "busy", "failed", "no-answer"]
Speaker = Literal["agent", "caller"]

DEFAULT_PAGE_SIZE = 20
# The API bounds page below only; above, a 32-bit integer (GraphQL's Int) keeps the offset,
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


AnalysisStatus = Literal["pending", "completed", "failed"]


class CallAnalysisError(BaseModel):
    code: str = Field(
        description="`llm_unavailable`, `llm_rejected`, `invalid_output` (the model's data "
        "does not match the schema), `incomplete` (the offline extractor could not fill "
        "every required field), `no_transcript`, `agent_gone`"
    )
    message: str


class CallAnalysis(BaseModel):
    """A finished call's analysis (docs/api.md, "Call analysis")."""

    status: AnalysisStatus = Field(
        description="`pending` while the analysis job is queued or running, then `completed` "
        "or `failed` (see `error`)"
    )
    data: dict[str, Any] | None = Field(
        description="What was extracted, valid against the agent's analysis_schema when "
        "`status` is `completed`; on `failed`, what could be extracted"
    )
    success: bool | None = Field(
        description="The verdict on the agent's success_criteria; null when the agent has "
        "none or no model could judge it"
    )
    criteria: str | None = Field(description="The success_criteria judged")
    reason: str | None = Field(description="Why the verdict is what it is")
    extractor: Literal["llm", "offline"] | None = Field(
        description="`llm`: the agent's model through a function call; `offline`: the "
        "deterministic extractor, used when no model is reachable"
    )
    model: str | None
    unfilled: list[str] = Field(
        default_factory=list,
        description="Schema properties the offline extractor found nothing for",
    )
    error: CallAnalysisError | None = None
    requested_at: str | None = None
    analyzed_at: str | None = Field(description="When the current result was written")


@strawberry.type(name="TranscriptSegment", description="One turn of a call's transcript.")
class TranscriptTurn:
    speaker: str = strawberry.field(description="`agent` or `caller`")
    text: str
    timestamp: float = strawberry.field(description="Seconds from the start of the call")


def _transcript(root: strawberry.Parent[Any]) -> list[TranscriptTurn]:
    # `root` is the call log row or entity the field resolves on.
    return [
        TranscriptTurn(
            speaker=segment["speaker"], text=segment["text"], timestamp=segment["timestamp"]
        )
        for segment in root.transcript or ()
    ]


def _transcript_of(call_log: Any) -> list[dict[str, Any]]:
    return call_log.transcript or []


@strawberry.type
class CallLogShape:
    """The public shape of a call log, declared once (app/kit/shape.py); the GraphQL type
    `CallLog` (app/calls/graphql.py) resolves its agent."""

    id: strawberry.ID = column(models.CallLog.id, as_type=strawberry.ID)
    organization_id: str = column(models.CallLog.organization_id)
    call_id: str = column(
        models.CallLog.call_id, description="Carrier or gateway session identifier"
    )
    agent_id: str | None = column(models.CallLog.agent_id)
    chat_phone_number_id: str | None = column(models.CallLog.chat_phone_number_id)
    phone_number_id: str | None = column(models.CallLog.phone_number_id)
    contact_id: str | None = column(models.CallLog.contact_id)
    from_number: str = column(models.CallLog.from_number)
    to_number: str = column(models.CallLog.to_number)
    direction: str = column(
        models.CallLog.direction,
        description="`inbound` or `outbound`",
        rest=Rest(annotation=CallDirection),
    )
    status: str = column(
        models.CallLog.status,
        description="`completed`, `in-progress`, `busy`, `failed` or `no-answer`",
        rest=Rest(annotation=CallStatus),
    )
    duration_seconds: int = column(models.CallLog.duration_seconds)
    started_at: datetime = column(models.CallLog.started_at)
    ended_at: datetime | None = column(models.CallLog.ended_at)
    recording_url: str | None = column(models.CallLog.recording_url)
    transcript: list[TranscriptTurn] = computed(
        _transcript,
        sources=(models.CallLog.transcript,),
        rest=Rest(annotation=list[TranscriptSegment], value=_transcript_of),
    )
    # Resolved by the GraphQL type (app/calls/graphql.py): it needs agents' loader and type.
    agent: object = linked(sources=(models.CallLog.agent_id,))
    summary: str | None = column(models.CallLog.summary)
    cost: float = column(models.CallLog.cost, description="USD", rest=Rest(convert=float))
    input_tokens: int = column(
        models.CallLog.input_tokens,
        description="Model tokens read by the agent's replies",
        rest=GRAPHQL_ONLY,
    )
    output_tokens: int = column(
        models.CallLog.output_tokens,
        description="Model tokens written by its replies",
        rest=GRAPHQL_ONLY,
    )
    end_reason: str | None = column(
        models.CallLog.end_reason,
        description="Why a live call ended (caller_hung_up, agent_ended, transferred, "
        "voicemail_left, silence_timeout, process_lost, …); null for other calls",
        rest=Rest(
            description="Why a live call ended: caller_hung_up, agent_ended, transferred, "
            "voicemail_left, voicemail_hangup, silence_timeout, max_duration, no_speech_to_text, "
            "stt_rejected, stt_unavailable, tts_rejected, tts_unavailable, stream_error, "
            "process_lost, draining_limit; placement_unconfirmed, placement_stalled (outbound "
            "calls the carrier never confirmed, ended by the placement sweep); null while under "
            "way and for other calls"
        ),
    )
    answered_by: str | None = column(
        models.CallLog.answered_by,
        description="The carrier's answering-machine verdict on an outbound live call",
        rest=Rest(
            description="The carrier's answering-machine verdict on an outbound live call: "
            "human, machine_start, machine_end_beep, machine_end_silence, machine_end_other, "
            "fax, unknown"
        ),
    )
    analysis: JSON | None = column(
        models.CallLog.analysis,
        as_type=JSON,
        description="The post-call analysis, as REST's `analysis`: {status, data, success, "
        "criteria, reason, extractor, model, unfilled, error, requested_at, analyzed_at}; "
        "null when the agent asks for none",
        rest=Rest(
            annotation=CallAnalysis | None,
            description="The post-call analysis; null when the agent defines neither "
            "analysis_schema nor success_criteria and none was asked for",
        ),
    )
    livemode: bool = column(models.CallLog.livemode)
    created_at: datetime = column(models.CallLog.created_at)
    updated_at: datetime = column(models.CallLog.updated_at)


CALL_LOG = Shape(
    CallLogShape,
    rest_name="CallLogResponse",
    rest_doc="The REST shape; documents the OpenAPI schema. Runtime uses `call_log_to_public`.",
)
CallLogResponse = CALL_LOG.rest_model
call_log_to_public = CALL_LOG.to_public  # REST bodies and event payloads


MAX_SCRIPT_LINES = 20
MAX_SCRIPT_LINE_LENGTH = 500
MAX_METADATA_KEYS = 50


class CallDispatch(BaseModel):
    """POST /api/v1/calls and the dispatchCall mutation."""

    model_config = ConfigDict(extra="ignore")

    # A str (not UUID) so a malformed id answers the agents' 400, as docs/api.md says; the
    # document still declares the UUID form.
    agent_id: str = Field(min_length=1, max_length=64, json_schema_extra={"format": "uuid"})
    to_number: str = Field(min_length=1, max_length=50)
    from_number: str | None = Field(default=None, min_length=1, max_length=50)
    metadata: dict[str, Any] | None = Field(
        default=None,
        max_length=MAX_METADATA_KEYS,
        description="Free-form; on test-mode calls `script` (a list of caller lines) is what "
        "the simulated caller says",
    )

    @field_validator("metadata")
    @classmethod
    def _script(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None or "script" not in value:
            return value
        script = value["script"]
        if (
            not isinstance(script, list)
            or not 1 <= len(script) <= MAX_SCRIPT_LINES
            or not all(
                isinstance(line, str) and line.strip() and len(line) <= MAX_SCRIPT_LINE_LENGTH
                for line in script
            )
        ):
            raise ValueError(
                f"script must be a list of 1 to {MAX_SCRIPT_LINES} caller lines of at most "
                f"{MAX_SCRIPT_LINE_LENGTH} characters"
            )
        return value

    def script(self) -> list[str] | None:
        return None if self.metadata is None else self.metadata.get("script")


class PhoneNumberAssign(BaseModel):
    """POST /api/v1/phone-numbers: the agent that answers a number's incoming calls."""

    model_config = ConfigDict(extra="ignore")

    phone_number: str = Field(min_length=1, max_length=50)
    # A str (not UUID) so a malformed id answers the agents' 400, as docs/api.md says; the
    # document still declares the UUID form.
    agent_id: str = Field(min_length=1, max_length=64, json_schema_extra={"format": "uuid"})


@strawberry.type(description="A number whose incoming calls an agent answers.")
class PhoneNumber:
    """The public shape of a number assignment, declared once (app/kit/shape.py)."""

    id: strawberry.ID = column(models.AgentPhoneNumber.id, as_type=strawberry.ID)
    organization_id: str = column(models.AgentPhoneNumber.organization_id)
    agent_id: str = column(models.AgentPhoneNumber.agent_id)
    phone_number: str = column(models.AgentPhoneNumber.phone_number, description="E.164")
    livemode: bool = column(models.AgentPhoneNumber.livemode)
    created_at: datetime = column(models.AgentPhoneNumber.created_at)
    updated_at: datetime = column(models.AgentPhoneNumber.updated_at)


PHONE_NUMBER = Shape(PhoneNumber, rest_name="PhoneNumberResponse")
PhoneNumberResponse = PHONE_NUMBER.rest_model
phone_number_to_public = PHONE_NUMBER.to_public


class WebCallStart(BaseModel):
    """POST /api/v1/calls/web and the startWebCall mutation: a browser session with an agent."""

    model_config = ConfigDict(extra="ignore")

    # A str (not UUID) so a malformed id answers the agents' 400, as on POST /calls.
    agent_id: str = Field(min_length=1, max_length=64, json_schema_extra={"format": "uuid"})


class WebCallResponse(BaseModel):
    """Where the browser streams its microphone, and the single-use token that opens it."""

    call_log_id: str
    url: str = Field(description="The session's websocket URL (ws:// or wss://)")
    token: str = Field(description="Opens the stream once, until expires_at")
    expires_at: str
