"""Agent test inputs (REST and GraphQL), the evaluation of expectations, and the public shape.

A test is user turns played in order, tool results mocked by tool name (a mocked tool never
runs: no HTTP call, no MCP server, no calendar), and expectations checked on what the agent
did. docs/api.md, "Agent tests", has the full rules.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from app.agents.config import ToolName
from app.core.jsonutil import dumps
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


class AgentTestRunResponse(BaseModel):
    """The REST shape of a run."""

    id: str
    object: Literal["agent_test_run"]
    agent_id: str
    name: str | None
    status: RunStatus
    livemode: bool
    turns: list[str]
    tool_mocks: dict[str, Any]
    expectations: list[dict[str, Any]]
    results: list[dict[str, Any]] = Field(
        description="Per expectation: index, type, passed, detail"
    )
    transcript: list[dict[str, Any]] = Field(
        description="role (user | agent), text, tool_calls, action"
    )
    error: dict[str, Any] | None = Field(
        description="Why the run could not finish: code, message, provider, status"
    )
    provider: str | None
    model: str | None
    usage: dict[str, int]
    cost: float
    created_at: str
    started_at: str | None
    finished_at: str | None
    updated_at: str


def run_to_public(run: Any) -> dict[str, Any]:
    spec = run.spec or {}
    return {
        "id": run.id,
        "object": "agent_test_run",
        "agent_id": run.agent_id,
        "name": run.name,
        "status": run.status,
        "livemode": run.livemode,
        "turns": spec.get("turns", []),
        "tool_mocks": spec.get("tool_mocks", {}),
        "expectations": spec.get("expectations", []),
        "results": run.results or [],
        "transcript": run.transcript or [],
        "error": run.error,
        "provider": run.provider,
        "model": run.model,
        "usage": {"input_tokens": run.input_tokens, "output_tokens": run.output_tokens},
        "cost": float(run.cost or 0.0),
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "updated_at": run.updated_at,
    }


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
