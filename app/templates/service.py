"""Template operations: the resolvers REST and GraphQL both call, the submission job, and the
platform's status and quality callbacks.

Lifecycle: a create stores the template `PENDING` (no platform id, no quality score) and
schedules its submission in the same transaction. The submission job first applies Meta's
content rules (integrations/whatsapp/validator.py): a template that breaks one is `REJECTED`
at once, the rule named in `rejected_reason`, with no upstream call. The others go to the
channel's platform; its answer (and later its status callback, or a sync) settles them. A
platform that cannot be reached leaves the template `PENDING` with `submission_error` set and
the job retried; a platform refusal is `REJECTED` with the platform's reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.channels import service as channels
from app.channels.models import Channel
from app.channels.service import PlatformFailure
from app.config import Settings
from app.core.clock import utcnow
from app.events.service import emit
from app.integrations.whatsapp.errors import InvalidParameter, InvalidToken, WhatsAppError
from app.integrations.whatsapp.factory import platform_for
from app.integrations.whatsapp.types import (
    CreatedTemplate,
    LibraryFilters,
    PlatformTemplate,
    TemplateSpec,
)
from app.integrations.whatsapp.validator import (
    Violation,
    rejected_reason,
    validate_template,
)
from app.kit import outbox
from app.kit.crypto import DecryptionFailed
from app.kit.errors import Conflict, InvalidInput, NotFound
from app.kit.pagination import NumberedPage, PageParams
from app.kit.platform_times import as_datetime, is_newest, with_time
from app.templates.models import MessageTemplate, TemplateCategory, TemplateStatus
from app.templates.repository import (
    TemplateRepository,
    template_by_id,
    templates_for_platform_id,
)
from app.templates.schemas import (
    LibraryCreate,
    LibraryQuery,
    TemplateContent,
    TemplateCreate,
    library_to_public,
    template_to_public,
)

TEMPLATE = "Template"
SUBMIT_ACTOR = "templates.submit"
SUBMIT_QUEUE = "default"
STATUS_EVENT = "template.status_updated"
QUALITY_EVENT = "template.quality_updated"
CATEGORY_EVENT = "template.category_updated"
STATUS_KIND, QUALITY_KIND, CATEGORY_KIND = "status", "quality", "category"
_CATEGORIES = frozenset(category.value for category in TemplateCategory)
# Waits between submission attempts while the platform is unreachable or throttling.
SUBMIT_RETRY_SECONDS = (5.0, 30.0, 120.0, 600.0)
# The platform's template statuses, folded into the three the API shows.
_STATUS_FROM_PLATFORM = {
    "APPROVED": TemplateStatus.APPROVED,
    "REINSTATED": TemplateStatus.APPROVED,
    "REJECTED": TemplateStatus.REJECTED,
    "DISABLED": TemplateStatus.REJECTED,
    "DELETED": TemplateStatus.REJECTED,
}
_QUALITY = frozenset({"GREEN", "YELLOW", "RED"})
# 2593002: "template not found" on delete, i.e. already gone upstream.
TEMPLATE_NOT_FOUND_SUBCODE = 2593002
ALREADY_EXISTS_SUBCODE = 2388024


class ChannelNotFound(InvalidInput):
    """A template create or sync naming an unknown channel answers 400 (docs/api.md)."""

    code = "channel_not_found"

    def __init__(self) -> None:
        super().__init__("Channel/phone number not found", field="channel_id")


class AccessTokenUnavailable(InvalidInput):
    code = "access_token_unavailable"

    def __init__(self) -> None:
        super().__init__("Could not obtain an access token for the channel", field="channel_id")


def status_from_platform(status: str, current: str | None = None) -> str:
    """Meta's status as ours. PAUSED/FLAGGED (quality holds on an approved template) keep the
    current status; anything else unknown is still under review."""
    if status in ("PAUSED", "FLAGGED") and current is not None:
        return current
    return _STATUS_FROM_PLATFORM.get(status, TemplateStatus.PENDING).value


def quality_from_platform(score: str | None) -> str:
    return score if score in _QUALITY else ""


@dataclass(frozen=True, slots=True)
class SyncResult:
    success: bool
    message: str
    synced_count: int

    def as_dict(self) -> dict[str, Any]:
        return {"success": self.success, "message": self.message, "synced_count": self.synced_count}


# --- channels ----------------------------------------------------------------------------


async def _channel(session: AsyncSession, subject: Subject, channel_id: str) -> Channel:
    try:
        return await channels.get_channel_for_use(session, subject, channel_id)
    except NotFound as exc:
        raise ChannelNotFound() from exc


def _token(channel: Channel, secret_key: str) -> str:
    return channels.access_token_of(channel, channels.access_token_box(secret_key))


def _platform(channel: Channel, token: str, settings: Settings, session: AsyncSession) -> Any:
    return platform_for(
        livemode=channel.livemode,
        access_token=token,
        business_account_id=channel.business_account_id,
        display_phone_number=channel.display_phone_number,
        settings=settings,
        session=session,
    )


# --- create, read, delete -----------------------------------------------------------------


async def _store(
    session: AsyncSession,
    subject: Subject,
    channel: Channel,
    name: str,
    language: str,
    category: str,
    components: list[dict[str, Any]],
) -> MessageTemplate:
    template = MessageTemplate(
        organization_id=subject.organization_id,
        channel_id=channel.id,
        business_account_id=channel.business_account_id,
        platform_template_id=None,
        name=name,
        language=language,
        category=category,
        status=TemplateStatus.PENDING.value,
        components=components,
        quality_score="",
        livemode=channel.livemode,
    )
    repository = TemplateRepository(session, subject)
    try:
        async with session.begin_nested():
            repository.add(template)
            await session.flush()
    except IntegrityError as exc:
        if repository.is_duplicate(exc):
            raise Conflict(
                f"A template named {name} in {language} already exists for this business account",
                field="name",
            ) from exc
        raise
    outbox.schedule(session, SUBMIT_ACTOR, template.id, queue=SUBMIT_QUEUE)
    return template


async def create_template(
    session: AsyncSession, subject: Subject, data: TemplateCreate
) -> MessageTemplate:
    channel = await _channel(session, subject, str(data.channel_id))
    return await _store(
        session,
        subject,
        channel,
        data.name,
        data.language,
        data.category.value,
        data.platform_components(),
    )


def validate_content(data: TemplateContent) -> list[Violation]:
    """The dry run: every content rule the template breaks; nothing is stored."""
    return validate_template(data.category.value, data.platform_components())


async def get_template(session: AsyncSession, subject: Subject, template_id: str) -> Any:
    row = await TemplateRepository(session, subject).get_row(template_id)
    if row is None:
        raise NotFound(TEMPLATE)
    return row


async def list_templates(
    session: AsyncSession, subject: Subject, params: PageParams
) -> NumberedPage[Any]:
    """Newest first; a test-mode credential sees test-mode templates only."""
    return await TemplateRepository(session, subject).numbered_page(params)


async def delete_template(
    session: AsyncSession, subject: Subject, settings: Settings, template_id: str
) -> None:
    """Deleted upstream first (when the platform has it), then here."""
    repository = TemplateRepository(session, subject)
    template = await repository.get(template_id)
    if template is None:
        raise NotFound(TEMPLATE)
    if template.platform_template_id is not None:
        channel = await channels.get_channel_for_use(session, subject, template.channel_id)
        async with _platform(
            channel, _token(channel, settings.resolved_secret_key()), settings, session
        ) as platform:
            try:
                await platform.delete_template(
                    template.business_account_id, template.name, template.platform_template_id
                )
            except InvalidParameter as exc:
                if exc.subcode != TEMPLATE_NOT_FOUND_SUBCODE:
                    raise PlatformFailure(exc) from exc
            except WhatsAppError as exc:
                raise PlatformFailure(exc) from exc
    await repository.delete(template)
    await session.flush()


# --- sync ---------------------------------------------------------------------------------


async def sync_templates(
    session: AsyncSession, subject: Subject, settings: Settings, channel_id: str
) -> SyncResult:
    """Pull every template of the channel's business account and upsert it: matched by the
    platform's id, then by name and language; status, components and quality follow."""
    channel = await _channel(session, subject, channel_id)
    token = _token(channel, settings.resolved_secret_key())
    async with _platform(channel, token, settings, session) as platform:
        try:
            listed = await platform.list_templates(channel.business_account_id)
        except InvalidToken as exc:
            raise InvalidInput(
                "The platform refused the channel's access token", field="channel_id"
            ) from exc
        except WhatsAppError as exc:
            raise PlatformFailure(exc) from exc
    repository = TemplateRepository(session, subject)
    stored = await repository.for_account(channel.business_account_id)
    by_platform_id = {t.platform_template_id: t for t in stored if t.platform_template_id}
    by_name = {(t.name, t.language): t for t in stored}
    for item in listed:
        template = by_platform_id.get(item.id) or by_name.get((item.name, item.language))
        if template is None:
            template = await _store(
                session, subject, channel, item.name, item.language, item.category, []
            )
            by_name[(item.name, item.language)] = template
        await _apply_listing(session, template, item)
    await session.flush()
    count = len(listed)
    return SyncResult(True, f"Synced {count} template(s) from the business account", count)


