"""Extraction slots of one worker process, shared fairly between organizations.

Extracting a hostile document may take its whole time limit (a 390 KB PDF of 1,990 pages
sharing one content stream: 30 s of CPU). Indexing jobs run detached on the worker's event
loop (app/knowledge/tasks.py), so they never hold the threads other jobs need; these slots
bound how many extractions a process runs at once, and how many of them one organization may
hold, so one tenant's documents always leave room for another's. A job that finds no slot is
deferred in the outbox (a clean reschedule, as a webhook delivery at its endpoint's cap) and
its document stays `pending` meanwhile.
"""

from __future__ import annotations

import random

from app.kit.quota import KeyedQuota

# A slot frees when an extraction ends (seconds, at most its limit): look again in a moment.
DEFER_SECONDS = (2.0, 4.0)


class ExtractionSlots(KeyedQuota):
    """`total` extractions at once in this process, at most `per_organization` of them for any
    one organization (keys are organization ids). Used from the worker's event loop only."""

    def __init__(self, total: int, per_organization: int) -> None:
        super().__init__(per_organization, total)

    @staticmethod
    def defer_seconds() -> float:
        return random.uniform(*DEFER_SECONDS)
