"""Agent test inputs (REST and GraphQL), the evaluation of expectations, and the public shape
of a run, declared once (app/kit/shape.py).

A test is user turns played in order, tool results mocked by tool name (a mocked tool never
runs: no HTTP call, no MCP server, no calendar), and expectations checked on what the agent
did. docs/api.md, "Agent tests", has the full rules.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

import strawberry
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
from strawberry.scalars import JSON

from app.agent_tests import models
from app.agents.config import ToolName
from app.core.jsonutil import dumps
from app.kit.shape import SAME, Rest, Shape, column, computed
from app.kit.validation import NOT_BLANK_PATTERN

RunStatus = Literal["queued", "running", "passed", "failed", "error"]
QUEUED, RUNNING, PASSED, FAILED, ERROR = "queued", "running", "passed", "failed", "error"
FINISHED = (PASSED, FAILED, ERROR)
MAX_TURNS = 20
MAX_EXPECTATIONS = 50
MAX_MOCKS = 50
MAX_MOCK_BYTES = 16 * 1024

UserTurn = Annotated[
    str, StringConstraints(min_length=1, max_length=2000, pattern=NOT_BLANK_PATTERN)
]
Needle = Annotated[str, StringConstraints(min_length=1, max_length=500, pattern=NOT_BLANK_PATTERN)]


class _Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCalledExpectation(_Expectation):
    type: Literal["tool_called"]
    tool: ToolName
    arguments: dict[str, Any] | None = Field(
        default=None, description="Each key must be an argument of one call, with this value"
    )


class ReplyExpectation(_Expectation):
    type: Literal["reply_contains", "reply_not_contains"]
    text: Needle = Field(description="Compared without regard to case")
    turn: int | None = Field(
        default=None, ge=1, le=MAX_TURNS, description="1-based user turn; null: any reply"
    )


class HandoffExpectation(_Expectation):
    type: Literal["handoff"]
    reason: Needle | None = Field(default=None, description="Part of the handoff's reason")


class EndExpectation(_Expectation):
    type: Literal["end"]


Expectation = Annotated[
    ToolCalledExpectation | ReplyExpectation | HandoffExpectation | EndExpectation,
    Field(discriminator="type"),
]


class AgentTestCreate(BaseModel):
    """POST /api/v1/agents/{agent_id}/tests."""

    model_config = ConfigDict(extra="ignore")

    name: Annotated[str, StringConstraints(max_length=255)] | None = None
    turns: list[UserTurn] = Field(min_length=1, max_length=MAX_TURNS)
    tool_mocks: dict[str, Any] = Field(
        default_factory=dict,
        max_length=MAX_MOCKS,
        description="Tool name → its result (text or JSON), instead of running the tool",
    )
    expectations: list[Expectation] = Field(min_length=1, max_length=MAX_EXPECTATIONS)

    @field_validator("tool_mocks")
    @classmethod
    def _small_mocks(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name, result in value.items():
            if len(dumps(result)) > MAX_MOCK_BYTES:
                raise ValueError(f"the mock of {name} is over {MAX_MOCK_BYTES} bytes")
        return value

    def spec(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"name"})


@strawberry.type(description="A usage report: tokens in and out.")
class TokenUsage:
    input_tokens: int
    output_tokens: int


def _spec_part(name: str, empty: Any) -> Callable[[Any], Any]:
    """A part of the stored request (`spec`: turns, tool_mocks, expectations), read from the
    row (`root`: GraphQL calls it as a resolver; no return annotation, so the field's own
    gives its type)."""

    def part(root):  # type: ignore[no-untyped-def]
        return (root.spec or {}).get(name, empty)

    return part


_turns_of = _spec_part("turns", [])
_tool_mocks_of = _spec_part("tool_mocks", {})
_expectations_of = _spec_part("expectations", [])


def _usage_of(run: Any) -> dict[str, int]:
    return {"input_tokens": run.input_tokens, "output_tokens": run.output_tokens}


def _as_usage(usage: dict[str, int]) -> TokenUsage:
    return TokenUsage(**usage)


def _or_empty(values: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return values or []


def _amount(cost: float | None) -> float:
    return float(cost or 0.0)


def _text(moment: datetime) -> str:
    """A timestamp as GraphQL shows a run's: ISO 8601 text, UTC written `Z`."""
    return moment.isoformat().replace("+00:00", "Z")


def _optional_text(moment: datetime | None) -> str | None:
    return None if moment is None else _text(moment)


def _object(_run: Any) -> str:
    return "agent_test_run"


