"""Webhook delivery: fan an event out to subscriptions, then deliver one (event, subscription).

Both are jobs (app/kit/outbox.py), run by workers/. Every side effect is claimed in the
database first, so a job that runs twice delivers nothing twice: fan-out skips subscriptions
that already have a delivery of the event, and a delivery that succeeded or gave up is done.

Retries follow the Standard Webhooks schedule (after the first attempt: 5 s, 5 min, 30 min,
2 h, 5 h, 10 h, 14 h, 20 h, 24 h; ±10 % jitter; a longer `Retry-After` wins), multiplied by
`webhook_retry_scale` (tests shrink it). 410 Gone disables the subscription; so does a run of
failures lasting five days. Either way a `webhook.disabled` event records it.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import structlog
from sqlalchemy import String, Table, any_, bindparam, exists, insert, null, select, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.clock import utcnow
from app.core.ids import new_id
from app.core.jsonutil import dumps
from app.db.prepared import PreparedStatement, constant
from app.db.runner import StatementRunner
from app.events.models import Event
from app.events.service import emit, event_body, new_event_id
from app.events.types import WEBHOOK_DISABLED, WEBHOOK_TEST
from app.kit import outbox
from app.webhooks.models import WebhookDelivery, WebhookDeliveryAttempt, WebhookSubscription
from app.webhooks.schemas import webhook_to_public
from app.webhooks.sender import AttemptOutcome, WebhookSender
from app.webhooks.signing import sign_delivery

logger = structlog.get_logger("switchboard.webhooks")

DELIVER_ACTOR = "webhooks.deliver"
WEBHOOKS_QUEUE = "webhooks"
RETRY_DELAYS_SECONDS: tuple[int, ...] = (5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400)
MAX_ATTEMPTS = len(RETRY_DELAYS_SECONDS) + 1
DISABLE_AFTER_FAILING_FOR = timedelta(days=5)
JITTER = 0.1
PENDING, SUCCEEDED, FAILED = "pending", "succeeded", "failed"
GONE_REASON = "The endpoint answered 410 Gone"
FAILING_REASON = "Every delivery failed for 5 days"


_ATTEMPTS = cast(Table, WebhookDeliveryAttempt.__table__)
_DELIVERIES = cast(Table, WebhookDelivery.__table__)
_SUBSCRIPTIONS = cast(Table, WebhookSubscription.__table__)


def new_delivery_id() -> str:
    return f"msg_{new_event_id()[4:]}"


def _new_delivery(event: Event, subscription: WebhookSubscription) -> WebhookDelivery:
    return WebhookDelivery(
        id=new_delivery_id(),
        organization_id=event.organization_id,
        subscription_id=subscription.id,
        event_id=event.id,
        event_type=event.type,
        status=PENDING,
        attempt_count=0,
    )


_EVENT = PreparedStatement(
    select(
        Event.id, Event.type, Event.created_at, Event.organization_id, Event.livemode, Event.data
    ).where(Event.id == bindparam("event_id"))
)
_EVENTS = PreparedStatement(
    select(
        Event.id, Event.type, Event.created_at, Event.organization_id, Event.livemode, Event.data
    )
    .where(Event.id == any_(bindparam("event_ids", type_=ARRAY(String()))))
    .order_by(Event.created_at, Event.id)
)
_SUBSCRIBERS = PreparedStatement(
    select(WebhookSubscription.id, WebhookSubscription.events).where(
        WebhookSubscription.organization_id == bindparam("organization_id"),
        WebhookSubscription.is_active.is_(constant(True)),
    )
)
_DELIVERED_TO = PreparedStatement(
    select(WebhookDelivery.subscription_id).where(WebhookDelivery.event_id == bindparam("event_id"))
)
_DELIVERY_COLUMNS = ("id", "organization_id", "subscription_id", "event_id", "event_type")
_INSERT_DELIVERY = PreparedStatement(
    insert(_DELIVERIES).values(
        {name: bindparam(name) for name in _DELIVERY_COLUMNS}
        | {
            "status": constant(PENDING),
            "attempt_count": constant(0),
            "created_at": bindparam("now"),
            "updated_at": bindparam("now"),
        }
    )
)


async def load_event(runner: StatementRunner, event_id: str) -> Any | None:
    """The event's columns by name (what `event_body` reads), or None."""
    rows = await runner.fetch(_EVENT, {"event_id": event_id})
    return rows[0] if rows else None


