"""Campaign dispatch: what a run sends (its plan, each recipient's message), the run itself
(claims, sends, outcomes), and the end of a run (reconciliation, completion). The job
`campaigns.dispatch` is both the schedule (a job row due at `scheduled_at`, written by the
campaign's moves in service.py) and the sender (`dispatch_job`, registered in tasks.py).

A run sends for up to `RUN_SECONDS`, then hands the job straight back to this process (so it
never outlives its lease and the next run starts without waiting for the sweep). Every message
goes through the platform interface (app/integrations/whatsapp/factory.py): live, the Graph
API client over the worker's shared aiohttp sender; in test mode, the simulator. Live mode is
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

Throttled sends (130429: the channel is held; 131056: the recipient waits) are answered by the
one throttling policy of every sender (governed.ThrottleHolds); they stay claimed by the run
and are sent again when allowed; those still unsent when the run stops go back to pending. A
run that dies leaves its claims to `finish_dispatch`'s reconciliation (failed with
UNCONFIRMED_SEND once stale, never resent blindly).

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
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.campaigns import meta_limits
from app.campaigns import repository as ledger
from app.campaigns.models import CampaignStatus, RecipientStatus
from app.campaigns.repository import Outcome
from app.campaigns.schemas import (
    CONTACT_REFERENCE,
    campaign_message_to_public,
    campaign_to_public,
    recipient_to_public,
)
from app.campaigns.service import (
    COMPLETED,
    DISPATCH_ACTOR,
    DISPATCH_QUEUE,
    MESSAGE_FAILED,
    OUTBOUND_FAILED,
    OUTBOUND_SENT,
    enter_sending,
    is_due,
)
from app.channels import service as channels
from app.channels.repository import ChannelRepository
from app.config import Settings
from app.core.clock import utcnow
from app.events.service import emit, emit_many
from app.integrations.whatsapp.bulk import BulkMessageSender, NeverSent
from app.integrations.whatsapp.errors import WhatsAppError
from app.integrations.whatsapp.factory import platform_for
from app.integrations.whatsapp.governed import ThrottleHolds
from app.integrations.whatsapp.types import TemplateMessage, WhatsAppPlatform
from app.integrations.whatsapp.validator import _variables as template_variables
from app.jobs import JobContext
from app.kit import outbox
from app.kit.send_governor import SendGovernor
from app.resources import Resources
from app.templates.repository import TemplateRepository

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

# The reason of a recipient whose send was interrupted (reconciled after a crash). Every such
# recipient in the fault runs (SIGKILL, FLUSHDB, killed connections) had in fact been
# delivered: the text says so, so nobody re-sends them blindly from the ledger or its CSV.
UNCONFIRMED_SEND = (
    "The send was interrupted before the platform's answer was recorded: the message was most "
    "likely delivered, so it is not resent. Do not send it again without checking with the "
    "recipient"
)


# --- the plan ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """What a dispatch run sends, read once per run: the campaign's owner (for its events),
    its channel and template, and the channel's pace."""

    campaign_id: str
    organization_id: str
    livemode: bool
    channel_id: str
    phone_number_id: str
    business_account_id: str
    display_phone_number: str
    access_token: str = field(repr=False)
    template: TemplateMessage
    variable_count: int
    parameters: dict[str, str]
    messages_per_second: int
    # Meta's rating of the channel: the campaign's rate steps down at YELLOW (meta_limits.py).
    quality_rating: str | None = None


@dataclass(frozen=True, slots=True)
class Unsendable:
    """The campaign's channel or template was deleted under it: every recipient left fails
    with `reason`."""

    campaign_id: str
    organization_id: str
    livemode: bool
    reason: str


class MissingValue(Exception):
    """A recipient lacks a value its template parameters need."""


def _contact_value(reference: str, recipient: Any) -> str:
    if reference == "contact.name":
        value: Any = recipient.name
    elif reference == "contact.phone_number":
        value = recipient.phone_number
    else:
        key = reference.removeprefix("contact.custom_fields.")
        value = (recipient.custom_fields or {}).get(key)
        if value is None or value == "":
            raise MissingValue(f"Contact has no custom field {key!r}")
        return str(value)
    if not value:
        raise MissingValue(f"Contact has no {reference.removeprefix('contact.')}")
    return str(value)


def body_parameters(count: int, parameters: dict[str, str], recipient: Any) -> list[str]:
    """The template's `{{1}}..{{count}}` for one recipient, or MissingValue naming the gap."""
    values = []
    for position in range(1, count + 1):
        text = parameters.get(str(position))
        if text is None:
            raise MissingValue(f"Template variable {{{{{position}}}}} has no value")
        filled = (
            CONTACT_REFERENCE.sub(
                lambda match: _contact_value(match.group(1).strip(), recipient), text
            )
            if "{{" in text
            else text  # a literal: the same for every recipient
        )
        if not filled.strip():
            raise MissingValue(f"Template variable {{{{{position}}}}} is empty for this contact")
        values.append(filled)
    return values


