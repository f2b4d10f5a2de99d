"""Campaign inputs shared by REST and GraphQL, and the public (REST) shape."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any
from uuid import UUID

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, WithJsonSchema

from app.campaigns.models import AudienceType, RecipientStatus
from app.contacts.schemas import Tag as ContactTag
from app.kit.pagination import MAX_LIMIT
from app.kit.serialize import public_shape

MAX_AUDIENCE_TAGS = 50
MAX_MANUAL_CONTACTS = 10_000
MAX_PARAMETERS = 20
# Bounds the offset a page number makes to what every database's integers hold.
MAX_PAGE = 2**31 - 1

# A positional variable number (1, 2…) as the template writes it: ASCII digits, no leading
# zero ("01" would never fill {{1}}).
POSITION = re.compile(r"^[1-9][0-9]*$")
# A reference to a contact field inside a parameter value.
CONTACT_REFERENCE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_FIELD = re.compile(r"^contact\.(name|phone_number|custom_fields\.[A-Za-z0-9_\-]{1,100})$")


def _check_parameters(value: dict[str, str] | None) -> dict[str, str] | None:
    if value is None:
        return None
    for key, text in value.items():
        if not POSITION.fullmatch(key):
            raise ValueError(
                "parameter names are positional variable numbers as the template writes them"
                f" (1, 2…, no leading zero), not {key!r}"
            )
        for reference in CONTACT_REFERENCE.findall(text):
            if not _FIELD.match(reference):
                raise ValueError(
                    f"{{{{{reference}}}}} is not a contact field; use {{{{contact.name}}}}, "
                    "{{contact.phone_number}} or {{contact.custom_fields.KEY}}"
                )
    return value


def _as_utc(value: datetime | None) -> datetime | None:
    """A time without an offset is read as UTC (the documented `scheduled_at` is a UTC time)."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


ScheduledAt = Annotated[datetime | None, AfterValidator(_as_utc)]
TemplateParameters = Annotated[
    Annotated[
        dict[str, Annotated[str, StringConstraints(max_length=1024)]],
        WithJsonSchema(
            {
                "type": "object",
                "maxProperties": MAX_PARAMETERS,
                "propertyNames": {"pattern": POSITION.pattern},
                "additionalProperties": {"type": "string", "maxLength": 1024},
            }
        ),
    ]
    | None,
    Field(default=None, max_length=MAX_PARAMETERS),
    AfterValidator(_check_parameters),
]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=100)]


class CampaignCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: Annotated[str, StringConstraints(min_length=1, max_length=255)]
    chat_phone_number_id: UUID
    message_template_id: UUID
    audience_type: AudienceType
    audience_tags: list[Tag] | None = Field(default=None, max_length=MAX_AUDIENCE_TAGS)
    audience_contact_ids: list[UUID] | None = Field(default=None, max_length=MAX_MANUAL_CONTACTS)
    scheduled_at: ScheduledAt = None
    template_parameters: TemplateParameters = None


class CampaignUpdate(BaseModel):
    """Every field optional; only the fields sent change (a draft only)."""

    model_config = ConfigDict(extra="ignore")

    name: Annotated[str, StringConstraints(min_length=1, max_length=255)] | None = None
    chat_phone_number_id: UUID | None = None
    message_template_id: UUID | None = None
    audience_type: AudienceType | None = None
    audience_tags: list[Tag] | None = Field(default=None, max_length=MAX_AUDIENCE_TAGS)
    audience_contact_ids: list[UUID] | None = Field(default=None, max_length=MAX_MANUAL_CONTACTS)
    scheduled_at: ScheduledAt = None
    template_parameters: TemplateParameters = None


class StatusFilter(StrEnum):
    ALL = "all"
    DRAFT = "draft"
    SCHEDULED = "scheduled"
    SENDING = "sending"
    PAUSED = "paused"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class CampaignPageQuery(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    status_filter: StatusFilter = StatusFilter.ALL
    limit: int = Field(default=MAX_LIMIT, ge=1, le=MAX_LIMIT)
    page: int = Field(default=1, ge=1, le=MAX_PAGE)


class CampaignResponse(BaseModel):
    id: str
    organization_id: str
    name: str
    chat_phone_number_id: str
    message_template_id: str | None
    audience_type: str
    audience_tags: list[str] | None
    audience_contact_ids: list[str] | None
    template_parameters: dict[str, str] | None
    scheduled_at: datetime | None
    status: str
    total_contacts_count: int
    sent_count: int
    delivered_count: int
    read_count: int
    failed_count: int
    deferred_count: int = Field(
        description="Recipients waiting out Meta's per-user marketing limit (131049)"
    )
    paused_reason: str | None = Field(
        description="Why the campaign paused itself (its channel's rating fell to RED)"
    )
    created_at: datetime
    updated_at: datetime


campaign_to_public = public_shape(CampaignResponse)


def recipient_to_public(recipient: Any) -> dict[str, Any]:
    return {
        "campaign_id": recipient.campaign_id,
        "contact_id": recipient.contact_id,
        "phone_number": recipient.phone_number,
        "status": recipient.status,
        "platform_message_id": recipient.platform_message_id,
        "error": recipient.error,
        "sent_at": recipient.sent_at,
        "delivered_at": recipient.delivered_at,
        "read_at": recipient.read_at,
        "failed_at": recipient.failed_at,
    }


def campaign_message_to_public(recipient: Any, channel_id: str) -> dict[str, Any]:
    """A campaign message as `message.sent` / `message.failed` carry it."""
    return {
        **recipient_to_public(recipient),
        "channel_id": channel_id,
        "direction": "outbound",
        "type": "template",
    }


class RecipientTagging(BaseModel):
    """Retargeting: tag the contacts whose ledger status is one of `statuses`."""

    model_config = ConfigDict(extra="ignore")

    statuses: list[RecipientStatus] = Field(min_length=1, max_length=len(RecipientStatus))
    tag: ContactTag


class RecipientTaggingResponse(BaseModel):
    campaign_id: str
    tag: str
    statuses: list[str]
    matched_count: int = Field(description="Recipients whose status is one of `statuses`")
    tagged_count: int = Field(description="Contacts that got the tag (the others had it)")
    skipped_count: int = Field(
        description="Matched contacts left untagged: deleted since, or at the 100-tag limit"
    )


class CampaignCostResponse(BaseModel):
    """`GET /campaigns/{id}/cost`: prices from the rate card (app/campaigns/costs.py)."""

    currency: str
    category: str | None = Field(description="The template's category, as Meta prices it")
    recipients: int = Field(description="The audience as it stands (draft) or the ledger")
    estimated_cost: float = Field(description="Every recipient at the template category's price")
    billable_messages: int = Field(description="Messages Meta reported billable so far")
    cost_so_far: float = Field(description="Billable messages at their priced category")