async def load_events(runner: StatementRunner, event_ids: list[str]) -> list[Any]:
    """Several events in one statement (PostgreSQL only: the ids travel as one array)."""
    return await runner.fetch(_EVENTS, {"event_ids": event_ids})


async def fan_out(runner: StatementRunner, event: Any) -> list[outbox.JobRef]:
    """One delivery (and its job) per active subscription of the event's organization that
    names the event type, in the runner's transaction. Returns the jobs to relay once it
    commits; a second run creates nothing for subscriptions that already have a delivery."""
    return await fan_out_events(runner, [event])


async def fan_out_events(runner: StatementRunner, events: list[Any]) -> list[outbox.JobRef]:
    """`fan_out` for a batch: each organization's subscriptions are read once, and an event
    no subscription names costs no statement at all."""
    subscriptions: dict[str, list[Any]] = {}
    now = utcnow()
    rows: list[dict[str, Any]] = []
    for event in events:
        organization_id = event.organization_id
        if organization_id not in subscriptions:
            subscriptions[organization_id] = await runner.fetch(
                _SUBSCRIBERS, {"organization_id": organization_id}
            )
        named = [s for s in subscriptions[organization_id] if event.type in s.events]
        if not named:
            continue
        already = {
            row.subscription_id for row in await runner.fetch(_DELIVERED_TO, {"event_id": event.id})
        }
        rows.extend(
            {
                "id": new_delivery_id(),
                "organization_id": organization_id,
                "subscription_id": subscription.id,
                "event_id": event.id,
                "event_type": event.type,
                "now": now,
            }
            for subscription in named
            if subscription.id not in already
        )
    if not rows:
        return []
    await runner.execute_many(_INSERT_DELIVERY, rows)
    return await outbox.schedule_many(
        runner, DELIVER_ACTOR, [[row["id"]] for row in rows], queue=WEBHOOKS_QUEUE
    )


async def queue_test_event(
    session: AsyncSession, subscription: WebhookSubscription, livemode: bool
) -> WebhookDelivery:
    """A `webhook.test` event delivered to this subscription only (never fanned out)."""
    event = Event(
        id=new_event_id(),
        organization_id=subscription.organization_id,
        type=WEBHOOK_TEST,
        livemode=livemode,
        data={"webhook_id": subscription.id, "message": "This is a test event from Switchboard"},
        created_at=utcnow(),
    )
    session.add(event)
    await session.flush()
    delivery = _new_delivery(event, subscription)
    session.add(delivery)
    outbox.schedule(session, DELIVER_ACTOR, delivery.id, queue=WEBHOOKS_QUEUE)
    return delivery


# --- one attempt ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeliveryTarget:
    """Everything one attempt needs, read before the network call (no transaction held)."""

    delivery_id: str
    attempt: int
    url: str
    secrets: list[str]
    event_type: str
    body: bytes
    organization_id: str
    subscription_id: str
    event_id: str
    active: bool
    failing: bool


async def send_attempt(sender: WebhookSender, target: DeliveryTarget) -> AttemptOutcome:
    """POST the signed body once (the sender re-checks the URL and address: DNS may change)."""
    headers = sign_delivery(
        target.secrets, target.delivery_id, target.event_type, target.body, int(time.time())
    )
    return await sender.post(target.url, target.body, headers)


def next_attempt_delay(attempt: int, outcome: AttemptOutcome, scale: float) -> float | None:
    """Seconds until the next attempt after failed attempt number `attempt`, or None: give up."""
    if attempt >= MAX_ATTEMPTS:
        return None
    delay = RETRY_DELAYS_SECONDS[attempt - 1] * random.uniform(1 - JITTER, 1 + JITTER)
    if outcome.retry_after is not None:
        delay = max(delay, outcome.retry_after)
    return delay * scale


# --- the delivery job ----------------------------------------------------------------------


