"""The campaigns domain's jobs: `campaigns.dispatch` sends a campaign (dispatch.py);
`campaigns.deferred_retry` releases recipients deferred for Meta's per-user marketing limit
(meta_limits.py)."""

from __future__ import annotations

from app.campaigns import meta_limits
from app.campaigns.dispatch import dispatch_job
from app.campaigns.service import DISPATCH_ACTOR, DISPATCH_QUEUE
from app.jobs import Task, with_resources

TASKS = (
    Task(DISPATCH_ACTOR, DISPATCH_QUEUE, dispatch_job),
    Task(
        meta_limits.RETRY_ACTOR, meta_limits.RETRY_QUEUE, with_resources(meta_limits.retry_deferred)
    ),
)
