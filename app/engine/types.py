"""What the conversation engine takes and gives back, independent of any channel or provider.

A channel (a test-mode call, an agent test, WhatsApp, a live call) hands the engine an
`AgentProfile` and the conversation so far as `Message`s; it gets a `TurnResult`: the reply to
say or send, the tool calls made, and a control `Action` (hand off to a person, end the
conversation). Providers translate `Message`s to their wire format and back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["user", "assistant", "tool"]
ActionKind = Literal["handoff", "end"]
ToolKind = Literal["builtin", "custom", "mcp", "booking"]

# The reason of the handoff the engine makes when the model cannot be reached.
LLM_UNAVAILABLE = "llm_unavailable"


@dataclass(frozen=True, slots=True)
class AgentProfile:
    """The agent as the engine needs it: its stored, normalized `agent_config` and who owns it.
    `version` changes whenever the agent does (its `updated_at`): caches key on it."""

    agent_id: str
    organization_id: str
    livemode: bool
    name: str
    timezone: str
    config: dict[str, Any]
    version: str

    @classmethod
    def of(cls, agent: Any, *, livemode: bool) -> AgentProfile:
        """From an agent row or entity (app/agents/models.py)."""
        return cls(
            agent_id=agent.id,
            organization_id=agent.organization_id,
            livemode=livemode,
            name=agent.name,
            timezone=agent.timezone,
            config=agent.config or {},
            version=agent.updated_at.isoformat() if agent.updated_at else "",
        )


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a conversation. `assistant` messages may carry tool calls; `tool`
    messages answer one of them (`tool_call_id`). `data` is the structured side of a tool
    answer, read by the offline responder and never sent to a model."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    data: Any = None

    @classmethod
    def user(cls, text: str) -> Message:
        return cls("user", text)

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls("assistant", text)


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )

    def public(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}


@dataclass(frozen=True, slots=True)
class Action:
    """A decision that ends the agent's part: `handoff` to a person, or `end` the talk."""

    kind: ActionKind
    reason: str


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call: its JSON-schema `parameters` are the function's."""

    name: str
    description: str
    parameters: dict[str, Any]
    kind: ToolKind


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A tool's answer. `content` goes to the model (size-limited, untrusted text); `excerpt`
    is the short form events carry and the offline responder says."""

    success: bool
    content: str
    excerpt: str = ""
    data: Any = None
    status_code: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """One model response: words, tool calls, or both. The offline responder also names where
    its words came from (`source`, `detail`) and may decide an `action` without a tool."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    source: str = "llm"
    detail: dict[str, Any] = field(default_factory=dict)
    action: Action | None = None


@dataclass(frozen=True, slots=True)
class ToolRecord:
    """A tool call made during a turn, as `ai.tool.executed` reports it."""

    name: str
    kind: ToolKind
    arguments: dict[str, Any]
    success: bool
    duration_ms: int
    result: str | None
    error: str | None
    status_code: int | None

    def public(self) -> dict[str, Any]:
        return {
            "tool": self.name,
            "name": self.name,
            "kind": self.kind,
            "arguments": self.arguments,
            "success": self.success,
            "duration_ms": self.duration_ms,
            "status_code": self.status_code,
            "result": self.result,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class EngineFailure:
    """Why a turn has no reply: the model failed after its retries (`llm_unavailable`) or
    refused the request (`llm_rejected`, e.g. a bad key: `status` 401)."""

    code: str
    message: str
    provider: str
    status: int | None = None

    def public(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "provider": self.provider,
            "status": self.status,
        }


@dataclass
class TurnResult:
    """The agent's answer to the conversation so far.

    `reply` is what to say (None when nothing may be said: the model failed, and then
    `action` is a handoff with reason `llm_unavailable`); `messages` are the turn's own
    messages (assistant tool calls, tool answers, the reply) for the channel to keep;
    `events` are the `(type, data)` pairs to emit, in order, once the channel has added its
    own ids (call, ticket) to each `data`.
    """

    reply: str | None
    action: Action | None
    tool_calls: list[ToolRecord]
    usage: Usage
    cost: float
    provider: str
    model: str | None
    source: str
    latency_ms: int
    messages: list[Message]
    events: list[tuple[str, dict[str, Any]]]
    detail: dict[str, Any] = field(default_factory=dict)
    failure: EngineFailure | None = None