async def _apply_listing(
    session: AsyncSession, template: MessageTemplate, item: PlatformTemplate
) -> None:
    before = template.status
    template.platform_template_id = item.id
    template.status = status_from_platform(item.status, template.status)
    template.platform_status = _platform_word(item.status) or template.platform_status
    if item.category and item.category != template.category:
        template.previous_category = template.category
        template.category = item.category
    template.components = item.components
    template.quality_score = quality_from_platform(item.quality_score)
    template.submission_error = None
    if template.status == TemplateStatus.REJECTED.value:
        template.rejected_reason = item.rejected_reason or template.rejected_reason
    if template.status != before:
        await _emit(session, template, STATUS_EVENT)


async def _emit(session: AsyncSession, template: MessageTemplate, event_type: str) -> None:
    await session.flush()
    await emit(session, _Owner(template), event_type, template_to_public(template))


@dataclass(frozen=True, slots=True)
class _Owner:
    template: MessageTemplate

    @property
    def organization_id(self) -> str:
        return self.template.organization_id

    @property
    def livemode(self) -> bool:
        return self.template.livemode


# --- library ------------------------------------------------------------------------------


async def browse_library(
    session: AsyncSession, subject: Subject, settings: Settings, query: LibraryQuery
) -> list[dict[str, Any]]:
    try:
        channel = await channels.get_channel_for_use(session, subject, str(query.channel_id))
        token = _token(channel, settings.resolved_secret_key())
    except (NotFound, DecryptionFailed) as exc:
        raise AccessTokenUnavailable() from exc
    filters = LibraryFilters(
        search=query.search,
        topic=query.topic,
        usecase=query.usecase,
        industry=query.industry,
        language=query.language,
        name=query.name,
    )
    async with _platform(channel, token, settings, session) as platform:
        try:
            entries = await platform.browse_library(filters)
        except InvalidToken as exc:
            raise AccessTokenUnavailable() from exc
        except WhatsAppError as exc:
            raise PlatformFailure(exc) from exc
    return [library_to_public(entry) for entry in entries]


