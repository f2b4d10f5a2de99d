"""A transaction that fans its own events out (`events.fan_out_here`, as the platform's
webhooks do): what it fans out when a savepoint undid one of its events, and what becomes of
events it never fanned out before committing. SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.events.models import Event
from app.events.service import FAN_OUT_ACTOR, emit, fan_out_here
from app.kit.outbox import MAX_JOINED_ARGS
from app.kit.outbox_models import OutboxJob
from app.webhooks.delivery import DELIVER_ACTOR
from app.webhooks.models import WebhookDelivery, WebhookSubscription
from app.webhooks.signing import generate_secret
from app.webhooks.tasks import fan_out_collected
from tests.conftest import Tenant


@dataclass(frozen=True)
class Owner:
    organization_id: str
    livemode: bool = False


class Undone(Exception):
    pass


async def subscribe(sessionmaker: async_sessionmaker[AsyncSession], tenant: Tenant) -> None:
    async with sessionmaker() as session:
        subscription = WebhookSubscription(
            organization_id=tenant.organization_id,
            url="https://93.184.216.34/hooks",
            secret=generate_secret(),
            events=["lead.created", "lead.updated"],
            is_active=True,
        )
        session.add(subscription)
        await session.commit()


async def test_an_event_a_savepoint_undid_is_not_fanned_out(
    sessionmaker: async_sessionmaker[AsyncSession], acme: Tenant
) -> None:
    await subscribe(sessionmaker, acme)
    owner = Owner(acme.organization_id)
    async with sessionmaker() as session:
        fan_out_here(session)
        kept = await emit(session, owner, "lead.created", {"id": "kept"})
        try:
            async with session.begin_nested():
                await emit(session, owner, "lead.updated", {"id": "undone"})
                await session.flush()
                raise Undone()
        except Undone:
            pass
        fanned = await fan_out_collected(session)
        await session.commit()
    assert [event.id for event in fanned.events] == [kept.id]
    assert [ref.actor for ref in fanned.refs] == [DELIVER_ACTOR]
    async with sessionmaker() as session:
        deliveries = (await session.execute(select(WebhookDelivery.event_id))).scalars().all()
        actors = (await session.scalars(select(OutboxJob.actor))).all()
        events = (await session.scalars(select(Event.id))).all()
    assert deliveries == [kept.id]
    assert list(events) == [kept.id]
    assert sorted(actors) == [DELIVER_ACTOR]  # no fan-out job: the transaction did it


async def test_events_not_fanned_out_before_the_commit_get_their_fan_out_job(
    sessionmaker: async_sessionmaker[AsyncSession], acme: Tenant
) -> None:
    """A path that marked its transaction but committed without fanning out loses nothing:
    the collected events get the one fan-out job they would have had."""
    owner = Owner(acme.organization_id)
    async with sessionmaker() as session:
        fan_out_here(session)
        first = await emit(session, owner, "lead.created", {"id": "a"})
        second = await emit(session, owner, "lead.updated", {"id": "a"})
        await session.commit()
    async with sessionmaker() as session:
        jobs = (
            await session.scalars(select(OutboxJob).where(OutboxJob.actor == FAN_OUT_ACTOR))
        ).all()
    assert [job.args for job in jobs] == [[first.id, second.id]]


async def test_the_mark_lasts_one_transaction(
    sessionmaker: async_sessionmaker[AsyncSession], acme: Tenant
) -> None:
    owner = Owner(acme.organization_id)
    async with sessionmaker() as session:
        fan_out_here(session)
        await emit(session, owner, "lead.created", {"id": "a"})
        await fan_out_collected(session)
        await session.commit()
        later = await emit(session, owner, "lead.updated", {"id": "a"})  # a new transaction
        await session.commit()
    async with sessionmaker() as session:
        jobs = (
            await session.scalars(select(OutboxJob).where(OutboxJob.actor == FAN_OUT_ACTOR))
        ).all()
    assert [job.args for job in jobs] == [[later.id]]


async def test_more_events_than_a_job_holds_are_left_to_fan_out_jobs(
    sessionmaker: async_sessionmaker[AsyncSession], acme: Tenant
) -> None:
    """A body of many statuses does not fan out in its request: its events get the jobs they
    would have had, a job's worth each."""
    owner = Owner(acme.organization_id)
    async with sessionmaker() as session:
        fan_out_here(session)
        emitted = [
            (await emit(session, owner, "lead.updated", {"id": str(n)})).id
            for n in range(MAX_JOINED_ARGS + 1)
        ]
        fanned = await fan_out_collected(session)
        await session.commit()
    assert (fanned.events, fanned.refs) == ([], [])
    async with sessionmaker() as session:
        jobs = (
            await session.scalars(select(OutboxJob).where(OutboxJob.actor == FAN_OUT_ACTOR))
        ).all()
    assert sorted(len(job.args) for job in jobs) == [1, MAX_JOINED_ARGS]
    assert sorted(arg for job in jobs for arg in job.args) == sorted(emitted)
