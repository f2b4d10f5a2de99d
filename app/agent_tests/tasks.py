"""The agent tests' job: play a run's turns through the conversation engine and judge them.

Idempotent: a run already finished is left alone; a run found `running` (its worker died) is
played again from the start. The engine's tool calls are real except the mocked ones; the
model is the agent's own when the organization has a key for it (or the agent an
`llm_base_url`), else the offline responder.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import structlog

from app.agent_tests.models import AgentTestRun
from app.agent_tests.schemas import ERROR, FAILED, FINISHED, PASSED, RUNNING, evaluate
from app.agent_tests.service import ENGINE_QUEUE, RUN_ACTOR
from app.agents.models import Agent
from app.core.clock import utcnow
from app.engine.engine import ConversationEngine, EngineClients
from app.engine.limits import ConversationLimitReached, ReplyLimitReached
from app.engine.types import AgentProfile, Message, Usage
from app.jobs import JobContext, Task

logger = structlog.get_logger("switchboard.agent_tests")

# A run that finds every conversation slot taken tries again this much later.
BUSY_RETRY = timedelta(seconds=5)


def _agent_entry(turn: int, result: Any) -> dict[str, Any]:
    return {
        "role": "agent",
        "turn": turn,
        "text": result.reply,
        "tool_calls": [
            {
                "name": record.name,
                "arguments": record.arguments,
                "success": record.success,
                "result": record.result,
                "error": record.error,
            }
            for record in result.tool_calls
        ],
        "action": (
            {"kind": result.action.kind, "reason": result.action.reason} if result.action else None
        ),
    }


async def _play(
    engine: ConversationEngine, agent: AgentProfile, spec: dict[str, Any]
) -> dict[str, Any]:
    transcript: list[dict[str, Any]] = []
    history: list[Message] = []
    usage = Usage()
    cost = 0.0
    provider = model = None
    error = None
    for turn, text in enumerate(spec["turns"], 1):
        transcript.append({"role": "user", "turn": turn, "text": text})
        history.append(Message.user(text))
        result = await engine.respond(agent, history, tool_mocks=spec.get("tool_mocks") or {})
        history.extend(result.messages)
        usage += result.usage
        cost += result.cost
        provider, model = result.provider, result.model
        transcript.append(_agent_entry(turn, result))
        if result.failure is not None:
            error = result.failure.public()
            break
        if result.action is not None:
            break
    return {
        "transcript": transcript,
        "usage": usage,
        "cost": cost,
        "provider": provider,
        "model": model,
        "error": error,
    }


async def run_agent_test(job: JobContext) -> datetime | None:
    (run_id,) = job.args
    resources = job.runtime.resources
    async with resources.session(writes=True) as session:
        run = await session.get(AgentTestRun, run_id)
        if run is None or run.status in FINISHED:
            return None
        agent = await session.get(Agent, run.agent_id)
        run.status = RUNNING
        run.started_at = run.started_at or utcnow()
        run.updated_at = utcnow()
        profile = AgentProfile.of(agent, livemode=run.livemode) if agent is not None else None
        spec = dict(run.spec)
        await session.commit()
    engine = ConversationEngine(resources, job.runtime.shared(EngineClients))
    played: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    if profile is None:
        error = {
            "code": "agent_not_found",
            "message": "The agent was deleted",
            "provider": None,
            "status": None,
        }
    else:
        try:
            async with engine.conversation(profile, f"test:{run_id}"):
                played = await _play(engine, profile, spec)
        except ConversationLimitReached:
            return utcnow() + BUSY_RETRY
        except ReplyLimitReached as exc:
            error = {
                "code": "rate_limited",
                "message": exc.message,
                "provider": None,
                "status": None,
            }
    async with resources.session(writes=True) as session:
        run = await session.get(AgentTestRun, run_id)
        if run is not None:
            if played is not None:
                run.transcript = played["transcript"]
                run.results = evaluate(spec["expectations"], played["transcript"])
                run.input_tokens = played["usage"].input_tokens
                run.output_tokens = played["usage"].output_tokens
                run.cost = round(played["cost"], 8)
                run.provider = played["provider"]
                run.model = played["model"]
                error = played["error"]
            run.error = error
            if error is not None:
                run.status = ERROR
            else:
                run.status = PASSED if all(r["passed"] for r in run.results) else FAILED
            run.finished_at = run.updated_at = utcnow()
        await job.settle(session, None)
        await session.commit()
    return None


TASKS = (Task(RUN_ACTOR, ENGINE_QUEUE, run_agent_test),)