def library_components(
    entry: dict[str, Any], examples: Sequence[str] | None
) -> list[dict[str, Any]]:
    """A library entry as template components; `examples` fill the body's positional
    parameters (the entry's parameter names stand in when none are given)."""
    components: list[dict[str, Any]] = []
    header = entry.get("header")
    if header and header.get("text"):
        components.append({"type": "HEADER", "format": "TEXT", "text": header["text"]})
    names = entry["body_params"]
    values = list(examples or [])[: len(names)]
    values += [name.replace("_", " ") for name in names[len(values) :]]
    body: dict[str, Any] = {"type": "BODY", "text": entry["body"]}
    if names:
        body["example"] = {"body_text": [values]}
    components.append(body)
    if entry["buttons"]:
        components.append({"type": "BUTTONS", "buttons": entry["buttons"]})
    return components


async def create_from_library(
    session: AsyncSession,
    subject: Subject,
    settings: Settings,
    library_template_id: str,
    data: LibraryCreate,
) -> MessageTemplate:
    """docs/api.md: a library entry (by id or name) becomes the organization's template."""
    query = LibraryQuery(channel_id=data.channel_id)
    entries = await browse_library(session, subject, settings, query)
    entry = next((e for e in entries if library_template_id in (e["id"], e["name"])), None)
    if entry is None:
        raise NotFound("Library template")
    channel = await _channel(session, subject, str(data.channel_id))
    return await _store(
        session,
        subject,
        channel,
        data.name,
        data.language or entry["language"],
        entry["category"],
        library_components(entry, data.body_params),
    )


