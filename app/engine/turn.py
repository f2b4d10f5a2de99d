"""The turn loop: the model answers the conversation, calling tools until it answers in words.

One turn = model rounds and tool calls, bounded by `engine_max_tool_rounds` (after the last
round the model is asked again without tools, so it must answer) and by the per-turn deadline.
Model requests are retried with backoff on 429, 5xx, timeouts and broken connections, never
once the reply's first words have been handed to the channel. When the model still fails (or
refuses the request: a bad key), the turn has no reply and hands off with `llm_unavailable`:
nothing invented is said.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.providers.base import (
    CompletionRequest,
    LanguageModel,
    ProviderFailure,
    TextSink,
)
from app.engine.providers.offline import CLOSING_REPLY, HANDOFF_REPLY
from app.engine.tools.builtins import CONTROL_TOOLS
from app.engine.tools.toolbox import Toolbox
from app.engine.types import (
    LLM_UNAVAILABLE,
    Action,
    Completion,
    EngineFailure,
    Message,
    ToolRecord,
    Usage,
)

AI_REPLY_GENERATED = "ai.reply.generated"
AI_TOOL_EXECUTED = "ai.tool.executed"
AGENT_HANDOFF = "agent.handoff"
MAX_BACKOFF_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class TurnLimits:
    deadline_seconds: float
    max_tool_rounds: int
    max_retries: int
    backoff_seconds: float
    max_output_tokens: int
    stream: bool


@dataclass
class TurnOutcome:
    reply: str | None
    action: Action | None
    records: list[ToolRecord]
    usage: Usage
    messages: list[Message]
    events: list[tuple[str, dict[str, Any]]]
    source: str
    detail: dict[str, Any]
    failure: EngineFailure | None


class _Sink:
    """Forwards streamed words and remembers that some were forwarded (no retry after)."""

    def __init__(self, target: TextSink | None) -> None:
        self.target = target
        self.started = False

    async def __call__(self, text: str) -> None:
        self.started = True
        if self.target is not None:
            await self.target(text)


async def complete_with_retries(
    model: LanguageModel, request: CompletionRequest, limits: TurnLimits, sink: _Sink
) -> Completion:
    attempt = 0
    while True:
        try:
            return await model.complete(request, sink if sink.target is not None else None)
        except ProviderFailure as failure:
            if not failure.retryable or attempt >= limits.max_retries or sink.started:
                raise
            delay = limits.backoff_seconds * (2**attempt) * random.uniform(0.8, 1.2)
            if failure.retry_after is not None:
                delay = max(delay, failure.retry_after)
            await asyncio.sleep(min(delay, MAX_BACKOFF_SECONDS))
            attempt += 1


def _reason(arguments: dict[str, Any], fallback: str) -> str:
    reason = arguments.get("reason")
    return str(reason)[:500] if isinstance(reason, str) and reason.strip() else fallback


async def run_turn(
    model: LanguageModel,
    toolbox: Toolbox,
    *,
    system: str,
    history: Sequence[Message],
    temperature: float,
    limits: TurnLimits,
    on_text: TextSink | None = None,
) -> TurnOutcome:
    records: list[ToolRecord] = []
    new: list[Message] = []
    events: list[tuple[str, dict[str, Any]]] = []
    usage = Usage()
    sink = _Sink(on_text)
    rounds = 0
    try:
        async with asyncio.timeout(limits.deadline_seconds):
            while True:
                offered = toolbox.specs if rounds < limits.max_tool_rounds else []
                request = CompletionRequest(
                    system=system,
                    messages=[*history, *new],
                    tools=offered,
                    temperature=temperature,
                    max_output_tokens=limits.max_output_tokens,
                    stream=limits.stream,
                )
                completion = await complete_with_retries(model, request, limits, sink)
                usage += completion.usage
                if not (completion.tool_calls and offered):
                    break
                rounds += 1
                new.append(Message("assistant", completion.text, tool_calls=completion.tool_calls))
                action: Action | None = None
                for call in completion.tool_calls:
                    outcome, record = await toolbox.run(call)
                    records.append(record)
                    events.append((AI_TOOL_EXECUTED, record.public()))
                    new.append(
                        Message(
                            "tool",
                            outcome.content,
                            tool_call_id=call.id,
                            name=call.name,
                            data=outcome.data
                            if outcome.data is not None
                            else {"success": outcome.success, "answer": outcome.excerpt},
                        )
                    )
                    kind = CONTROL_TOOLS.get(call.name)
                    if kind is not None and action is None:
                        action = Action(kind, _reason(call.arguments, call.name))
                if action is not None:  # a control tool ends the turn: no more rounds
                    default = HANDOFF_REPLY if action.kind == "handoff" else CLOSING_REPLY
                    completion = Completion(
                        text=completion.text.strip() or default,
                        usage=Usage(),
                        source="llm",
                        action=action,
                    )
                    break
    except ProviderFailure as failure:
        code = "llm_unavailable" if failure.retryable else "llm_rejected"
        return _failed(
            EngineFailure(code, failure.message, failure.provider, failure.status),
            records,
            usage,
            new,
            events,
        )
    except TimeoutError:
        return _failed(
            EngineFailure("llm_unavailable", "the turn's deadline passed", model.provider),
            records,
            usage,
            new,
            events,
        )
    reply = " ".join(completion.text.split())
    if not reply:
        return _failed(
            EngineFailure("llm_unavailable", "the model gave no answer", model.provider),
            records,
            usage,
            new,
            events,
        )
    new.append(Message.assistant(reply))
    return TurnOutcome(
        reply=reply,
        action=completion.action,
        records=records,
        usage=usage,
        messages=new,
        events=events,
        source=completion.source,
        detail=completion.detail,
        failure=None,
    )


def _failed(
    failure: EngineFailure,
    records: list[ToolRecord],
    usage: Usage,
    new: list[Message],
    events: list[tuple[str, dict[str, Any]]],
) -> TurnOutcome:
    return TurnOutcome(
        reply=None,
        action=Action("handoff", LLM_UNAVAILABLE),
        records=records,
        usage=usage,
        messages=new,
        events=events,
        source="none",
        detail={},
        failure=failure,
    )


def elapsed_ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)
