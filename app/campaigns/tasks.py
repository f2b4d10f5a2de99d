"""The campaigns domain's jobs: `campaigns.dispatch` sends a campaign (dispatch.py)."""

from __future__ import annotations

from app.campaigns.dispatch import dispatch_job
from app.campaigns.service import DISPATCH_ACTOR, DISPATCH_QUEUE
from app.jobs import Task

TASKS = (Task(DISPATCH_ACTOR, DISPATCH_QUEUE, dispatch_job),)