# --- the submission job -------------------------------------------------------------------


def _retry_at(attempt: int, settings: Settings) -> datetime:
    # The job engine's retry scale (1.0 in production) shrinks the waits in tests.
    delay = SUBMIT_RETRY_SECONDS[min(attempt, len(SUBMIT_RETRY_SECONDS) - 1)]
    return utcnow() + timedelta(seconds=delay * settings.webhook_retry_scale)


@dataclass(frozen=True, slots=True)
class Submission:
    """What the platform call of a submission needs, read in its own short transaction."""

    template_id: str
    livemode: bool
    access_token: str
    business_account_id: str
    display_phone_number: str
    spec: TemplateSpec


async def prepare_submission(
    session: AsyncSession, settings: Settings, template_id: str
) -> Submission | None:
    """The pre-flight step. None when there is nothing to send: the template is gone, settled
    or already submitted by an earlier run, or broke a content rule (then `REJECTED` here,
    the rule named, without an upstream call). The caller commits."""
    template = await template_by_id(session, template_id)
    if (
        template is None
        or template.status != TemplateStatus.PENDING.value
        or template.platform_template_id is not None
    ):
        return None
    violations = validate_template(template.category, template.components)
    if violations:
        template.status = TemplateStatus.REJECTED.value
        template.rejected_reason = rejected_reason(violations)
        await _emit(session, template, STATUS_EVENT)
        return None
    channel = await session.get(Channel, template.channel_id)
    if channel is None:
        return None  # the channel (and with it the template) is being deleted
    try:
        token = _token(channel, settings.resolved_secret_key())
    except DecryptionFailed:
        template.submission_error = "Could not obtain an access token for the channel"
        return None
    return Submission(
        template.id,
        channel.livemode,
        token,
        channel.business_account_id,
        channel.display_phone_number,
        TemplateSpec(template.name, template.language, template.category, template.components),
    )


async def call_platform(
    submission: Submission, settings: Settings, session: AsyncSession | None
) -> CreatedTemplate | WhatsAppError:
    """The upstream call. Live channels need no session (none is held across the network);
    the simulator records in `session`."""
    if submission.livemode:
        session = None
    async with platform_for(
        livemode=submission.livemode,
        access_token=submission.access_token,
        business_account_id=submission.business_account_id,
        display_phone_number=submission.display_phone_number,
        settings=settings,
        session=session,
    ) as platform:
        try:
            return await platform.create_template(submission.business_account_id, submission.spec)
        except WhatsAppError as exc:
            return exc


async def record_submission(
    session: AsyncSession,
    settings: Settings,
    template_id: str,
    outcome: CreatedTemplate | WhatsAppError,
) -> datetime | None:
    """The platform's answer on the template. Returns when to try again (unreachable or
    throttled), else None. The caller commits."""
    template = await template_by_id(session, template_id)
    if template is None or template.status != TemplateStatus.PENDING.value:
        return None
    if isinstance(outcome, WhatsAppError):
        if isinstance(outcome, InvalidParameter) and outcome.subcode == ALREADY_EXISTS_SUBCODE:
            # An earlier run's submission got through before its answer was lost (or the
            # template was made upstream by hand): not a refusal; a sync links the two.
            template.submission_error = (
                "A template with this name and language already exists on the platform; "
                "sync the channel to link it"
            )
            return None
        if outcome.retryable:
            attempt = 1 if template.submission_error else 0
            template.submission_error = f"{outcome.describe()}; retrying"
            return _retry_at(attempt, settings)
        template.status = TemplateStatus.REJECTED.value
        template.rejected_reason = f"Refused by the messaging platform: {outcome.describe()}"
        template.submission_error = None
        await _emit(session, template, STATUS_EVENT)
        return None
    template.platform_template_id = outcome.id
    template.status = status_from_platform(outcome.status, template.status)
    template.submission_error = None
    await session.flush()
    if template.status != TemplateStatus.PENDING.value:
        await _emit(session, template, STATUS_EVENT)
    return None


