"""The tools of one turn: their function specs in the order the model sees them (built-ins,
booking, custom, MCP; a name taken earlier is not offered twice) and how each is run.

Every call is timed and recorded (`ToolRecord`, what `ai.tool.executed` reports). A tool named
in the agent test's `tool_mocks` answers with the mocked result instead of running.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from app.engine.tools.http import answer_text
from app.engine.types import ToolCall, ToolOutcome, ToolRecord, ToolSpec

Runner = Callable[[dict[str, Any]], Awaitable[ToolOutcome]]
EXCERPT_LENGTH = 500


def mocked_outcome(value: Any, limit: int) -> ToolOutcome:
    """A mocked result read as a custom tool's answer is (its `answer` field, say)."""
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    answer = answer_text(text.encode())
    return ToolOutcome(
        success=True,
        content=text[:limit],
        excerpt=answer,
        data={"success": True, "answer": answer},
    )


class Toolbox:
    def __init__(self, result_chars: int, mocks: Mapping[str, Any] | None = None) -> None:
        self._specs: dict[str, ToolSpec] = {}
        self._runners: dict[str, Runner | None] = {}
        self._mocks = dict(mocks or {})
        self._result_chars = result_chars
        # Tools left out of this turn and why (a server down, a name taken twice).
        self.unavailable: list[dict[str, str]] = []

    def add(self, spec: ToolSpec, runner: Runner | None) -> None:
        """Offer `spec`, run by `runner`; None: a tool only its mock answers (agent tests)."""
        if spec.name in self._specs:
            self.unavailable.append({"tool": spec.name, "reason": "name already taken"})
            return
        self._specs[spec.name] = spec
        self._runners[spec.name] = runner

    @property
    def specs(self) -> list[ToolSpec]:
        return list(self._specs.values())

    async def run(self, call: ToolCall) -> tuple[ToolOutcome, ToolRecord]:
        spec = self._specs.get(call.name)
        started = time.perf_counter()
        if spec is None:
            outcome = ToolOutcome(
                success=False, content=f"No tool is called {call.name}.", error="unknown tool"
            )
        elif call.name in self._mocks:
            outcome = mocked_outcome(self._mocks[call.name], self._result_chars)
        else:
            runner = self._runners[call.name]
            outcome = (
                await runner(call.arguments)
                if runner is not None
                else ToolOutcome(
                    success=False, content="The tool is unavailable.", error="unavailable"
                )
            )
        record = ToolRecord(
            name=call.name,
            kind=spec.kind if spec is not None else "custom",
            arguments=call.arguments,
            success=outcome.success,
            duration_ms=round((time.perf_counter() - started) * 1000),
            result=(outcome.excerpt or outcome.content[:EXCERPT_LENGTH])
            if outcome.success
            else None,
            error=outcome.error,
            status_code=outcome.status_code,
        )
        return outcome, record
