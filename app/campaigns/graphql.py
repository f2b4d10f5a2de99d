"""Campaign types and fields; each field calls one campaigns service operation. Every field
requires `campaigns:manage`; mutations answer typed errors (`errors: [UserError]`)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from datetime import datetime
from typing import Any, cast

import strawberry
from graphql import GraphQLError
from sqlalchemy.ext.asyncio import AsyncSession
from strawberry.dataloader import DataLoader
from strawberry.scalars import JSON
from strawberry.types import Info

from app.access.scopes import Scope
from app.access.subject import Subject
from app.campaigns import costs, reports, service
from app.campaigns.models import RecipientStatus
from app.campaigns.schemas import (
    CAMPAIGN,
    RECIPIENT,
    CampaignCreate,
    CampaignRecipientShape,
    CampaignShape,
    CampaignUpdate,
    RecipientTagging,
    StatusFilter,
)
from app.contacts.graphql import Contact, as_contact
from app.graphql.context import Context
from app.graphql.errors import as_graphql_error
from app.graphql.pagination import Connection, PageInfo, numbered_page
from app.graphql.permissions import requires
from app.graphql.resource import DomainMutations, Payload, node_or_none
from app.graphql.socket import (
    SUBSCRIPTIONS_OVER_WEBSOCKET,
    LiveEvents,
    SocketContext,
    follow_live,
)
from app.kit.errors import DomainError, InvalidInput, InvalidState, LiveModeForbidden, NotFound
from app.kit.pagination import CursorPage, PageParams

RECIPIENTS_LOADER = "campaigns.recipients"
CONTACTS_LOADER = "campaigns.recipient_contacts"
CampaignRecipientStatus = strawberry.enum(RecipientStatus, name="CampaignRecipientStatus")


def contacts_loader(context: Context) -> DataLoader[str, Any]:
    """One query for the contacts of every recipient a response shows."""

    async def load(keys: list[str]) -> list[Any]:
        async with context.db() as session:
            rows = await reports.recipient_contacts(session, context.require_subject(), keys)
        return [rows.get(key) for key in keys]

    return context.loader(CONTACTS_LOADER, load)


async def _contact(root: strawberry.Parent[Any], info: Info[Context, None]) -> Contact | None:
    row = await contacts_loader(info.context).load(root.contact_id)
    return None if row is None else as_contact(row)


@strawberry.type(description="One contact of a launched campaign, as its ledger has it.")
class CampaignRecipient(CampaignRecipientShape):
    contact: Contact | None = strawberry.field(
        resolver=_contact,
        extensions=requires(Scope.FULL_ACCESS),
        description="The contact as it is now; null once deleted (needs full_access, as "
        "contacts do). Batched per response.",
    )


as_recipient = RECIPIENT.serving(CampaignRecipient)


CampaignRecipientConnection = Connection[CampaignRecipient]


@strawberry.type(description="What the campaign costs at the message rate card's prices.")
class CampaignCost:
    currency: str
    category: str | None = strawberry.field(description="The template's category")
    recipients: int
    estimated_cost: float = strawberry.field(
        description="Every recipient at the template category's price"
    )
    billable_messages: int = strawberry.field(description="Messages Meta reported billable")
    cost_so_far: float = strawberry.field(description="Billable messages at their category")


@strawberry.type(
    description="The campaign's counters (kept equal to its recipient ledger) and the rates "
    "derived from them; rates are fractions from 0 to 1, null while their base is 0."
)
class CampaignStats:
    total: int = strawberry.field(description="Recipients resolved at launch")
    pending: int = strawberry.field(description="Neither handed to the platform nor failed yet")
    sent: int = strawberry.field(description="Handed to the platform (delivered and read too)")
    delivered: int = strawberry.field(description="Delivered (read too)")
    read: int
    failed: int
    delivery_rate: float | None = strawberry.field(description="delivered / sent")
    read_rate: float | None = strawberry.field(description="read / delivered")
    failure_rate: float | None = strawberry.field(description="failed / (sent + failed)")
    progress: float | None = strawberry.field(description="(sent + failed) / total")


def as_stats(stats: reports.CampaignStats) -> CampaignStats:
    return CampaignStats(
        total=stats.total,
        pending=stats.pending,
        sent=stats.sent,
        delivered=stats.delivered,
        read=stats.read,
        failed=stats.failed,
        delivery_rate=stats.delivery_rate,
        read_rate=stats.read_rate,
        failure_rate=stats.failure_rate,
        progress=stats.progress,
    )


RecipientsKey = tuple[str, reports.RecipientQuery]


def recipients_loader(context: Context) -> DataLoader[RecipientsKey, CursorPage[Any]]:
    """One set of statements for the recipient pages of every campaign a response shows
    (with the same arguments)."""

    async def load(keys: list[RecipientsKey]) -> list[CursorPage[Any] | BaseException]:
        by_query: dict[reports.RecipientQuery, list[str]] = {}
        for campaign_id, query in keys:
            by_query.setdefault(query, []).append(campaign_id)
        found: dict[RecipientsKey, CursorPage[Any] | BaseException] = {}
        async with context.db() as session:
            for query, campaign_ids in by_query.items():
                pages = await reports.recipient_pages(session, campaign_ids, query)
                for campaign_id, page in pages.items():
                    found[(campaign_id, query)] = (
                        as_graphql_error(page) if isinstance(page, DomainError) else page
                    )
        return [found[key] for key in keys]

    loader = context.loaders.get(RECIPIENTS_LOADER)
    if loader is None:
        loader = context.loaders[RECIPIENTS_LOADER] = DataLoader(load_fn=load)
    return cast(DataLoader[RecipientsKey, CursorPage[Any]], loader)


@strawberry.type(description="An outbound template message sent to an audience of contacts.")
class Campaign(CampaignShape):
    @strawberry.field(
        description="Estimated cost and cost so far, from the message rate card "
        "(SWITCHBOARD_MESSAGE_RATE_CARD)"
    )
    async def cost(self, info: Info[Context, None]) -> CampaignCost:
        context = info.context
        try:
            async with context.db() as session:
                found = await costs.campaign_cost(
                    session, context.require_subject(), str(self.id), context.resources.settings
                )
        except DomainError as exc:
            raise as_graphql_error(exc) from exc
        return CampaignCost(**found.as_dict())

    @strawberry.field(description="The counters and the rates derived from them")
    def stats(self) -> CampaignStats:
        return as_stats(reports.campaign_stats(self))

    @strawberry.field(
        description="The recipient ledger in contact id order (a recipient whose status "
        "changes keeps its place); `status` keeps only recipients in those statuses; "
        "`first` 1 to 100 (default 20); `after` an `endCursor`. Batched per response."
    )
    async def recipients(
        self,
        info: Info[Context, None],
        status: list[CampaignRecipientStatus] | None = None,  # type: ignore[valid-type]
        first: int | None = None,
        after: str | None = None,
    ) -> CampaignRecipientConnection:
        try:
            query = reports.recipient_query(status, first, after)
        except DomainError as exc:
            raise as_graphql_error(exc) from exc
        page = await recipients_loader(info.context).load((str(self.id), query))
        nodes = [as_recipient(row) for row in page.items]
        ids = [node.contact_id for node in nodes]
        return CampaignRecipientConnection(
            nodes=nodes,
            page_info=PageInfo(
                has_next_page=page.has_more,
                has_previous_page=page.has_previous,
                start_cursor=ids[0] if ids else None,
                end_cursor=ids[-1] if ids else None,
            ),
            total_count=page.total_count,
        )


as_campaign = CAMPAIGN.serving(Campaign)


@strawberry.type(description="A page of campaigns (page numbers, as REST's envelope A).")
class CampaignPage:
    items: list[Campaign]
    total: int
    page: int
    limit: int
    has_more: bool


CampaignStatusFilter = strawberry.enum(StatusFilter, name="CampaignStatusFilter")

CAMPAIGNS = DomainMutations(
    "Campaign",
    scope=Scope.CAMPAIGNS_MANAGE,
    errors=(
        InvalidInput,
        InvalidState,
        NotFound,
        service.ChannelNotFound,
        service.TemplateNotFound,
        LiveModeForbidden,
    ),
    node=Campaign,
    as_node=as_campaign,
)


@strawberry.input(
    description="Recipient statuses (pending, claimed, sent, delivered, read, failed)."
)
class RecipientTaggingInput:
    statuses: list[str]
    tag: str


@strawberry.type(description="What a retargeting tagged (docs/api.md, Retargeting).")
class RecipientTaggingResult:
    campaign_id: strawberry.ID
    tag: str
    statuses: list[str]
    matched_count: int
    tagged_count: int
    skipped_count: int


RECIPIENT_TAGGING = CAMPAIGNS.payload_type(
    "TagCampaignRecipientsPayload", {"tagging": RecipientTaggingResult}
)


@strawberry.input
class CampaignCreateInput:
    name: str
    chat_phone_number_id: strawberry.ID
    message_template_id: strawberry.ID
    audience_type: str
    audience_tags: list[str] | None = strawberry.UNSET
    audience_contact_ids: list[strawberry.ID] | None = strawberry.UNSET
    scheduled_at: datetime | None = strawberry.UNSET
    template_parameters: JSON | None = strawberry.UNSET


@strawberry.input
class CampaignUpdateInput:
    name: str | None = strawberry.UNSET
    chat_phone_number_id: strawberry.ID | None = strawberry.UNSET
    message_template_id: strawberry.ID | None = strawberry.UNSET
    audience_type: str | None = strawberry.UNSET
    audience_tags: list[str] | None = strawberry.UNSET
    audience_contact_ids: list[strawberry.ID] | None = strawberry.UNSET
    scheduled_at: datetime | None = strawberry.UNSET
    template_parameters: JSON | None = strawberry.UNSET


@strawberry.type
class Query:
    @strawberry.field(extensions=requires(Scope.CAMPAIGNS_MANAGE), description="Newest first.")
    async def campaigns(
        self,
        info: Info[Context, None],
        status_filter: CampaignStatusFilter = StatusFilter.ALL,  # type: ignore[valid-type]
        page: int = 1,
        limit: int = 100,
    ) -> CampaignPage | None:
        context = info.context
        try:
            params = PageParams(page, limit)
            async with context.db() as session:
                found = await service.list_campaigns(
                    session, context.require_subject(), params, StatusFilter(status_filter)
                )
        except DomainError as exc:
            raise as_graphql_error(exc) from exc
        return numbered_page(CampaignPage, found, as_campaign)

    @strawberry.field(extensions=requires(Scope.CAMPAIGNS_MANAGE))
    async def campaign(self, info: Info[Context, None], id: strawberry.ID) -> Campaign | None:
        return await node_or_none(
            info.context,
            lambda session, subject: service.get_campaign(session, subject, id),
            as_campaign,
        )


Move = Callable[[AsyncSession, Subject, str], Awaitable[Any]]


async def _move(info: Info[Context, None], id: strawberry.ID, move: Move) -> Payload:
    return await CAMPAIGNS.perform(
        info, lambda session, subject: move(session, subject, id), CAMPAIGNS.node_answer
    )


@strawberry.type
class Mutation:
    @CAMPAIGNS.mutation(description="Stored as a draft.")
    async def create_campaign(
        self, info: Info[Context, None], input: CampaignCreateInput
    ) -> Payload:
        return await CAMPAIGNS.save(info, CampaignCreate, input, service.create_campaign)

    @CAMPAIGNS.mutation(description="A draft only.")
    async def update_campaign(
        self, info: Info[Context, None], id: strawberry.ID, input: CampaignUpdateInput
    ) -> Payload:
        return await CAMPAIGNS.save(
            info,
            CampaignUpdate,
            input,
            lambda session, subject, data: service.update_campaign(session, subject, id, data),
        )

    @CAMPAIGNS.mutation(payload=CAMPAIGNS.delete_payload)
    async def delete_campaign(self, info: Info[Context, None], id: strawberry.ID) -> Payload:
        return await CAMPAIGNS.delete(info, id, service.delete_campaign)

    @CAMPAIGNS.mutation(description="Resolve the audience, then schedule or start sending.")
    async def launch_campaign(self, info: Info[Context, None], id: strawberry.ID) -> Payload:
        return await _move(info, id, service.launch_campaign)

    @CAMPAIGNS.mutation()
    async def pause_campaign(self, info: Info[Context, None], id: strawberry.ID) -> Payload:
        return await _move(info, id, service.pause_campaign)

    @CAMPAIGNS.mutation()
    async def resume_campaign(self, info: Info[Context, None], id: strawberry.ID) -> Payload:
        return await _move(info, id, service.resume_campaign)

    @CAMPAIGNS.mutation()
    async def cancel_campaign(self, info: Info[Context, None], id: strawberry.ID) -> Payload:
        return await _move(info, id, service.cancel_campaign)

    @CAMPAIGNS.mutation(
        payload=RECIPIENT_TAGGING,
        description="Retargeting: tag the contacts whose recipient status is one of statuses.",
    )
    async def tag_campaign_recipients(
        self, info: Info[Context, None], id: strawberry.ID, input: RecipientTaggingInput
    ) -> Payload:
        return await CAMPAIGNS.save(
            info,
            RecipientTagging,
            input,
            lambda session, subject, data: service.tag_recipients(session, subject, id, data),
            answer=lambda result: {"tagging": RecipientTaggingResult(**vars(result))},
            payload=RECIPIENT_TAGGING,
        )


@strawberry.type(description="A campaign's status and counters at one moment.")
class CampaignProgress:
    campaign_id: strawberry.ID
    status: str = strawberry.field(
        description="draft, scheduled, sending, paused, completed or cancelled"
    )
    stats: CampaignStats
    started_at: datetime | None
    completed_at: datetime | None


def as_progress(snapshot: reports.ProgressSnapshot) -> CampaignProgress:
    return CampaignProgress(
        campaign_id=strawberry.ID(snapshot.campaign_id),
        status=snapshot.status,
        stats=as_stats(snapshot.stats),
        started_at=snapshot.started_at,
        completed_at=snapshot.completed_at,
    )


async def _progress(
    context: SocketContext, subject: Subject, first: reports.ProgressSnapshot
) -> AsyncGenerator[CampaignProgress, None]:
    resources = context.resources
    events = LiveEvents(context, subject)
    updates = reports.watch_progress(
        first,
        open_session=lambda: resources.session(writes=False),
        events=events,
        organization_id=subject.organization_id,
        livemode=subject.livemode,
        poll_seconds=resources.settings.campaign_progress_poll_seconds,
        before_yield=context.recheck,
    )
    progress = follow_live(events, _as_progress(updates), subject.organization_id)
    async with aclosing(progress):
        async for step in progress:
            yield step


async def _as_progress(
    updates: AsyncIterator[reports.ProgressSnapshot],
) -> AsyncGenerator[CampaignProgress, None]:
    try:
        async for snapshot in updates:
            yield as_progress(snapshot)
    except reports.CampaignGone:
        raise NotFound(service.CAMPAIGN) from None
    finally:
        await updates.aclose()  # type: ignore[attr-defined]


@strawberry.type
class Subscription:
    @strawberry.subscription(
        extensions=requires(Scope.CAMPAIGNS_MANAGE),
        description="The campaign's status and counters now, then each time they change, "
        "until it is completed or cancelled.",
    )
    async def campaign_progress(
        self, info: Info[Context, None], id: strawberry.ID
    ) -> AsyncGenerator[CampaignProgress, None]:
        # Not a generator itself: an unknown id is refused before the subscription starts.
        context = info.context
        if not isinstance(context, SocketContext):
            raise GraphQLError(SUBSCRIPTIONS_OVER_WEBSOCKET, extensions={"code": "bad_request"})
        subject = context.require_subject()
        try:
            async with context.db() as session:
                first = await reports.progress_snapshot(session, subject, id)
        except DomainError as exc:
            raise as_graphql_error(exc) from exc
        return _progress(context, subject, first)
