"""The campaigns domain's jobs. `campaigns.dispatch` is both the schedule (a job row due at
`scheduled_at`) and the sender.

A run sends for up to `RUN_SECONDS`, then hands the job straight back to this process (so it
never outlives its lease and the next run starts without waiting for the sweep). Live mode is
one pipeline on the worker's event loop:

- grants from the channel's send governor (`resources.send_governor`), at the channel's
  `messages_per_second`, shared with every other sender on the channel;
- a claim of exactly that many pending recipients, pending → claimed in one statement that
  also checks the campaign is still `sending`, committed before any network call: a pause or
  cancel is seen by the next claim (every `SLICE_SECONDS` at most), and only messages already
  claimed (handed to the platform at once) leave after it;
- the sends, up to `MAX_IN_FLIGHT` at a time, over aiohttp (one sender per worker process);
  up to `CLAIMS_IN_FLIGHT` claims wait on the database while the next grants are taken;
- their outcomes settled every `SETTLE_SECONDS` in one background transaction: the ledger rows
  in one statement, the counters by the same deltas, the events in one insert with one fan-out
  job. It commits without waiting for the disk flush: a database crash can only return settled
  rows to `claimed` (reconciled below), while the claims themselves commit durably.

Throttled sends (130429: the governor holds the channel; 131056: the recipient waits) stay
claimed by the run and are sent again when allowed; those still unsent when the run stops go
back to pending. A run that dies leaves its claims to `service.finish_dispatch`'s
reconciliation (failed with UNCONFIRMED_SEND once stale, never resent blindly).

Test mode sends through the simulator, which records in the run's session: a claimed batch,
its sends and their outcomes commit together.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text

from app.campaigns import meta_limits, service
from app.campaigns import repository as ledger
from app.campaigns.models import CampaignStatus
from app.campaigns.repository import Outcome
from app.campaigns.service import DISPATCH_ACTOR, DISPATCH_QUEUE, MissingValue, Plan, Unsendable
from app.channels.governor import PAIR_INTERVAL_SECONDS, SendGovernor, throughput_backoff
from app.config import Settings
from app.integrations.whatsapp.bulk import BulkMessageSender, NeverSent, headers_for
from app.integrations.whatsapp.errors import (
    PairRateLimited,
    ThroughputExceeded,
    WhatsAppError,
)
from app.integrations.whatsapp.factory import platform_for
from app.integrations.whatsapp.types import WhatsAppPlatform
from app.kit import outbox
from app.kit.clock import utcnow
from app.kit.jobs import JobContext, Task, with_resources
from app.resources import Resources

# Test mode: recipients per simulated batch, and batches per run.
BATCH_SIZE = 100
BATCHES_PER_RUN = 20
# Live mode: how long one run sends before handing the job back (well inside the job lease).
RUN_SECONDS = 20.0
# At most one claim per slice: the bound on pause-to-quiet, and on claims per second.
SLICE_SECONDS = 0.05
# Claims awaiting the database at once (each for one slice's grants).
CLAIMS_IN_FLIGHT = 2
# Sends awaiting the platform's answer at once (1,000/s at 250 ms of platform latency).
MAX_IN_FLIGHT = 512
# Outcomes are written at least this often, or once this many are waiting.
SETTLE_SECONDS = 0.1
SETTLE_MAX = 500
# A recipient whose send keeps failing with a retryable error (5xx, 80008…) fails after this
# many attempts; a throttled one (130429/131056) is retried as long as the run lasts.
MAX_ATTEMPTS = 4


async def dispatch_campaign(
    resources: Resources, campaign_id: str, sender: BulkMessageSender | None = None
) -> datetime | None:
    """One run: answers when to run again (None: nothing more to do). `sender`: the worker
    process's live sender (a run without one opens its own)."""
    async with resources.session(writes=True) as session:
        plan = await service.plan_dispatch(session, campaign_id, resources.secret_key)
        await session.commit()
    if plan is None or isinstance(plan, datetime):
        return plan
    if isinstance(plan, Plan):
        plan = meta_limits.paced(plan, resources.settings)
    if isinstance(plan, Unsendable):
        await _fail_everyone(resources, plan)
    elif plan.livemode:
        # A third of the lease: the run and its final settle end long before it runs out.
        seconds = min(RUN_SECONDS, resources.settings.job_lease_seconds / 3)
        own = sender is None
        live = sender or _live_sender(resources.settings)
        try:
            await LiveRun(resources, plan, live).run(seconds)
        finally:
            if own:
                await live.aclose()
    else:
        await _simulate(resources, plan)
    async with resources.session(writes=True) as session:
        again = await service.finish_dispatch(
            session, campaign_id, resources.settings.campaign_claim_stale_seconds
        )
        await session.commit()
    return again


