"""The templates domain's jobs. Each takes the process's resources and the job's arguments,
owns its transactions, and returns when to run again (None: done)."""

from __future__ import annotations

from datetime import datetime

from app.jobs import Task, with_resources
from app.resources import Resources
from app.templates import service
from app.templates.service import SUBMIT_ACTOR, SUBMIT_QUEUE


async def submit_template(resources: Resources, template_id: str) -> datetime | None:
    """Pre-flight, then the platform, in three steps so no transaction spans a network call
    to the live platform. Safe to run twice: a submitted or settled template is skipped."""
    settings = resources.settings
    async with resources.session(writes=True) as session:
        submission = await service.prepare_submission(session, settings, template_id)
        await session.commit()
    if submission is None:
        return None
    if submission.livemode:
        outcome = await service.call_platform(submission, settings, None)
        async with resources.session(writes=True) as session:
            again = await service.record_submission(session, settings, template_id, outcome)
            await session.commit()
        return again
    async with resources.session(writes=True) as session:
        outcome = await service.call_platform(submission, settings, session)
        again = await service.record_submission(session, settings, template_id, outcome)
        await session.commit()
    return again


TASKS = (Task(SUBMIT_ACTOR, SUBMIT_QUEUE, with_resources(submit_template)),)
