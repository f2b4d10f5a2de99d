"""The webhooks domain's jobs: the fan-out of each event (to its deliveries and to the live
stream) and one delivery attempt of one (event, subscription).

Attempts run detached on the worker's event loop (they hold no worker thread while the
receiver answers) and pass the process's `EndpointGate` first: an endpoint at its cap or with
an open circuit has the delivery deferred in the outbox, without an attempt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import Counter, Histogram
from sqlalchemy.ext.asyncio import AsyncSession

from app.config import Settings
from app.core.clock import utcnow
from app.core.jsonutil import dumps
from app.db.runner import SessionRunner, StatementRunner
from app.events.service import EVENTS_QUEUE, FAN_OUT_ACTOR, event_body, take_collected
from app.jobs import JobContext, JobRuntime, Task
from app.kit import outbox
from app.resources import Resources
from app.webhooks import delivery
from app.webhooks.sender import AttemptOutcome, EndpointGate, WebhookSender

WEBHOOK_DELIVERIES = Counter(
    "switchboard_webhook_delivery_attempts_total",
    "Webhook delivery attempts by outcome",
    ["outcome"],  # success | http_error | network_error | refused
)
WEBHOOK_LATENCY = Histogram(
    "switchboard_webhook_delivery_seconds",
    "Duration of one webhook delivery attempt",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
WEBHOOK_DEFERRED = Counter(
    "switchboard_webhook_deliveries_deferred_total",
    "Delivery runs deferred without an attempt (endpoint at its cap, or its circuit open)",
)


def open_sender(settings: Settings) -> WebhookSender:
    return WebhookSender(
        allow_private=settings.allow_private_webhook_urls,
        timeout_seconds=settings.webhook_timeout_seconds,
    )


def open_gate(settings: Settings) -> EndpointGate:
    return EndpointGate(
        concurrency=settings.webhook_endpoint_concurrency,
        failures_to_open=settings.webhook_breaker_failures,
        open_seconds=settings.webhook_breaker_seconds,
        # A slot frees within one attempt's timeout.
        busy_defer_seconds=settings.webhook_timeout_seconds,
    )


async def deliver_webhook(job: JobContext) -> datetime | None:
    (delivery_id,) = job.args
    runtime = job.runtime
    async with runtime.statements(transaction=False) as runner:
        target = await delivery.load_target(runner, delivery_id)
    if target is None:
        return None
    if not target.active:
        async with runtime.resources.session(writes=True) as session:
            await delivery.close_inactive(session, target)
            await job.settle(session, None)
            await session.commit()
        return None
    gate = runtime.shared(open_gate)
    wait = await gate.admit(target.subscription_id)
    if wait is not None:
        WEBHOOK_DEFERRED.inc()
        return utcnow() + timedelta(seconds=wait)  # a clean reschedule: no attempt counted
    outcome: AttemptOutcome | None = None
    try:
        outcome = await delivery.send_attempt(runtime.shared(open_sender), target)
    finally:
        gate.release(target.subscription_id, outcome is not None and outcome.success)
    WEBHOOK_DELIVERIES.labels(_outcome_label(outcome)).inc()
    WEBHOOK_LATENCY.observe(outcome.duration_ms / 1000)
    if outcome.success:
        # One statement on the driver; one session transaction elsewhere: atomic either way.
        async with runtime.statements(transaction=False) as runner:
            await delivery.record_success_and_finish(runner, target, outcome, job.job_id, job.token)
            job.settled = True
        return None
    async with runtime.resources.session(writes=True) as session:
        again = await delivery.record_failure(
            session, target, outcome, retry_scale=runtime.settings.webhook_retry_scale
        )
        await job.settle(session, again)
        await session.commit()
    return again


def _outcome_label(outcome: AttemptOutcome) -> str:
    if outcome.success:
        return "success"
    if outcome.status_code is not None:
        return "http_error"
    if outcome.error and outcome.error.startswith("refused"):
        return "refused"
    return "network_error"


async def fan_out_event(job: JobContext) -> datetime | None:
    """Fan out the job's events: those of one organization, emitted in one transaction."""
    event_ids = [str(event_id) for event_id in job.args]
    if not event_ids:
        raise ValueError("a fan-out job names at least one event")
    runtime = job.runtime
    async with runtime.statements() as runner:
        fanned = await _fan_out_by_id(runner, event_ids)
        await job.settle(runner, None)
    await announce(runtime, fanned)
    return None


@dataclass(frozen=True, slots=True)
class FannedOut:
    """A transaction's fan-out: the delivery jobs to start once it commits, and the events
    to stream."""

    refs: list[outbox.JobRef] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)


async def _fan_out_by_id(runner: StatementRunner, event_ids: list[str]) -> FannedOut:
    """The events read back by id (one missing, e.g. a savepoint undid it, is skipped) and
    fanned out in the runner's transaction."""
    if len(event_ids) > 1 and runner.dialect_name == "postgresql":
        events = await delivery.load_events(runner, event_ids)
    else:
        events = [
            event
            for event_id in event_ids
            if (event := await delivery.load_event(runner, event_id)) is not None
        ]
    return await fan_out_now(runner, events)


async def fan_out_collected(session: AsyncSession) -> FannedOut:
    """Fan out, in the session's transaction, the events written since `fan_out_here` (what
    their fan-out job would have done). Pass the result to `announce` or `announce_relayed`
    once the transaction commits."""
    event_ids = take_collected(session)
    if not event_ids:
        return FannedOut()
    return await _fan_out_by_id(SessionRunner(session), event_ids)


async def fan_out_now(runner: StatementRunner, events: Sequence[Any]) -> FannedOut:
    """Fan out events in the runner's transaction (their deliveries and delivery jobs): what
    the fan-out job does, for a job that wrote the events itself and saves running another
    (app/ai_replies/tasks.py). Pass the result to `announce` once the transaction commits."""
    if not events:
        return FannedOut()
    return FannedOut(await delivery.fan_out_events(runner, list(events)), list(events))


async def announce(runtime: JobRuntime, fanned: FannedOut) -> None:
    """After a fan-out committed in a job: its deliveries started on this worker (or
    relayed), its events streamed."""
    runtime.hand_over(fanned.refs)
    await _stream(runtime.resources, fanned.events)


async def announce_relayed(resources: Resources, fanned: FannedOut) -> None:
    """After a fan-out committed outside a job (an API request): its deliveries relayed to
    the workers, its events streamed."""
    outbox.relay(fanned.refs)
    await _stream(resources, fanned.events)


async def _stream(resources: Resources, events: Sequence[Any]) -> None:
    if events:
        await resources.event_stream.publish_many(
            [(event.organization_id, dumps(event_body(event))) for event in events]
        )


# Fan-out first: a worker never lets it wait behind deliveries it already holds.
TASKS = (
    Task(FAN_OUT_ACTOR, EVENTS_QUEUE, fan_out_event, priority=0),
    Task(
        delivery.DELIVER_ACTOR,
        delivery.WEBHOOKS_QUEUE,
        deliver_webhook,
        detached=True,
        priority=10,
    ),
)