async def dispatch_job(job: JobContext) -> datetime | None:
    """The job body: a run that stopped with recipients left starts again on this process
    at once (not after the sweep's next pass), as a new claim of the same outbox job."""
    (campaign_id,) = job.args
    sender = job.runtime.shared(_live_sender)
    again = await dispatch_campaign(job.runtime.resources, str(campaign_id), sender)
    if again is None or again > utcnow():
        return again
    async with job.runtime.statements(transaction=False) as runner:
        await job.settle(runner, again)
    job.runtime.hand_over([outbox.JobRef(job.job_id, DISPATCH_ACTOR, DISPATCH_QUEUE)])
    return None


def _live_sender(settings: Settings) -> BulkMessageSender:
    return BulkMessageSender(
        settings.graph_api_url, max_connections=MAX_IN_FLIGHT, version=settings.graph_api_version
    )


async def _fail_everyone(resources: Resources, plan: Unsendable) -> None:
    while True:
        async with resources.session(writes=True) as session:
            claimed = await ledger.claim_pending(session, plan.campaign_id, 500, utcnow())
            outcomes = [Outcome(row.contact_id, None, plan.reason) for row in claimed]
            await service.settle_sends(session, plan, outcomes)
            await session.commit()
        if not claimed:
            return


async def _simulate(resources: Resources, plan: Plan) -> None:
    governor = resources.send_governor
    for _ in range(BATCHES_PER_RUN):
        granted = await governor.acquire(plan.channel_id, plan.messages_per_second, BATCH_SIZE)
        async with resources.session(writes=True) as session:
            claimed = await ledger.claim_pending(session, plan.campaign_id, granted, utcnow())
            if not claimed:
                return
            async with platform_for(
                livemode=False,
                access_token="",
                business_account_id=plan.business_account_id,
                display_phone_number=plan.display_phone_number,
                settings=resources.settings,
                session=session,
            ) as platform:
                outcomes = [await _simulated_send(platform, plan, row) for row in claimed]
            await service.settle_sends(session, plan, outcomes)
            await session.commit()


async def _simulated_send(platform: WhatsAppPlatform, plan: Plan, recipient: Any) -> Outcome:
    try:
        message = service.message_for(plan, recipient)
    except MissingValue as exc:
        return Outcome(recipient.contact_id, None, str(exc))
    try:
        sent = await platform.send_template(plan.phone_number_id, recipient.phone_number, message)
    except WhatsAppError as exc:
        return Outcome(recipient.contact_id, None, exc.describe())
    return Outcome(recipient.contact_id, sent.message_id, None)


@dataclass(order=True)
class _Retry:
    """A claimed recipient to send again once `due` (monotonic seconds) has come."""

    due: float
    order: int
    recipient: Any = field(compare=False)
    attempts: int = field(compare=False)


