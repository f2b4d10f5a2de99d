"""The events domain's job: fan an event out to webhook deliveries and live subscribers."""

from __future__ import annotations

from datetime import datetime

from app.events.service import EVENTS_QUEUE, FAN_OUT_ACTOR, event_body
from app.kit.jobs import JobContext, Task
from app.kit.jsonutil import dumps
from app.webhooks import delivery


async def fan_out_event(job: JobContext) -> datetime | None:
    """Fan out the job's events: one (`emit`), or a batch of one organization (`emit_many`)."""
    event_ids = [str(event_id) for event_id in job.args]
    if not event_ids:
        raise ValueError("a fan-out job names at least one event")
    runtime = job.runtime
    async with runtime.statements() as runner:
        if len(event_ids) > 1 and runtime.resources.dialect_name == "postgresql":
            events = await delivery.load_events(runner, event_ids)
        else:
            events = [
                event
                for event_id in event_ids
                if (event := await delivery.load_event(runner, event_id)) is not None
            ]
        refs = await delivery.fan_out_events(runner, events) if events else []
        await job.settle(runner, None)
    runtime.hand_over(refs)
    await runtime.resources.event_stream.publish_many(
        [(event.organization_id, dumps(event_body(event))) for event in events]
    )
    return None


# Fan-out first: a worker never lets it wait behind deliveries it already holds.
TASKS = (Task(FAN_OUT_ACTOR, EVENTS_QUEUE, fan_out_event, priority=0),)