def message_for(plan: Plan, recipient: Any) -> TemplateMessage:
    """The template message one recipient receives (MissingValue: it cannot be filled)."""
    return TemplateMessage(
        plan.template.name,
        plan.template.language,
        body_parameters(plan.variable_count, plan.parameters, recipient),
    )


def _body_variable_count(components: list[Any]) -> int:
    for component in components:
        if isinstance(component, dict) and component.get("type") == "BODY":
            return len(set(template_variables(str(component.get("text") or ""))))
    return 0


async def plan_dispatch(
    session: AsyncSession, campaign_id: str, secret_key: str
) -> Plan | Unsendable | datetime | None:
    """The start of a dispatch run: a scheduled campaign that is due enters `sending`.
    Answers what to send; the time to look again while a scheduled campaign is not due;
    or None when there is nothing to do (paused, cancelled, completed)."""
    campaign = await ledger.campaign_by_id(session, campaign_id)
    if campaign is None:
        return None
    if campaign.status == CampaignStatus.SCHEDULED:
        if not is_due(campaign):
            return campaign.scheduled_at
        await enter_sending(session, campaign)
    if campaign.status != CampaignStatus.SENDING:
        return None
    channel = await ChannelRepository(session, campaign.organization_id).get(
        campaign.chat_phone_number_id
    )
    template = (
        await TemplateRepository(session, campaign.organization_id).get(
            campaign.message_template_id
        )
        if campaign.message_template_id
        else None
    )
    if channel is None or template is None:
        return Unsendable(
            campaign.id,
            campaign.organization_id,
            campaign.livemode,
            "The campaign's channel or template was deleted",
        )
    return Plan(
        campaign_id=campaign.id,
        organization_id=campaign.organization_id,
        livemode=campaign.livemode,
        channel_id=channel.id,
        phone_number_id=channel.phone_number_id,
        business_account_id=channel.business_account_id,
        display_phone_number=channel.display_phone_number,
        access_token=channels.access_token_of(channel, channels.access_token_box(secret_key)),
        template=TemplateMessage(template.name, template.language),
        variable_count=_body_variable_count(template.components),
        parameters=dict(campaign.template_parameters or {}),
        messages_per_second=channel.messages_per_second,
        quality_rating=channel.quality_rating,
    )


async def settle_sends(
    session: AsyncSession,
    plan: Plan | Unsendable,
    outcomes: list[ledger.Outcome],
    deferral: meta_limits.DeferralPolicy | None = None,
) -> None:
    """Record a batch of sends: the ledger rows (one statement), the counters by the same
    deltas, the events (one insert, one fan-out job), and completion when the last recipient
    is settled. A send refused with Meta's per-user marketing limit (131049) defers its
    recipient as the same error in a status does (`deferral`). The caller commits."""
    outcomes = await meta_limits.defer_refused_sends(session, plan.campaign_id, outcomes, deferral)
    settled = await ledger.settle_claims(session, plan.campaign_id, outcomes, utcnow())
    if not settled:
        return
    sent = sum(1 for row in settled if row.status == RecipientStatus.SENT)
    counters = await ledger.add_to_counters(
        session, plan.campaign_id, (sent, 0, 0, len(settled) - sent)
    )
    channel_id = plan.channel_id if isinstance(plan, Plan) else ""
    events: list[tuple[str, dict[str, Any]]] = []
    for row in settled:
        message = campaign_message_to_public(row, channel_id)
        if row.status == RecipientStatus.SENT:
            events.append((OUTBOUND_SENT, message))
        else:
            events.append((MESSAGE_FAILED, recipient_to_public(row)))
            events.append((OUTBOUND_FAILED, message))
    await emit_many(session, plan, events)
    if counters is not None and counters.status == CampaignStatus.SENDING and counters.settled:
        await _complete(session, plan.campaign_id)


async def release_unsent(session: AsyncSession, campaign_id: str, contact_ids: list[str]) -> None:
    """Claimed recipients a run did not send go back to pending, for the next run."""
    await ledger.release_claims(session, campaign_id, contact_ids)


async def finish_dispatch(
    session: AsyncSession, campaign_id: str, claim_stale_seconds: float
) -> datetime | None:
    """The end of a dispatch run. Answers when to run again: now while recipients are
    pending, when the oldest claim of another run goes stale, or None (not sending any more,
    or every recipient settled: then completed)."""
    if await ledger.campaign_status(session, campaign_id) != CampaignStatus.SENDING:
        return None
    if await ledger.has_pending(session, campaign_id):
        return utcnow()
    waiting = await _reconcile_claims(session, campaign_id, claim_stale_seconds)
    if waiting is not None:
        return waiting
    counters = await ledger.ledger_counters(session, campaign_id)
    if counters is not None and counters.status == CampaignStatus.SENDING and counters.settled:
        await _complete(session, campaign_id)
    return None