class LiveRun:
    """One live dispatch run: claims, sends and settles on the worker's event loop. Claims
    (up to CLAIMS_IN_FLIGHT) and settles overlap the sends, each in a session of its own from
    the pool; sends never touch the database."""

    def __init__(self, resources: Resources, plan: Plan, sender: BulkMessageSender) -> None:
        self.resources = resources
        self.plan = plan
        self.governor: SendGovernor = resources.send_governor
        self.sender = sender
        self._headers = headers_for(plan.access_token)
        self.in_flight: set[asyncio.Task[None]] = set()
        self.outcomes: list[Outcome] = []
        self.retries: list[_Retry] = []
        self._order = itertools.count()
        self._throttled_in_a_row = 0
        self._hold_until = 0.0
        self._changed = asyncio.Event()
        self._settling: asyncio.Future[None] | None = None
        self._cursor: str | None = None
        self.claiming: dict[asyncio.Future[None], int] = {}
        self._claiming_grants = 0
        self._pending_left = True
        self._stopped = False

    async def run(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        last_settle = last_claim = time.monotonic()
        try:
            while not self._stopped:
                now = time.monotonic()
                self._reap()
                if (
                    self.outcomes
                    and self._settling is None
                    and (now - last_settle >= SETTLE_SECONDS or len(self.outcomes) >= SETTLE_MAX)
                ):
                    # Written beside the claims, on its own connection: a slow commit never
                    # holds up the next slice's sends.
                    outcomes, self.outcomes = self.outcomes, []
                    self._settling = asyncio.ensure_future(self._settle(outcomes))
                    last_settle = now
                busy = self.retries or self.in_flight or self.claiming
                if now >= deadline or not (self._pending_left or busy):
                    return
                room = MAX_IN_FLIGHT - len(self.in_flight) - self._claiming_grants
                due = self.retries and self.retries[0].due <= now
                if (
                    room <= 0
                    or len(self.claiming) >= CLAIMS_IN_FLIGHT
                    or not (self._pending_left or due)
                ):
                    await self._wait(min(SETTLE_SECONDS, self._next_retry_in(now)))
                    continue
                if now - last_claim < SLICE_SECONDS:
                    await asyncio.sleep(SLICE_SECONDS - (now - last_claim))
                    continue
                granted = await self.governor.acquire(
                    self.plan.channel_id, self.plan.messages_per_second, room
                )
                last_claim = time.monotonic()
                # The claim runs while the next grants are taken: its round trip (slow on a
                # busy database) does not cap the rate. The claims in flight hold their
                # grants' room.
                claim = asyncio.ensure_future(
                    self._claim_and_send(granted, self._take_due(granted, last_claim))
                )
                self._claiming_grants += granted
                self.claiming[claim] = granted
                claim.add_done_callback(self._claim_done)
        finally:
            await self._stop()

    def _reap(self) -> None:
        """Failures of the background claims and settles fail the run."""
        if self._settling is not None and self._settling.done():
            self._settling.result()
            self._settling = None
        for claim in [claim for claim in self.claiming if claim.done()]:
            self._claiming_grants -= self.claiming.pop(claim)
            claim.result()

    def _claim_done(self, _claim: asyncio.Future[None]) -> None:
        self._changed.set()

    async def _claim_and_send(self, granted: int, retried: list[_Retry]) -> None:
        claimed = []
        wanted = granted - len(retried)
        if self._pending_left and wanted > 0:
            claimed = await self._claim(wanted)
            if len(claimed) < wanted:
                self._pending_left = False
        # No claim vouched for the campaign still sending: ask before sending.
        vouched = bool(claimed) or not (retried or not self._pending_left)
        if self._stopped or (not vouched and not await self._still_sending()):
            for item in retried:
                heapq.heappush(self.retries, item)
            if not vouched:
                self._stopped = True  # paused or cancelled: `_stop` gives the retries back
            if not claimed:
                return
        await self._start(claimed, retried if not self._stopped else [])

    async def _claim(self, count: int) -> list[Any]:
        async with self.resources.session(writes=True) as session:
            claimed = await ledger.claim_pending(
                session, self.plan.campaign_id, count, utcnow(), after=self._cursor
            )
            await session.commit()
        if claimed:
            # Pending rows behind the cursor (given back by a run) are the next run's.
            self._cursor = max(row.contact_id for row in claimed)
        return claimed

    async def _still_sending(self) -> bool:
        async with self.resources.session(writes=False) as session:
            status = await ledger.campaign_status(session, self.plan.campaign_id)
        return status == CampaignStatus.SENDING

    async def _start(self, claimed: list[Any], retried: list[_Retry]) -> None:
        """Send what was claimed (and the retries that are due), each recipient once it may
        leave under Meta's pair rate; the others wait in the retry heap."""
        fresh = [_Retry(0.0, next(self._order), row, 0) for row in claimed]
        batch = fresh + retried
        if not batch:
            return
        waits = await self.governor.recipient_waits(
            self.plan.channel_id, [item.recipient.phone_number for item in batch]
        )
        now = time.monotonic()
        for item, wait in zip(batch, waits, strict=True):
            if wait > 0:
                self._retry_later(item.recipient, item.attempts, now + wait)
                continue
            task = asyncio.ensure_future(self._send(item.recipient, item.attempts + 1))
            self.in_flight.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.in_flight.discard(task)
        self._changed.set()

    async def _send(self, recipient: Any, attempt: int) -> None:
        plan = self.plan
        try:
            message = service.message_for(plan, recipient)
        except MissingValue as exc:
            self.outcomes.append(Outcome(recipient.contact_id, None, str(exc)))
            return
        try:
            sent = await self.sender.send_template(
                self._headers, plan.phone_number_id, recipient.phone_number, message
            )
        except ThroughputExceeded as exc:
            now = time.monotonic()
            if now >= self._hold_until:
                # One hold per episode: the sends in flight beside this one that meet the
                # same 130429 wait for it rather than doubling it each.
                self._throttled_in_a_row += 1
                hold = throughput_backoff(exc.retry_after, self._throttled_in_a_row)
                self._hold_until = now + hold
                await self.governor.hold(plan.channel_id, hold)
            self._retry_later(recipient, attempt - 1, self._hold_until)
            return
        except PairRateLimited as exc:
            wait = exc.retry_after or PAIR_INTERVAL_SECONDS
            await self.governor.pair_limited(plan.channel_id, recipient.phone_number, wait)
            self._retry_later(recipient, attempt - 1, time.monotonic() + wait)
            return
        except WhatsAppError as exc:
            # A 5xx answer was not an acceptance, and a connection never made sent nothing:
            # both may be tried again. A timeout or a dropped connection may have delivered
            # the message, so that recipient fails rather than risk a duplicate.
            again = exc.retryable and (exc.http_status is not None or isinstance(exc, NeverSent))
            if again and attempt < MAX_ATTEMPTS:
                self._retry_later(recipient, attempt, time.monotonic() + 0.5 * 2**attempt)
                return
            self.outcomes.append(Outcome(recipient.contact_id, None, exc.describe()))
            return
        self._throttled_in_a_row = 0
        self.outcomes.append(Outcome(recipient.contact_id, sent.message_id, None))

    def _retry_later(self, recipient: Any, attempts: int, due: float) -> None:
        heapq.heappush(self.retries, _Retry(due, next(self._order), recipient, attempts))
        self._changed.set()

    def _take_due(self, limit: int, now: float) -> list[_Retry]:
        taken: list[_Retry] = []
        while self.retries and len(taken) < limit and self.retries[0].due <= now:
            taken.append(heapq.heappop(self.retries))
        return taken

    def _next_retry_in(self, now: float) -> float:
        return max(0.001, self.retries[0].due - now) if self.retries else SETTLE_SECONDS

    async def _wait(self, seconds: float) -> None:
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), seconds)

    async def _settle(self, outcomes: list[Outcome], unsent: list[str] | None = None) -> None:
        async with self.resources.session(writes=True) as session:
            if self.resources.dialect_name == "postgresql":
                # The claims commit durably; a settle lost to a database crash leaves its rows
                # claimed, and they are reconciled (failed as unconfirmed), never resent.
                await session.execute(text("SET LOCAL synchronous_commit TO OFF"))
            await service.settle_sends(session, self.plan, outcomes)
            if unsent:
                await service.release_unsent(session, self.plan.campaign_id, unsent)
            await session.commit()

    async def _stop(self) -> None:
        """Let the sends already handed to the platform finish, record them, and give back
        the recipients this run claimed but did not send."""
        if self.claiming:
            await asyncio.gather(*self.claiming, return_exceptions=True)
        if self.in_flight:
            await asyncio.gather(*self.in_flight, return_exceptions=True)
        if self._settling is not None:
            await self._settling
            self._settling = None
        unsent = [item.recipient.contact_id for item in self.retries]
        self.retries = []
        if self.outcomes or unsent:
            outcomes, self.outcomes = self.outcomes, []
            await self._settle(outcomes, unsent)


TASKS = (
    Task(DISPATCH_ACTOR, DISPATCH_QUEUE, dispatch_job),
    Task(
        meta_limits.RETRY_ACTOR, meta_limits.RETRY_QUEUE, with_resources(meta_limits.retry_deferred)
    ),
)
