"""The events domain's job: fan an event out to webhook deliveries and live subscribers."""

from __future__ import annotations

from datetime import datetime

from app.events.service import EVENTS_QUEUE, FAN_OUT_ACTOR, event_body
from app.kit.jobs import JobContext, Task
from app.kit.jsonutil import dumps
from app.webhooks import delivery


async def fan_out_event(job: JobContext) -> datetime | None:
    (event_id,) = job.args
    runtime = job.runtime
    async with runtime.statements() as runner:
        event = await delivery.load_event(runner, event_id)
        if event is None:
            return None
        refs = await delivery.fan_out(runner, event)
        await job.settle(runner, None)
    runtime.hand_over(refs)
    await runtime.resources.event_stream.publish(event.organization_id, dumps(event_body(event)))
    return None


# Fan-out first: a worker never lets it wait behind deliveries it already holds.
TASKS = (Task(FAN_OUT_ACTOR, EVENTS_QUEUE, fan_out_event, priority=0),)