async def _reconcile_claims(
    session: AsyncSession, campaign_id: str, claim_stale_seconds: float
) -> datetime | None:
    """Claims no run confirmed. A claim older than `claim_stale_seconds` (a setting) belongs
    to a run that died between the claim and the record of its outcome: whether the platform
    accepted the message is unknown, and a resend could deliver it twice, so it is failed with
    that reason (at most once). Younger claims may still be in flight: answers when to look
    again."""
    now = utcnow()
    stale_before = now - timedelta(seconds=claim_stale_seconds)
    failed = await ledger.fail_stale_claims(
        session, campaign_id, stale_before, UNCONFIRMED_SEND, now
    )
    if failed:
        await ledger.add_to_counters(session, campaign_id, (0, 0, 0, len(failed)))
        campaign = await ledger.campaign_by_id(session, campaign_id)
        assert campaign is not None
        await emit_many(
            session, campaign, [(MESSAGE_FAILED, recipient_to_public(row)) for row in failed]
        )
    oldest = await ledger.oldest_claim(session, campaign_id)
    if oldest is None:
        return None
    return oldest + timedelta(seconds=claim_stale_seconds)


async def _complete(session: AsyncSession, campaign_id: str) -> None:
    if not await ledger.mark_completed(session, campaign_id, utcnow()):
        return
    campaign = await ledger.campaign_by_id(session, campaign_id)
    assert campaign is not None
    await emit(session, campaign, COMPLETED, campaign_to_public(campaign))


# --- the run ----------------------------------------------------------------------------


async def dispatch_campaign(
    resources: Resources, campaign_id: str, sender: BulkMessageSender | None = None
) -> datetime | None:
    """One run: answers when to run again (None: nothing more to do). `sender`: the worker
    process's live sender, under the platform interface (a run without one opens its own)."""
    async with resources.session(writes=True) as session:
        plan = await plan_dispatch(session, campaign_id, resources.secret_key)
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
            async with platform_for(
                livemode=True,
                access_token=plan.access_token,
                business_account_id=plan.business_account_id,
                display_phone_number=plan.display_phone_number,
                settings=resources.settings,
                session=None,
                sender=live,
            ) as platform:
                await LiveRun(resources, plan, platform).run(seconds)
        finally:
            if own:
                await live.aclose()
    else:
        await _simulate(resources, plan)
    async with resources.session(writes=True) as session:
        again = await finish_dispatch(
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
            await settle_sends(session, plan, outcomes)
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
            await settle_sends(
                session, plan, outcomes, meta_limits.DeferralPolicy.of(resources.settings)
            )
            await session.commit()


async def _simulated_send(platform: WhatsAppPlatform, plan: Plan, recipient: Any) -> Outcome:
    try:
        message = message_for(plan, recipient)
    except MissingValue as exc:
        return Outcome(recipient.contact_id, None, str(exc))
    try:
        sent = await platform.send_template(plan.phone_number_id, recipient.phone_number, message)
    except WhatsAppError as exc:
        return Outcome(recipient.contact_id, None, exc.describe(), exc.code)
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

    def __init__(self, resources: Resources, plan: Plan, platform: WhatsAppPlatform) -> None:
        self.resources = resources
        self.plan = plan
        self.governor: SendGovernor = resources.send_governor
        self.platform = platform
        self.holds = ThrottleHolds(self.governor, plan.channel_id)
        self.in_flight: set[asyncio.Task[None]] = set()
        self.outcomes: list[Outcome] = []
        self.retries: list[_Retry] = []
        self._order = itertools.count()
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
            message = message_for(plan, recipient)
        except MissingValue as exc:
            self.outcomes.append(Outcome(recipient.contact_id, None, str(exc)))
            return
        try:
            sent = await self.platform.send_template(
                plan.phone_number_id, recipient.phone_number, message
            )
        except WhatsAppError as exc:
            due = await self.holds.refused(exc, recipient.phone_number)
            if due is not None:  # throttled: not accepted, so sent again once allowed
                self._retry_later(recipient, attempt - 1, due)
                return
            # A 5xx answer was not an acceptance, and a connection never made sent nothing:
            # both may be tried again. A timeout or a dropped connection may have delivered
            # the message, so that recipient fails rather than risk a duplicate.
            again = exc.retryable and (exc.http_status is not None or isinstance(exc, NeverSent))
            if again and attempt < MAX_ATTEMPTS:
                self._retry_later(recipient, attempt, time.monotonic() + 0.5 * 2**attempt)
                return
            self.outcomes.append(Outcome(recipient.contact_id, None, exc.describe(), exc.code))
            return
        self.holds.accepted()
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
            await settle_sends(
                session, self.plan, outcomes, meta_limits.DeferralPolicy.of(self.resources.settings)
            )
            if unsent:
                await release_unsent(session, self.plan.campaign_id, unsent)
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