@strawberry.type(
    description="A scripted conversation played against an agent in test mode, and its verdict."
)
class AgentTestRun:
    """The public shape of a run, declared once (app/kit/shape.py)."""

    id: strawberry.ID = column(models.AgentTestRun.id, as_type=strawberry.ID)
    agent_id: str = column(models.AgentTestRun.agent_id)
    name: str | None = column(models.AgentTestRun.name)
    status: str = column(
        models.AgentTestRun.status,
        description="queued, running, passed, failed or error",
        rest=Rest(annotation=RunStatus),
    )
    livemode: bool = column(models.AgentTestRun.livemode)
    turns: list[str] = computed(_turns_of, sources=(models.AgentTestRun.spec,), rest=Rest())
    tool_mocks: JSON = computed(
        _tool_mocks_of,
        graphql_convert=JSON,
        sources=(models.AgentTestRun.spec,),
        rest=Rest(annotation=dict[str, Any]),
    )
    expectations: JSON = computed(
        _expectations_of,
        graphql_convert=JSON,
        sources=(models.AgentTestRun.spec,),
        rest=Rest(annotation=list[dict[str, Any]]),
    )
    results: JSON = column(
        models.AgentTestRun.results,
        as_type=JSON,
        description="Per expectation: index, type, passed, detail",
        rest=Rest(annotation=list[dict[str, Any]], description=SAME, convert=_or_empty),
    )
    transcript: JSON = column(
        models.AgentTestRun.transcript,
        as_type=JSON,
        description="role, text, tool_calls, action per entry",
        rest=Rest(
            annotation=list[dict[str, Any]],
            description="role (user | agent), text, tool_calls, action",
            convert=_or_empty,
        ),
    )
    error: JSON | None = column(
        models.AgentTestRun.error,
        as_type=JSON,
        description="code, message, provider, status",
        rest=Rest(
            annotation=dict[str, Any] | None,
            description="Why the run could not finish: code, message, provider, status",
        ),
    )
    provider: str | None = column(models.AgentTestRun.provider)
    model: str | None = column(models.AgentTestRun.model)
    usage: TokenUsage = computed(
        _usage_of,
        graphql_convert=_as_usage,
        sources=(models.AgentTestRun.input_tokens, models.AgentTestRun.output_tokens),
        rest=Rest(annotation=dict[str, int]),
    )
    cost: float = column(
        models.AgentTestRun.cost, graphql_convert=_amount, rest=Rest(convert=_amount)
    )
    # GraphQL shows a run's timestamps as text; REST as every timestamp.
    created_at: str = column(models.AgentTestRun.created_at, graphql_convert=_text)
    started_at: str | None = column(models.AgentTestRun.started_at, graphql_convert=_optional_text)
    finished_at: str | None = column(
        models.AgentTestRun.finished_at, graphql_convert=_optional_text
    )
    updated_at: str = column(models.AgentTestRun.updated_at, graphql_convert=_text)


RUN = Shape(
    AgentTestRun,
    rest_name="AgentTestRunResponse",
    rest_doc="The REST shape of a run.",
    rest_only=(("object", None, Rest(annotation=Literal["agent_test_run"], value=_object)),),
    rest_order=(
        "id",
        "object",
        "agent_id",
        "name",
        "status",
        "livemode",
        "turns",
        "tool_mocks",
        "expectations",
        "results",
        "transcript",
        "error",
        "provider",
        "model",
        "usage",
        "cost",
        "created_at",
        "started_at",
        "finished_at",
        "updated_at",
    ),
)
AgentTestRunResponse = RUN.rest_model  # documents OpenAPI (Operation.response_model)
run_to_public = RUN.to_public  # REST bodies


def evaluate(
    expectations: list[dict[str, Any]], transcript: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each expectation checked against the transcript of the run."""
    replies = [entry for entry in transcript if entry["role"] == "agent"]
    calls = [call for entry in replies for call in entry.get("tool_calls", [])]
    actions = [entry["action"] for entry in replies if entry.get("action")]
    results = []
    for index, expectation in enumerate(expectations):
        kind = expectation["type"]
        if kind == "tool_called":
            wanted = expectation.get("arguments") or {}
            matching = [
                call
                for call in calls
                if call["name"] == expectation["tool"]
                and all(call["arguments"].get(key) == value for key, value in wanted.items())
            ]
            passed = bool(matching)
            detail = (
                f"{expectation['tool']} was called"
                if passed
                else f"{expectation['tool']} was not called"
                + (" with those arguments" if wanted else "")
                + f"; calls made: {', '.join(c['name'] for c in calls) or 'none'}"
            )
        elif kind in ("reply_contains", "reply_not_contains"):
            turn = expectation.get("turn")
            texts = [
                entry["text"] or ""
                for entry in replies
                if turn is None or entry.get("turn") == turn
            ]
            needle = expectation["text"].lower()
            found = any(needle in text.lower() for text in texts)
            passed = found if kind == "reply_contains" else not found
            where = f"turn {turn}'s reply" if turn is not None else "a reply"
            detail = f"'{expectation['text']}' {'found in' if found else 'not found in'} {where}"
        elif kind == "handoff":
            reason = (expectation.get("reason") or "").lower()
            handoffs = [a for a in actions if a["kind"] == "handoff"]
            passed = any(reason in a["reason"].lower() for a in handoffs)
            detail = (
                f"handed off ({handoffs[0]['reason']})"
                if handoffs
                else "the agent did not hand off"
            )
        else:
            passed = any(a["kind"] == "end" for a in actions)
            detail = (
                "the agent ended the conversation" if passed else "the conversation did not end"
            )
        results.append({"index": index, "type": kind, "passed": passed, "detail": detail})
    return results