# --- platform callbacks -------------------------------------------------------------------


async def _templates_named_by(
    session: AsyncSession, business_account_id: str, value: dict[str, Any]
) -> Sequence[MessageTemplate]:
    """The templates a platform update names (by platform id, else name and language)."""
    return await templates_for_platform_id(
        session,
        business_account_id,
        str(value.get("message_template_id", "")),
        str(value.get("message_template_name", "")),
        str(value.get("message_template_language", "")),
    )


async def apply_status_update(
    session: AsyncSession,
    business_account_id: str,
    value: dict[str, Any],
    at: int | None = None,
) -> int:
    """`message_template_status_update`: the platform's review finished (or changed). `at`:
    Meta's time of the update; one older than the latest applied changes nothing."""
    templates = await _templates_named_by(session, business_account_id, value)
    event = str(value.get("event", ""))
    reason = value.get("reason")
    for template in _newest(templates, STATUS_KIND, at):
        before = template.status
        template.platform_template_id = str(value.get("message_template_id"))
        template.status = status_from_platform(event, template.status)
        template.platform_status = _platform_word(event) or template.platform_status
        template.submission_error = None
        if template.status == TemplateStatus.REJECTED.value and reason and reason != "NONE":
            template.rejected_reason = str(reason)
        if template.status != before:
            await _emit(session, template, STATUS_EVENT)
    return len(templates)


async def apply_quality_update(
    session: AsyncSession,
    business_account_id: str,
    value: dict[str, Any],
    at: int | None = None,
) -> int:
    """`message_template_quality_update`: the platform re-rated a template."""
    templates = await _templates_named_by(session, business_account_id, value)
    score = quality_from_platform(value.get("new_quality_score"))
    for template in _newest(templates, QUALITY_KIND, at):
        if template.quality_score != score:
            template.quality_score = score
            await _emit(session, template, QUALITY_EVENT)
    return len(templates)


async def apply_category_update(
    session: AsyncSession,
    business_account_id: str,
    value: dict[str, Any],
    at: int | None = None,
) -> int:
    """`template_category_update`: Meta recategorized a template (`previous_category` →
    `new_category`). A notice of an impending change (it names `correct_category`) changes
    nothing yet: the completed change follows as its own update."""
    if "correct_category" in value:
        return 0
    category = _platform_word(value.get("new_category"))
    if category not in _CATEGORIES:
        return 0
    templates = await _templates_named_by(session, business_account_id, value)
    for template in _newest(templates, CATEGORY_KIND, at):
        if template.category != category:
            template.previous_category = template.category
            template.category = category
            template.category_updated_at = as_datetime(at) if at is not None else utcnow()
            await _emit(session, template, CATEGORY_EVENT)
    return len(templates)


def _platform_word(value: Any) -> str | None:
    if not isinstance(value, str) or not 0 < len(value) <= 32 or not value.isascii():
        return None
    return value.strip().upper() or None


def _newest(
    templates: Sequence[MessageTemplate], kind: str, at: int | None
) -> list[MessageTemplate]:
    """The templates for which an update of `kind` sent at `at` is the newest yet; their
    record of it moves to `at`."""
    if at is None:
        return list(templates)
    newest = []
    for template in templates:
        if is_newest(template.platform_event_times, kind, at):
            template.platform_event_times = with_time(template.platform_event_times, kind, at)
            newest.append(template)
    return newest