_TARGET = PreparedStatement(
    select(
        WebhookDelivery.attempt_count,
        WebhookDelivery.subscription_id,
        WebhookSubscription.url,
        WebhookSubscription.secret,
        WebhookSubscription.previous_secret,
        WebhookSubscription.previous_secret_expires_at,
        WebhookSubscription.is_active,
        WebhookSubscription.failing_since,
        Event.id,
        Event.type,
        Event.created_at,
        Event.organization_id,
        Event.livemode,
        Event.data,
    )
    .join(WebhookSubscription, WebhookSubscription.id == WebhookDelivery.subscription_id)
    .join(Event, Event.id == WebhookDelivery.event_id)
    .where(
        WebhookDelivery.id == bindparam("delivery_id"),
        WebhookDelivery.status == constant(PENDING),
    )
)


async def load_target(runner: StatementRunner, delivery_id: str) -> DeliveryTarget | None:
    """What the next attempt sends (one read), or None when there is nothing to send any more.

    `target.active` is False when the subscription was switched off meanwhile: the caller then
    closes the delivery (`close_inactive`) instead of sending, as inactive subscriptions
    receive nothing.
    """
    rows = await runner.fetch(_TARGET, {"delivery_id": delivery_id})
    if not rows:
        return None
    row = rows[0]
    secrets = [row.secret]
    expires = row.previous_secret_expires_at
    if row.previous_secret and expires is not None and expires > utcnow():
        secrets.append(row.previous_secret)
    return DeliveryTarget(
        delivery_id=delivery_id,
        attempt=row.attempt_count + 1,
        url=row.url,
        secrets=secrets,
        event_type=row.type,
        body=dumps(event_body(row)),  # the row carries the event's columns by name
        organization_id=row.organization_id,
        subscription_id=row.subscription_id,
        event_id=row.id,
        active=row.is_active,
        failing=row.failing_since is not None,
    )


async def close_inactive(session: AsyncSession, target: DeliveryTarget) -> None:
    await session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == target.delivery_id, WebhookDelivery.status == PENDING)
        .values(status=FAILED, next_attempt_at=None, updated_at=utcnow())
    )


_SUCCESS_COLUMNS = (
    "id",
    "organization_id",
    "subscription_id",
    "delivery_id",
    "event_id",
    "event_type",
    "attempt",
    "status_code",
    "duration_ms",
    "response_body",
)
_INSERT_SUCCESS = insert(_ATTEMPTS).values(
    {column: bindparam(column) for column in _SUCCESS_COLUMNS}
    | {"success": constant(True), "error": constant(None), "created_at": bindparam("now")}
)
_MARK_SUCCEEDED = (
    update(_DELIVERIES)
    .where(_DELIVERIES.c.id == bindparam("delivery_id"), _DELIVERIES.c.status == constant(PENDING))
    .values(
        status=constant(SUCCEEDED),
        attempt_count=bindparam("attempt"),
        next_attempt_at=constant(None),
        updated_at=bindparam("now"),
    )
)
_CLEAR_FAILING = (
    update(_SUBSCRIPTIONS)
    .where(
        _SUBSCRIPTIONS.c.id == bindparam("subscription_id"),
        _SUBSCRIPTIONS.c.failing_since.is_not(None),
    )
    .values(failing_since=constant(None), updated_at=bindparam("now"))
)
_SUCCESS_STEPS = tuple(
    PreparedStatement(step) for step in (_INSERT_SUCCESS, _MARK_SUCCEEDED, _CLEAR_FAILING)
)


def _success_and_finish() -> PreparedStatement:
    """Where data-modifying CTEs exist (PostgreSQL): the job's fenced finish and the three
    steps in one statement (one round trip, one commit); the steps write only when the finish
    found the run's claim."""
    settled = outbox.settled_by_run()
    held = exists(select(settled.c.id))
    typed = [
        bindparam(column, type_=_ATTEMPTS.c[column].type).label(column)
        for column in _SUCCESS_COLUMNS
    ]
    attempt = insert(_ATTEMPTS).from_select(
        [*_SUCCESS_COLUMNS, "success", "error", "created_at"],
        select(
            *typed,
            constant(True),
            null(),
            bindparam("now", type_=_ATTEMPTS.c.created_at.type),
        ).where(held),
    )
    return outbox.finish_with(
        settled,
        attempt.cte("attempt"),
        _MARK_SUCCEEDED.where(held).cte("marked"),
        _CLEAR_FAILING.where(held).cte("cleared"),
    )


