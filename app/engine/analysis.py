"""Post-call analysis: structured data and a success verdict from a finished call's transcript.

With a model reachable (the agent's `llm_provider` on the organization's key, or its
`llm_base_url`), the model is given one function, `record_call_analysis`, whose parameters
are the agent's `analysis_schema` (as `data`) beside `success` and `reason`; its arguments
are the analysis. Without one, a deterministic offline extractor fills what it can from the
transcript (e-mail addresses, phone numbers, dates, names said as "my name is …", enum values
named, numbers and yes/no answers in the caller's lines about a field) and says which fields
it left empty; it never judges the success criteria. Either way the data is validated against
the schema here, and a failure is an `AnalysisResult` with `error`, never an exception.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from jsonschema import Draft202012Validator

from app.engine.providers.base import CompletionRequest, LanguageModel, ProviderFailure
from app.engine.types import Message, ToolSpec, Usage

ANALYSIS_TOOL = "record_call_analysis"
# The transcript handed to the model: its last characters when longer.
MAX_TRANSCRIPT_CHARS = 60_000
# What an analysis may store as `data` (a model's runaway answer is not kept).
MAX_DATA_BYTES = 64 * 1024
ANALYSIS_MAX_OUTPUT_TOKENS = 1_024
OFFLINE_VERDICT = "No model is reachable, so the success criteria were not judged."

ANALYSIS_PROMPT = (
    "You analyze a finished phone call between an AI agent and a caller, for the agent's "
    "team. Call the function {tool} exactly once. In `data`, put the fields its schema "
    "describes, taken only from what was said in the call; leave out a field nobody "
    "mentioned rather than guessing.{criteria}"
)
CRITERIA_PROMPT = (
    " In `success`, say whether the call met these success criteria, and in `reason` why, "
    "in one sentence: {criteria}"
)


@dataclass(frozen=True, slots=True)
class AnalysisError:
    code: str
    message: str

    def public(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass
class AnalysisResult:
    data: dict[str, Any] | None
    success: bool | None
    reason: str | None
    extractor: str  # llm or offline
    model: str | None = None
    unfilled: list[str] = field(default_factory=list)
    error: AnalysisError | None = None
    usage: Usage = field(default_factory=Usage)


def transcript_text(transcript: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        f"{'Agent' if segment.get('speaker') == 'agent' else 'Caller'}: {segment.get('text', '')}"
        for segment in transcript
    ]
    return "\n".join(lines)[-MAX_TRANSCRIPT_CHARS:]


def tool_parameters(schema: Mapping[str, Any] | None, criteria: str | None) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    if schema is not None:
        properties["data"] = dict(schema)
        required.append("data")
    if criteria:
        properties["success"] = {"type": "boolean", "description": "Were the criteria met?"}
        properties["reason"] = {"type": "string", "description": "Why, in one sentence"}
        required += ["success", "reason"]
    return {"type": "object", "properties": properties, "required": required}


def schema_errors(schema: Mapping[str, Any], data: Any) -> list[str]:
    """What makes `data` invalid against `schema` (empty: valid), most relevant first."""
    validator = Draft202012Validator(schema)
    found = sorted(validator.iter_errors(data), key=lambda error: list(error.path))
    messages = []
    for error in found[:5]:
        where = "/".join(str(part) for part in error.path)
        messages.append(f"{where}: {error.message}" if where else error.message)
    return messages


def _bounded(data: Any) -> dict[str, Any] | None:
    if not isinstance(data, dict):
        return None
    return data if len(orjson.dumps(data)) <= MAX_DATA_BYTES else None


async def analyze_with_model(
    model: LanguageModel,
    transcript: Sequence[Mapping[str, Any]],
    schema: Mapping[str, Any] | None,
    criteria: str | None,
    *,
    deadline_seconds: float,
    max_retries: int,
    backoff_seconds: float,
) -> AnalysisResult:
    """The model's analysis through one function call; retries what may pass (429, 5xx,
    timeouts) within the deadline, then reports the failure in the result."""
    request = CompletionRequest(
        system=ANALYSIS_PROMPT.format(
            tool=ANALYSIS_TOOL,
            criteria=CRITERIA_PROMPT.format(criteria=criteria) if criteria else "",
        ),
        messages=[Message.user(transcript_text(transcript))],
        tools=[
            ToolSpec(
                ANALYSIS_TOOL,
                "Record what the call established and whether it met the success criteria.",
                tool_parameters(schema, criteria),
                "builtin",
            )
        ],
        temperature=0.0,
        max_output_tokens=ANALYSIS_MAX_OUTPUT_TOKENS,
        stream=False,
    )
    name = model.model
    failure: ProviderFailure | None = None
    try:
        async with asyncio.timeout(deadline_seconds):
            for attempt in range(max_retries + 1):
                try:
                    completion = await model.complete(request, None)
                    break
                except ProviderFailure as exc:
                    failure = exc
                    if not exc.retryable or attempt == max_retries:
                        raise
                    await asyncio.sleep(
                        exc.retry_after if exc.retry_after is not None else backoff_seconds
                    )
    except ProviderFailure as exc:
        code = "llm_unavailable" if exc.retryable else "llm_rejected"
        return AnalysisResult(None, None, None, "llm", name, error=AnalysisError(code, exc.message))
    except TimeoutError:
        message = failure.message if failure is not None else "the model did not answer in time"
        return AnalysisResult(
            None, None, None, "llm", name, error=AnalysisError("llm_unavailable", message)
        )
    arguments = next(
        (call.arguments for call in completion.tool_calls if call.name == ANALYSIS_TOOL), None
    )
    if arguments is None:
        arguments = _json_in_text(completion.text)
    if arguments is None:
        return AnalysisResult(
            None,
            None,
            None,
            "llm",
            name,
            error=AnalysisError("invalid_output", f"the model did not call {ANALYSIS_TOOL}"),
            usage=completion.usage,
        )
    data = _bounded(arguments.get("data")) if schema is not None else None
    success = arguments.get("success") if criteria else None
    reason = arguments.get("reason") if criteria else None
    result = AnalysisResult(
        data,
        success if isinstance(success, bool) else None,
        str(reason)[:2000] if isinstance(reason, str) and reason.strip() else None,
        "llm",
        name,
        usage=completion.usage,
    )
    if schema is not None:
        problems = schema_errors(schema, arguments.get("data"))
        if problems:
            result.error = AnalysisError(
                "invalid_output", "the model's data does not match analysis_schema: " + problems[0]
            )
    if criteria and result.success is None and result.error is None:
        result.error = AnalysisError("invalid_output", "the model gave no success verdict")
    return result


def _json_in_text(text: str) -> dict[str, Any] | None:
    """A model that answered in words may still have written the arguments as JSON."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        parsed = orjson.loads(text[start : end + 1])
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


