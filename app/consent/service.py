"""Consent from the messaging platform: keywords in inbound messages, Meta's opt-out signals,
and the organization's keyword settings (docs/api.md, "Consent").

Consent is per phone number within an organization: a keyword or a platform signal about a
number applies to every contact of the organization with that number (numbers need not be
unique), in time order (app/contacts/consent.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.channels.models import Channel
from app.consent.models import ConsentSettings
from app.consent.repository import ConsentSettingsRepository
from app.consent.schemas import ConsentSettingsUpdate, normalize_keyword
from app.contacts.consent import record_marketing_consent
from app.contacts.models import Contact
from app.contacts.repository import ContactRepository
from app.contacts.schemas import OptOutSource
from app.core.clock import utcnow
from app.kit import outbox
from app.kit.errors import InvalidInput
from app.kit.phone import to_e164

logger = structlog.get_logger("switchboard.consent")

# A multilingual default: English, French, Spanish, Portuguese, German, Italian, Dutch.
DEFAULT_OPT_OUT_KEYWORDS = (
    "stop",
    "stopall",
    "unsubscribe",
    "cancel",
    "end",
    "quit",
    "opt out",
    "optout",
    "arret",
    "arrêt",
    "desabonner",
    "désabonner",
    "parar",
    "baja",
    "cancelar",
    "detener",
    "sair",
    "abmelden",
    "stopp",
    "disiscriviti",
    "afmelden",
)
DEFAULT_OPT_IN_KEYWORDS = ("start", "unstop")
# Meta's error when a user stopped marketing messages from the business.
PLATFORM_OPT_OUT_ERROR = 131050
CONFIRM_ACTOR = "consent.confirm"
CONFIRM_QUEUE = "consent"


@dataclass(frozen=True)
class DefaultConsentSettings:
    """What an organization that never changed its settings has."""

    opt_out_keywords: tuple[str, ...] = DEFAULT_OPT_OUT_KEYWORDS
    opt_in_keywords: tuple[str, ...] = DEFAULT_OPT_IN_KEYWORDS
    opt_out_reply: str | None = None
    opt_in_reply: str | None = None
    updated_at: datetime | None = None


DEFAULTS = DefaultConsentSettings()


async def _settings_of(session: AsyncSession, organization_id: str) -> Any:
    stored = await ConsentSettingsRepository(session, organization_id).stored()
    return DEFAULTS if stored is None else stored


async def get_consent_settings(session: AsyncSession, subject: Subject) -> Any:
    return await _settings_of(session, subject.organization_id)


async def update_consent_settings(
    session: AsyncSession, subject: Subject, data: ConsentSettingsUpdate
) -> ConsentSettings:
    changes = data.changes()
    stored = await ConsentSettingsRepository(session, subject).stored()
    if stored is None:
        stored = ConsentSettings(
            organization_id=subject.organization_id,
            opt_out_keywords=list(DEFAULT_OPT_OUT_KEYWORDS),
            opt_in_keywords=list(DEFAULT_OPT_IN_KEYWORDS),
        )
        session.add(stored)
    for name, value in changes.items():
        setattr(stored, name, value)
    both = set(stored.opt_out_keywords) & set(stored.opt_in_keywords)
    if both:
        field = "opt_in_keywords" if "opt_in_keywords" in changes else "opt_out_keywords"
        raise InvalidInput(
            f"A keyword cannot both opt out and opt in: {', '.join(sorted(both))}", field=field
        )
    stored.updated_at = utcnow()
    await session.flush()
    return stored


def _time(value: Any) -> datetime:
    """A platform timestamp (unix seconds, as a number or a string); now when unusable."""
    try:
        return datetime.fromtimestamp(int(value), tz=UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return utcnow()


def _phone(wa_id: Any) -> str | None:
    if not isinstance(wa_id, str | int) or isinstance(wa_id, bool):
        return None
    try:
        return to_e164(f"+{str(wa_id).lstrip('+')}")
    except InvalidInput:
        return None


async def _record(
    session: AsyncSession,
    channel: Channel,
    phone: str,
    *,
    opted_out: bool,
    source: OptOutSource,
    at: datetime,
    stop_calls: bool = False,
) -> list[Contact]:
    contacts = await ContactRepository(session, channel.organization_id).all_by_phone_number(phone)
    return await record_marketing_consent(
        session,
        channel,
        contacts,
        opted_out=opted_out,
        source=source,
        at=at,
        stop_calls=stop_calls,
    )


async def apply_keyword(
    session: AsyncSession,
    channel: Channel,
    *,
    phone_number: str,
    ticket_id: str,
    text: str | None,
    at: datetime,
) -> bool | None:
    """An inbound text, checked against the organization's keywords: True when it opted the
    number out, False when it opted it back in, None when it is no keyword. An opt-out
    keyword also sets `do_not_call` (one suppression list for messages and calls); opting
    back in leaves calls as they are, since only the API turns them back on. A change that
    happened schedules the confirmation reply the settings hold, if any."""
    if text is None:
        return None
    body = normalize_keyword(text)
    settings = await _settings_of(session, channel.organization_id)
    if body in settings.opt_out_keywords:
        opted_out, reply = True, settings.opt_out_reply
    elif body in settings.opt_in_keywords:
        opted_out, reply = False, settings.opt_in_reply
    else:
        return None
    changed = await _record(
        session,
        channel,
        phone_number,
        opted_out=opted_out,
        source=OptOutSource.KEYWORD,
        at=at,
        stop_calls=True,
    )
    if changed and reply:
        outbox.schedule(
            session,
            CONFIRM_ACTOR,
            channel.organization_id,
            channel.livemode,
            ticket_id,
            reply,
            queue=CONFIRM_QUEUE,
        )
    return opted_out


def _error_codes(errors: Any) -> set[int]:
    codes = set()
    for error in errors if isinstance(errors, list) else []:
        code = error.get("code") if isinstance(error, dict) else None
        if isinstance(code, int | str) and not isinstance(code, bool) and str(code).isdigit():
            codes.add(int(code))
    return codes


async def apply_status_opt_outs(
    session: AsyncSession, channel: Channel, statuses: list[Any]
) -> None:
    """`statuses[]` of a webhook: a failure with Meta's error 131050 (the user stopped
    marketing messages) opts its recipient out, at the status's time."""
    for status in statuses:
        if not isinstance(status, dict) or status.get("status") != "failed":
            continue
        if PLATFORM_OPT_OUT_ERROR not in _error_codes(status.get("errors")):
            continue
        phone = _phone(status.get("recipient_id"))
        if phone is None:
            logger.info("opt-out status without a usable recipient skipped", channel_id=channel.id)
            continue
        await _record(
            session,
            channel,
            phone,
            opted_out=True,
            source=OptOutSource.PLATFORM,
            at=_time(status.get("timestamp")),
        )


# Meta's `user_preferences` values: a user stopped, or resumed, marketing messages.
PREFERENCE_OPTED_OUT = {"stop": True, "resume": False}
MARKETING_CATEGORY = "marketing_messages"


async def apply_user_preferences(
    session: AsyncSession, channel: Channel, value: dict[str, Any]
) -> None:
    """The `user_preferences` webhook field: `stop` opts the user out (source platform),
    `resume` opts them back in, each at its own timestamp."""
    preferences = value.get("user_preferences")
    for preference in preferences if isinstance(preferences, list) else []:
        if not isinstance(preference, dict):
            continue
        category = preference.get("category", MARKETING_CATEGORY)
        opted_out = PREFERENCE_OPTED_OUT.get(str(preference.get("value", "")).lower())
        phone = _phone(preference.get("wa_id"))
        if category != MARKETING_CATEGORY or opted_out is None or phone is None:
            logger.info("user preference not handled", channel_id=channel.id)
            continue
        await _record(
            session,
            channel,
            phone,
            opted_out=opted_out,
            source=OptOutSource.PLATFORM,
            at=_time(preference.get("timestamp")),
        )