_SUCCESS_AND_FINISH = _success_and_finish()


async def record_success_and_finish(
    runner: StatementRunner,
    target: DeliveryTarget,
    outcome: AttemptOutcome,
    job_id: str,
    token: str,
) -> None:
    """The common case, in statements built once (no ORM on the hot path), finishing the job
    with it: one statement where writes combine, otherwise several that the caller runs in
    one transaction (a SessionRunner's session). Raises `outbox.StaleRun`, having written
    nothing (or in a transaction the caller then rolls back), when the run lost its claim."""
    params = {
        "id": new_id(),
        "organization_id": target.organization_id,
        "subscription_id": target.subscription_id,
        "delivery_id": target.delivery_id,
        "event_id": target.event_id,
        "event_type": target.event_type,
        "attempt": target.attempt,
        "status_code": outcome.status_code,
        "duration_ms": outcome.duration_ms,
        "response_body": outcome.response_body,
        "now": utcnow(),
        "job_id": job_id,
        "token": token,
    }
    if runner.combines_writes:
        [(finished,)] = await runner.fetch(_SUCCESS_AND_FINISH, params)
        if not finished:
            raise outbox.StaleRun(job_id)
        return
    await outbox.finish(runner, job_id, token)  # first: a stale run writes nothing after it
    for step in _SUCCESS_STEPS:
        await runner.execute(step, params)


async def record_failure(
    session: AsyncSession,
    target: DeliveryTarget,
    outcome: AttemptOutcome,
    *,
    retry_scale: float,
) -> datetime | None:
    """Store a failed attempt and its consequences; the time of the next attempt, or None."""
    delivery = await session.get(WebhookDelivery, target.delivery_id)
    if delivery is None or delivery.status != PENDING:
        return None
    subscription = await session.get(WebhookSubscription, delivery.subscription_id)
    if subscription is None:
        return None
    now = utcnow()
    session.add(
        WebhookDeliveryAttempt(
            organization_id=delivery.organization_id,
            subscription_id=delivery.subscription_id,
            delivery_id=delivery.id,
            event_id=delivery.event_id,
            event_type=delivery.event_type,
            attempt=target.attempt,
            status_code=outcome.status_code,
            success=outcome.success,
            duration_ms=outcome.duration_ms,
            error=outcome.error,
            response_body=outcome.response_body,
            created_at=now,
        )
    )
    delivery.attempt_count = target.attempt
    if subscription.failing_since is None:
        subscription.failing_since = now
    if outcome.status_code == 410:
        await disable_subscription(session, subscription, GONE_REASON)
    elif now - subscription.failing_since >= DISABLE_AFTER_FAILING_FOR:
        await disable_subscription(session, subscription, FAILING_REASON)
    delay = (
        None
        if not subscription.is_active
        else next_attempt_delay(target.attempt, outcome, retry_scale)
    )
    if delay is None:
        delivery.status = FAILED
        delivery.next_attempt_at = None
        return None
    delivery.next_attempt_at = now + timedelta(seconds=delay)
    return delivery.next_attempt_at


@dataclass(frozen=True, slots=True)
class _Owner:
    organization_id: str
    livemode: bool


async def disable_subscription(
    session: AsyncSession, subscription: WebhookSubscription, reason: str
) -> None:
    """Switch a subscription off on the service's initiative, and record why as an event."""
    subscription.is_active = False
    subscription.disabled_reason = reason
    logger.warning("webhook subscription disabled", webhook_id=subscription.id, reason=reason)
    data = webhook_to_public(subscription)
    data.pop("secret")
    data["updated_at"] = utcnow()
    data["disabled_reason"] = reason
    await emit(session, _Owner(subscription.organization_id, False), WEBHOOK_DISABLED, data)
