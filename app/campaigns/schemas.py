"""Campaign inputs shared by REST and GraphQL, and the public shapes."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any
from uuid import UUID

import strawberry
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, WithJsonSchema
from strawberry.scalars import JSON

from app.campaigns import models
from app.campaigns.models import AudienceType, RecipientStatus
from app.contacts.schemas import Tag as ContactTag
from app.kit.pagination import MAX_LIMIT
from app.kit.shape import GRAPHQL_ONLY, SAME, Rest, Shape, column, linked

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


@strawberry.type
class CampaignShape:
    """The public shape of a campaign, declared once (app/kit/shape.py); the GraphQL type
    `Campaign` (app/campaigns/graphql.py) adds its cost, stats and recipients."""

    id: strawberry.ID = column(models.Campaign.id, as_type=strawberry.ID)
    organization_id: str = column(models.Campaign.organization_id)
    name: str = column(models.Campaign.name)
    chat_phone_number_id: str = column(models.Campaign.chat_phone_number_id)
    message_template_id: str | None = column(models.Campaign.message_template_id)
    audience_type: str = column(models.Campaign.audience_type, description="all, tags or manual")
    audience_tags: list[str] | None = column(models.Campaign.audience_tags)
    audience_contact_ids: list[str] | None = column(models.Campaign.audience_contact_ids)
    template_parameters: JSON | None = column(
        models.Campaign.template_parameters,
        as_type=JSON,
        description="Positional variable → literal text or a {{contact.…}} reference",
        rest=Rest(annotation=dict[str, str] | None),
    )
    # REST documents the campaign's times as date-times (other shapes' as plain strings).
    scheduled_at: datetime | None = column(
        models.Campaign.scheduled_at, rest=Rest(annotation=datetime | None)
    )
    status: str = column(
        models.Campaign.status,
        description="draft, scheduled, sending, paused, completed or cancelled",
    )
    total_contacts_count: int = column(models.Campaign.total_contacts_count)
    sent_count: int = column(models.Campaign.sent_count)
    delivered_count: int = column(models.Campaign.delivered_count)
    read_count: int = column(models.Campaign.read_count)
    failed_count: int = column(models.Campaign.failed_count)
    deferred_count: int = column(
        models.Campaign.deferred_count,
        description="Recipients waiting out Meta's per-user marketing limit (not sent, not "
        "failed): a campaign with any is not completed",
        rest=Rest(description="Recipients waiting out Meta's per-user marketing limit (131049)"),
    )
    paused_reason: str | None = column(
        models.Campaign.paused_reason,
        description="Why the campaign paused itself (its channel's rating fell to RED)",
        rest=Rest(description=SAME),
    )
    created_at: datetime = column(models.Campaign.created_at, rest=Rest(annotation=datetime))
    updated_at: datetime = column(models.Campaign.updated_at, rest=Rest(annotation=datetime))


CAMPAIGN = Shape(CampaignShape, rest_name="CampaignResponse")
CampaignResponse = CAMPAIGN.rest_model
campaign_to_public = CAMPAIGN.to_public  # REST bodies and event payloads


@strawberry.type
class CampaignRecipientShape:
    """The public shape of a recipient (a ledger row), declared once (app/kit/shape.py): the
    GraphQL type `CampaignRecipient` (app/campaigns/graphql.py) resolves its contact; the
    recipient events carry the fields REST takes, with the campaign's id."""

    id: strawberry.ID = column(
        models.CampaignRecipient.contact_id,
        as_type=strawberry.ID,
        description="The recipient's contact id (one recipient per contact and campaign), "
        "also its cursor for `after`",
        rest=GRAPHQL_ONLY,
    )
    contact_id: str = column(models.CampaignRecipient.contact_id)
    # Resolved by the GraphQL type (app/campaigns/graphql.py): contacts' loader and type.
    contact: object = linked(sources=(models.CampaignRecipient.contact_id,))
    phone_number: str = column(
        models.CampaignRecipient.phone_number, description="As it was at launch"
    )
    name: str = column(
        models.CampaignRecipient.name,
        description="The contact's name as it was at launch",
        rest=GRAPHQL_ONLY,
    )
    status: str = column(
        models.CampaignRecipient.status,
        description="pending, claimed (being sent), sent, delivered, read, failed or deferred "
        "(waiting out Meta's per-user marketing limit)",
    )
    platform_message_id: str | None = column(
        models.CampaignRecipient.platform_message_id,
        description="WhatsApp's message id once the platform accepted the message",
    )
    error: str | None = column(models.CampaignRecipient.error, description="Why it failed")
    sent_at: datetime | None = column(models.CampaignRecipient.sent_at)
    delivered_at: datetime | None = column(models.CampaignRecipient.delivered_at)
    read_at: datetime | None = column(models.CampaignRecipient.read_at)
    failed_at: datetime | None = column(models.CampaignRecipient.failed_at)
    pricing_category: str | None = column(
        models.CampaignRecipient.pricing_category,
        description="Meta's pricing category of the message (marketing, utility, …)",
        rest=GRAPHQL_ONLY,
    )
    billable: bool | None = column(
        models.CampaignRecipient.billable,
        description="Whether Meta bills the message",
        rest=GRAPHQL_ONLY,
    )
    deferrals: int = column(
        models.CampaignRecipient.deferrals,
        description="Times deferred for Meta's per-user marketing limit (131049)",
        rest=GRAPHQL_ONLY,
    )
    deferred_until: datetime | None = column(
        models.CampaignRecipient.deferred_until,
        description="When a deferred recipient is tried again",
        rest=GRAPHQL_ONLY,
    )


RECIPIENT = Shape(
    CampaignRecipientShape,
    rest_name="CampaignRecipientEvent",
    rest_doc="A recipient as campaign.message.delivered and campaign.message.failed carry it.",
    rest_only=(("campaign_id", models.CampaignRecipient.campaign_id, Rest(annotation=str)),),
    rest_order=(
        "campaign_id",
        "contact_id",
        "phone_number",
        "status",
        "platform_message_id",
        "error",
        "sent_at",
        "delivered_at",
        "read_at",
        "failed_at",
    ),
)
recipient_to_public = RECIPIENT.to_public  # the recipient events' data


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
