"""Meta's rating of a channel's number, from its webhooks (docs/api.md "Meta's limits and
ratings").

`phone_number_quality_update` names the number by its display number within the business
account (`entry[].id`), with an `event` and the messaging limit tier (`current_limit`, or
`max_daily_conversations_per_business` in newer versions). The rating is the value's
`quality_rating` when the delivery names one (GREEN / YELLOW / RED / UNKNOWN), else what the
event says: FLAGGED is RED, UNFLAGGED is GREEN; other events (UPGRADE, DOWNGRADE,
ONBOARDING, THROUGHPUT_UPGRADE) move the limit only. `account_update` records its `event`
on every channel of the account. Updates older than the latest applied are ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.channels.models import HOLDS_NUMBER, Channel
from app.kit.platform_times import as_datetime, is_newest, with_time

logger = structlog.get_logger("switchboard.whatsapp.ratings")

RATINGS = frozenset({"GREEN", "YELLOW", "RED", "UNKNOWN"})
RATING_OF_EVENT = {"FLAGGED": "RED", "UNFLAGGED": "GREEN"}
RED, YELLOW = "RED", "YELLOW"
QUALITY, ACCOUNT = "quality", "account"
MAX_WORD = 32


@dataclass(frozen=True, slots=True)
class RatingChange:
    channel_id: str
    before: str | None
    after: str | None


def _word(value: Any, limit: int = MAX_WORD) -> str | None:
    """An upper-case platform word as stored, or None for anything else."""
    if not isinstance(value, str):
        return None
    word = value.strip().upper()
    if not word or len(word) > limit or not word.replace("_", "").isalnum():
        return None
    return word


def _digits(number: str) -> str:
    return "".join(character for character in number if character.isdigit())


async def channels_of_account(
    session: AsyncSession, business_account_id: str, display_number: str | None, simulated: bool
) -> Sequence[Channel]:
    """The channels a platform update about the account (one number of it, when
    `display_number` is given) reaches: live holders, or test-mode holders while no live
    channel matches; the simulator's reach test-mode holders only (as messages do)."""
    rows = list(
        await session.scalars(
            select(Channel).where(Channel.business_account_id == business_account_id, HOLDS_NUMBER)
        )
    )
    if display_number is not None:
        wanted = _digits(display_number)
        rows = [row for row in rows if wanted and _digits(row.display_phone_number) == wanted]
    live = [row for row in rows if row.livemode]
    if live and not simulated:
        return live
    return [row for row in rows if not row.livemode]


async def apply_quality_update(
    session: AsyncSession, account: str, value: dict[str, Any], at: int, *, simulated: bool
) -> list[RatingChange]:
    """`phone_number_quality_update`; answers the channels whose rating changed."""
    display = value.get("display_phone_number")
    if not isinstance(display, str | int) or not _digits(str(display)):
        logger.info("quality update without a display number", account=account[:64])
        return []
    event = _word(value.get("event"))
    named = _word(value.get("quality_rating"))
    rating = named if named in RATINGS else RATING_OF_EVENT.get(event or "")
    limit = _word(value.get("max_daily_conversations_per_business")) or _word(
        value.get("current_limit")
    )
    changes = []
    for channel in await channels_of_account(session, account, str(display), simulated):
        if not is_newest(channel.platform_event_times, QUALITY, at):
            continue  # Meta sent a newer update already
        before = channel.quality_rating
        if rating is not None:
            channel.quality_rating = rating
        if limit is not None:
            channel.messaging_limit = limit
        if event is not None:
            channel.quality_event = event
        channel.quality_updated_at = as_datetime(at)
        channel.platform_event_times = with_time(channel.platform_event_times, QUALITY, at)
        if channel.quality_rating != before:
            changes.append(RatingChange(channel.id, before, channel.quality_rating))
    await session.flush()
    return changes


async def apply_account_update(
    session: AsyncSession, account: str, value: dict[str, Any], at: int, *, simulated: bool
) -> int:
    """`account_update`: its event (e.g. ACCOUNT_VIOLATION, DISABLED_UPDATE) on every channel
    of the account; the number of channels it reached."""
    event = _word(value.get("event"), 64)
    if event is None:
        return 0
    reached = 0
    for channel in await channels_of_account(session, account, None, simulated):
        if not is_newest(channel.platform_event_times, ACCOUNT, at):
            continue
        channel.account_status = event
        channel.platform_event_times = with_time(channel.platform_event_times, ACCOUNT, at)
        reached += 1
    await session.flush()
    return reached


def campaign_rate(messages_per_second: int, rating: str | None, yellow_factor: float) -> int:
    """A campaign's send rate on a channel: stepped down at YELLOW (never below 1)."""
    if rating == YELLOW:
        return max(1, int(messages_per_second * yellow_factor))
    return messages_per_second
