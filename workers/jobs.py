"""The actors: each one a named outbox job whose body calls a service.

Messages carry an outbox job id only (app/kit/outbox.py); the arguments live in the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import dramatiq

from app.events.service import EVENTS_QUEUE, FAN_OUT_ACTOR, event_body
from app.kit import outbox
from app.kit.jsonutil import dumps
from app.webhooks import delivery
from app.webhooks.sender import AttemptOutcome
from workers import metrics
from workers.runtime import JobBody, JobContext, JobRuntime, run_job


async def fan_out_event(job: JobContext) -> datetime | None:
    (event_id,) = job.args
    runtime = job.runtime
    async with runtime.statements() as runner:
        event = await delivery.load_event(runner, event_id)
        if event is None:
            return None
        refs = await delivery.fan_out(runner, event)
        await job.settle(runner, None)
    hand_over(runtime, refs)
    await runtime.resources.event_stream.publish(event.organization_id, dumps(event_body(event)))
    return None


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
    outcome = await delivery.send_attempt(runtime.sender, target)
    metrics.WEBHOOK_DELIVERIES.labels(_outcome_label(outcome)).inc()
    metrics.WEBHOOK_LATENCY.observe(outcome.duration_ms / 1000)
    if outcome.success:
        # One statement on the driver; one session transaction elsewhere: atomic either way.
        async with runtime.statements(transaction=False) as runner:
            await delivery.record_success_and_finish(runner, target, outcome, job.job_id)
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


def hand_over(runtime: JobRuntime, refs: Sequence[outbox.JobRef]) -> None:
    """Jobs this process just committed: run what fits on this process, relay the rest."""
    room = runtime.local_room()
    for ref in refs[:room]:
        runtime.run_locally(run_job(runtime, ref.id, JOBS[ref.actor][1]))
    outbox.relay(refs[room:])


JOBS: dict[str, tuple[str, JobBody]] = {
    FAN_OUT_ACTOR: (EVENTS_QUEUE, fan_out_event),
    delivery.DELIVER_ACTOR: (delivery.WEBHOOKS_QUEUE, deliver_webhook),
}


def declare_actors(
    broker: dramatiq.Broker, runtime: JobRuntime
) -> dict[str, dramatiq.Actor[Any, Any]]:
    """Declare every job on `broker`: each actor takes one outbox job id."""
    actors: dict[str, dramatiq.Actor[Any, Any]] = {}
    for name, (queue, body) in JOBS.items():

        async def run(job_id: str, body: JobBody = body) -> None:  # one per actor
            await run_job(runtime, job_id, body)

        run.__name__ = name.replace(".", "_")
        actors[name] = dramatiq.Actor(
            run,
            broker=broker,
            actor_name=name,
            queue_name=queue,
            priority=0,
            options={"max_retries": 0},
        )
    return actors
