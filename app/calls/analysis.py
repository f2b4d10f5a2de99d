"""Call analysis: after a call ends (and on request), the agent's `analysis_schema` and
`success_criteria` are applied to its transcript by the conversation engine
(app/engine/analysis.py), and the result is stored on the call log as `analysis`.

The work is a job (`calls.analyze`): a request marks the analysis `pending` with its
`requested_at` in the caller's transaction and schedules the job there; the job writes the
result only while that request is still the latest (a second request meanwhile wins).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.agents.models import Agent
from app.calls.models import CallLog
from app.calls.repository import CallLogRepository
from app.core.clock import utcnow
from app.engine.analysis import AnalysisResult
from app.kit import outbox
from app.kit.errors import InvalidState

ANALYZE_ACTOR = "calls.analyze"
CALLS_QUEUE = "calls"
PENDING, COMPLETED, FAILED = "pending", "completed", "failed"


def _stamp() -> str:
    return utcnow().isoformat().replace("+00:00", "Z")


def wants_analysis(config: dict[str, Any] | None) -> bool:
    return bool(config and (config.get("analysis_schema") or config.get("success_criteria")))


async def _agent_of(session: AsyncSession, call_log: CallLog) -> Agent | None:
    if call_log.agent_id is None:
        return None
    agent = await session.get(Agent, call_log.agent_id)
    if agent is None or agent.organization_id != call_log.organization_id:
        return None
    return agent


def _queue(session: AsyncSession, call_log: CallLog) -> None:
    requested_at = _stamp()
    previous = call_log.analysis or {}
    call_log.analysis = {
        **_empty(),
        # The last result stays readable while the new one is worked out.
        **{k: v for k, v in previous.items() if k in RESULT_FIELDS},
        "status": PENDING,
        "requested_at": requested_at,
    }
    outbox.schedule(session, ANALYZE_ACTOR, call_log.id, requested_at, queue=CALLS_QUEUE)


RESULT_FIELDS = frozenset(
    {"data", "success", "criteria", "reason", "extractor", "model", "unfilled", "analyzed_at"}
)


def _empty() -> dict[str, Any]:
    return {
        "status": PENDING,
        "data": None,
        "success": None,
        "criteria": None,
        "reason": None,
        "extractor": None,
        "model": None,
        "unfilled": [],
        "error": None,
        "requested_at": None,
        "analyzed_at": None,
    }


async def analyze_after_call(session: AsyncSession, call_log: CallLog) -> None:
    """Queue the analysis of a call that just ended, when it has a transcript and its agent
    asks for one (the caller's transaction carries the job)."""
    if not call_log.transcript:
        return
    agent = await _agent_of(session, call_log)
    if agent is not None and wants_analysis(agent.config):
        _queue(session, call_log)


async def request_analysis(session: AsyncSession, subject: Subject, call_log_id: str) -> CallLog:
    """Run the analysis of a past call again (POST /call-logs/{id}/analyze). A request while
    one is pending answers that one; the call must have ended, have a transcript, and its
    agent must still define analysis_schema or success_criteria."""
    call_log = await CallLogRepository(session, subject).get_or_404(call_log_id)
    if call_log.status == "in-progress":
        raise InvalidState("The call is still in progress; it is analyzed once it ends")
    if (call_log.analysis or {}).get("status") == PENDING:
        return call_log
    if not call_log.transcript:
        raise InvalidState("The call has no transcript to analyze")
    agent = await _agent_of(session, call_log)
    if agent is None:
        raise InvalidState("The call's agent no longer exists")
    if not wants_analysis(agent.config):
        raise InvalidState("The call's agent defines no analysis_schema or success_criteria")
    _queue(session, call_log)
    await session.flush()
    return call_log


def analysis_of(result: AnalysisResult, criteria: str | None, requested_at: str) -> dict[str, Any]:
    """The stored `analysis` of one finished run."""
    return {
        "status": FAILED if result.error is not None else COMPLETED,
        "data": result.data,
        "success": result.success,
        "criteria": criteria,
        "reason": result.reason,
        "extractor": result.extractor,
        "model": result.model,
        "unfilled": result.unfilled,
        "error": None if result.error is None else result.error.public(),
        "requested_at": requested_at,
        "analyzed_at": _stamp(),
    }


def failed_analysis(code: str, message: str, requested_at: str) -> dict[str, Any]:
    return {
        **_empty(),
        "status": FAILED,
        "error": {"code": code, "message": message},
        "requested_at": requested_at,
        "analyzed_at": _stamp(),
    }
