"""The conversations domain's jobs."""

from __future__ import annotations

from datetime import datetime

import structlog

from app.conversations.inbound import (
    STATUS_RETRY_ACTOR,
    SignatureInvalid,
    handle_signed,
    retry_status,
)
from app.integrations.whatsapp.factory import CALLBACK_ACTOR, CALLBACK_QUEUE
from app.kit.jobs import Task, with_resources
from app.resources import Resources

logger = structlog.get_logger("switchboard.whatsapp.inbound")


async def deliver_callback(resources: Resources, body: str, signature: str) -> datetime | None:
    """A simulator callback, through the handler the platform's POSTs reach (signature
    checked the same way)."""
    try:
        await handle_signed(resources, body.encode(), signature)
    except SignatureInvalid:
        # Signed with an app secret that has since changed: it can never verify.
        logger.warning("simulated callback with a stale signature dropped")
    return None


TASKS = (
    Task(CALLBACK_ACTOR, CALLBACK_QUEUE, with_resources(deliver_callback)),
    Task(STATUS_RETRY_ACTOR, CALLBACK_QUEUE, with_resources(retry_status)),
)