# The offline extractor

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
_PHONE = re.compile(r"\+?\d[\d\s().-]{6,}\d")
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2})?(?:Z|[+-]\d{2}:\d{2})?")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_NAME = re.compile(
    r"\b(?:my name is|my name's|this is|i am|i'm)\s+([A-Z][\w'-]+(?:\s+[A-Z][\w'-]+)?)"
)
_NEGATION = re.compile(r"\b(no|not|don't|do not|never|nope|won't|isn't|wasn't|didn't)\b", re.I)
_IGNORED_WORDS = frozenset({"is", "the", "a", "an", "of", "to", "has", "wants", "customer"})


def _kind(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((item for item in kind if item != "null"), None)
    return kind if isinstance(kind, str) else None


def _field_words(name: str) -> list[str]:
    words = re.split(r"[_\-\s]+|(?<=[a-z])(?=[A-Z])", name)
    return [w.lower() for w in words if len(w) >= 3 and w.lower() not in _IGNORED_WORDS]


def _mentions(line: str, words: Sequence[str]) -> bool:
    lowered = line.lower()
    return any(word in lowered for word in words)


def _extract_field(
    name: str, schema: Mapping[str, Any], caller: Sequence[str], everything: Sequence[str]
) -> Any:
    kind = _kind(schema)
    words = _field_words(name)
    fmt = schema.get("format")
    enum = schema.get("enum")
    if isinstance(enum, list):
        for lines in (caller, everything):
            for line in lines:
                for value in enum:
                    if (
                        isinstance(value, str | int | float)
                        and not isinstance(value, bool)
                        and re.search(rf"\b{re.escape(str(value))}\b", line, re.I)
                    ):
                        return value
        return None
    if kind == "string":
        if fmt == "email" or "email" in words:
            return _first(_EMAIL, caller)
        if fmt == "date-time":
            return _first(_DATE_TIME, caller)
        if fmt == "date" or "date" in words:
            return _first(_DATE, caller)
        if "phone" in words or "number" in words:
            found = _first(_PHONE, caller)
            return None if found is None else re.sub(r"[^\d+]", "", found)
        if "name" in words:
            for line in caller:
                match = _NAME.search(line)
                if match:
                    return match.group(1)
        return None
    if kind in ("integer", "number"):
        for line in caller:
            if words and _mentions(line, words):
                match = _NUMBER.search(line)
                if match:
                    value = float(match.group(0))
                    return int(value) if kind == "integer" and value.is_integer() else value
        return None
    if kind == "boolean":
        for line in caller:
            if words and _mentions(line, words):
                return _NEGATION.search(line) is None
        return None
    return None


def _first(pattern: re.Pattern[str], lines: Sequence[str]) -> str | None:
    for line in lines:
        match = pattern.search(line)
        if match:
            return match.group(0)
    return None


def offline_extract(
    schema: Mapping[str, Any], transcript: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Any], list[str]]:
    """The fields of `schema`'s top-level properties the transcript states, each valid
    against its own schema, and the names of those it found nothing for."""
    caller = [str(s.get("text", "")) for s in transcript if s.get("speaker") == "caller"]
    everything = [str(s.get("text", "")) for s in transcript]
    data: dict[str, Any] = {}
    unfilled: list[str] = []
    for name, subschema in (schema.get("properties") or {}).items():
        value = (
            _extract_field(name, subschema, caller, everything)
            if isinstance(subschema, Mapping)
            else None
        )
        if value is not None and isinstance(subschema, Mapping) and schema_errors(subschema, value):
            value = None
        if value is None:
            unfilled.append(name)
        else:
            data[name] = value
    return data, unfilled


def analyze_offline(
    transcript: Sequence[Mapping[str, Any]],
    schema: Mapping[str, Any] | None,
    criteria: str | None,
) -> AnalysisResult:
    data, unfilled = offline_extract(schema, transcript) if schema is not None else (None, [])
    result = AnalysisResult(
        data,
        None,
        OFFLINE_VERDICT if criteria else None,
        "offline",
        None,
        unfilled=unfilled,
    )
    if schema is not None:
        problems = schema_errors(schema, data)
        if problems:
            result.error = AnalysisError(
                "incomplete",
                "the offline extractor could not fill analysis_schema from the transcript: "
                + problems[0],
            )
    return result
