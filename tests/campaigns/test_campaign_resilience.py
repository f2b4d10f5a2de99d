"""Crash safety of live campaign dispatch with real `switchboard worker` processes
(PostgreSQL + Redis): 5,000 recipients against the local fake Graph API, which records
every send.

- The worker's process group is killed -9 mid-campaign, a new worker starts: the campaign
  completes; no phone receives two messages; every recipient the dead run had not claimed is
  sent exactly once; a recipient the dead run had claimed is either sent once (confirmed) or
  failed with the documented reconciliation outcome (`UNCONFIRMED_SEND`), never resent.
- Redis is flushed mid-campaign (the schedule and the dispatch job live in the database
  outbox; the sweep sends the job again): every recipient sent exactly once, none failed.

In both, the ledger's counters equal the fake's records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis

from app.campaigns.dispatch import UNCONFIRMED_SEND
from tests.campaigns.live_stack import (
    GraphProcess,
    LiveCampaign,
    draft_live_campaign,
    duplicates,
    live_worker_env,
    running_graph_process,
    wait_for_completion,
    wait_for_sends,
)
from tests.conftest import flushable_redis_url, fresh_database
from tests.webhooks.test_delivery_engine import Engine
from tests.workers.test_redis_engine import running_stack
from tests.workers.worker_process import WorkerProcess, running_worker

pytestmark = [pytest.mark.redis, pytest.mark.slow]

AUDIENCE = 5000
# The crash comes once this many sends are recorded: some, far from all (and not a round
# number, so it tends to fall mid-batch rather than between batches).
CRASH_AFTER = 1234
# A killed run's job runs again once its lease ends; a claim this old belongs to a dead run.
LEASE_SECONDS = 8
CLAIM_STALE_SECONDS = 8
# Generous for a loaded 2-core machine; a quiet one needs a fraction.
SENDS_SECONDS = 120.0
COMPLETION_SECONDS = 300.0
# Once its lease is over, a dead run's claims are reconciled within their staleness: no
# dispatch run may be put further ahead than this.
NEXT_RUN_WITHIN = LEASE_SECONDS + CLAIM_STALE_SECONDS + 5.0
SENT_STATUSES = ("sent", "delivered", "read")


@pytest.fixture(scope="module")
def redis_url() -> str:
    """TEST_REDIS_URL: the one Redis database these tests may flush."""
    return flushable_redis_url()


@pytest.fixture(scope="module")
def database_url(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fresh_database(
        "postgresql", tmp_path_factory.mktemp("resilience"), "sb_campaign_crash"
    ) as url:
        yield url


@pytest.fixture(scope="module")
def graph() -> Iterator[GraphProcess]:
    with running_graph_process() as fake:
        yield fake


@pytest.fixture
def flushable(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    try:
        yield client
    finally:
        client.flushdb()
        client.close()


@pytest.fixture
async def stack(
    database_url: str, redis_url: str, flushable: redis.Redis, tmp_path: Path, graph: GraphProcess
) -> AsyncIterator[Engine]:
    # Live channels are verified with the platform the workers send to.
    async with running_stack(
        database_url, redis_url, tmp_path, graph_api_url=graph.base_url
    ) as engine:
        yield engine


def worker_settings() -> dict[str, object]:
    return {
        "SWITCHBOARD_JOB_LEASE_SECONDS": LEASE_SECONDS,
        # The lease must outlast a document's extraction too (no document is indexed here).
        "SWITCHBOARD_KNOWLEDGE_EXTRACTION_SECONDS": LEASE_SECONDS - 3,
        "SWITCHBOARD_CAMPAIGN_CLAIM_STALE_SECONDS": CLAIM_STALE_SECONDS,
    }


async def check_counters_follow_the_fake(campaign: LiveCampaign) -> dict[str, int]:
    """Common end state: completed, nobody twice, every recipient settled, the ledger's sent
    rows exactly the fake's records (same message ids), the counters the ledger's."""
    body = await campaign.get()
    sends = await campaign.sends()
    ledger = await campaign.ledger()
    assert body["status"] == "completed"
    assert body["total_contacts_count"] == AUDIENCE
    assert len(ledger) == AUDIENCE
    assert duplicates(sends) == {}, "a recipient received the message twice"
    statuses = Counter(row.status for row in ledger.values())
    assert set(statuses) <= {*SENT_STATUSES, "failed"}, f"unsettled recipients: {statuses}"
    sent_rows = {phone: row for phone, row in ledger.items() if row.status in SENT_STATUSES}
    by_phone = {send.to: send for send in sends}
    for phone, row in sent_rows.items():
        assert phone in by_phone, f"{phone} is sent in the ledger; the platform never got it"
        assert row.platform_message_id == by_phone[phone].message_id, phone
    assert body["sent_count"] == len(sent_rows)
    assert body["failed_count"] == statuses["failed"]
    assert body["sent_count"] + body["failed_count"] == AUDIENCE
    return dict(statuses)


async def test_a_worker_killed_mid_campaign_loses_and_repeats_no_send(
    stack: Engine, graph: GraphProcess, database_url: str, redis_url: str, tmp_path: Path
) -> None:
    campaign = await draft_live_campaign(stack, graph, "415", AUDIENCE, "live-crash-kill")
    env = live_worker_env(database_url, redis_url, tmp_path, graph, **worker_settings())
    log = tmp_path / "worker.log"

    worker = WorkerProcess(env, log)
    try:
        worker.wait_ready()
        launched = await campaign.launch()
        assert (launched["status"], launched["total_contacts_count"]) == ("sending", AUDIENCE)
        await wait_for_sends(campaign, CRASH_AFTER, SENDS_SECONDS)
        worker.kill()  # SIGKILL to the whole process group, mid-campaign
    finally:
        worker.stop()
    # The dead run writes nothing more: this is the ledger it left behind.
    at_kill = await campaign.ledger()
    claimed_at_kill = {phone for phone, row in at_kill.items() if row.status == "claimed"}
    sent_at_kill = {phone for phone, row in at_kill.items() if row.status in SENT_STATUSES}
    recorded_at_kill = len(await campaign.sends())
    assert CRASH_AFTER <= recorded_at_kill < AUDIENCE, "the kill was not mid-campaign"
    assert (await campaign.get())["status"] == "sending"

    with running_worker(env, log) as worker:
        await wait_for_completion(campaign, COMPLETION_SECONDS, NEXT_RUN_WITHIN, worker.log_tail)

    statuses = await check_counters_follow_the_fake(campaign)
    ledger = await campaign.ledger()
    sends = await campaign.sends()
    received = {send.to for send in sends}
    assert sent_at_kill <= received
    unconfirmed = {phone for phone, row in ledger.items() if row.status == "failed"}
    # Only a claim of the dead run may end unconfirmed, and only as documented: failed with
    # the reconciliation reason, never resent (at most the one send the fake may have got).
    assert unconfirmed <= claimed_at_kill, "a recipient the dead run never claimed failed"
    for phone in unconfirmed:
        assert ledger[phone].error == UNCONFIRMED_SEND, (phone, ledger[phone].error)
    # Everybody else: exactly one send, recorded and confirmed.
    assert received - unconfirmed == set(ledger) - unconfirmed
    unconfirmed_delivered = unconfirmed & received
    confirmed = sum(statuses.get(status, 0) for status in SENT_STATUSES)
    assert len(sends) == confirmed + len(unconfirmed_delivered)
    print(
        f"kill test: {recorded_at_kill} sends recorded at the kill, {len(claimed_at_kill)}"
        f" claimed and unsettled then; end: {statuses}, {len(sends)} sends recorded,"
        f" {len(unconfirmed)} failed as unconfirmed ({len(unconfirmed_delivered)} of them had"
        " reached the platform), 0 duplicates"
    )


async def test_flushing_redis_mid_campaign_loses_and_repeats_no_send(
    stack: Engine,
    graph: GraphProcess,
    flushable: redis.Redis,
    database_url: str,
    redis_url: str,
    tmp_path: Path,
) -> None:
    campaign = await draft_live_campaign(stack, graph, "628", AUDIENCE, "live-crash-flush")
    env = live_worker_env(database_url, redis_url, tmp_path, graph, **worker_settings())
    with running_worker(env, tmp_path / "worker.log") as worker:
        launched = await campaign.launch()
        assert launched["status"] == "sending"
        await wait_for_sends(campaign, CRASH_AFTER, SENDS_SECONDS)
        keys_flushed = flushable.dbsize()
        flushable.flushdb()
        recorded_at_flush = len(await campaign.sends())
        assert recorded_at_flush < AUDIENCE, "the flush was not mid-campaign"
        await wait_for_completion(campaign, COMPLETION_SECONDS, NEXT_RUN_WITHIN, worker.log_tail)

    assert keys_flushed > 0, "Redis held nothing when it was flushed"
    statuses = await check_counters_follow_the_fake(campaign)
    sends = await campaign.sends()
    assert statuses == {"sent": AUDIENCE}, "a recipient failed"
    assert sorted(send.to for send in sends) == sorted(campaign.phones)
    print(
        f"flush test: {recorded_at_flush} sends recorded at the flush ({keys_flushed} Redis keys"
        f" flushed); end: {statuses}, {len(sends)} sends recorded, 0 duplicates"
    )
