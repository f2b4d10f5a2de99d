"""Campaign types and fields; each field calls one campaigns service operation. Every field
requires `campaigns:manage`; mutations answer typed errors (`errors: [UserError]`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import strawberry
from sqlalchemy.ext.asyncio import AsyncSession
from strawberry.scalars import JSON
from strawberry.types import Info

from app.auth.scopes import Scope
from app.auth.subject import Subject
from app.campaigns import service
from app.campaigns.schemas import CampaignCreate, CampaignUpdate, StatusFilter
from app.channels.service import LiveChannelForbidden
from app.graphql.context import Context
from app.graphql.errors import as_graphql_error
from app.graphql.pagination import numbered_page
from app.graphql.permissions import requires
from app.graphql.resource import DomainMutations, Payload, node_or_none
from app.kit.errors import DomainError, InvalidInput, InvalidState, NotFound
from app.kit.pagination import PageParams


@strawberry.type(description="An outbound template message sent to an audience of contacts.")
class Campaign:
    id: strawberry.ID
    organization_id: str
    name: str
    chat_phone_number_id: str
    message_template_id: str | None
    audience_type: str = strawberry.field(description="all, tags or manual")
    audience_tags: list[str] | None
    audience_contact_ids: list[str] | None
    template_parameters: JSON | None = strawberry.field(
        description="Positional variable → literal text or a {{contact.…}} reference"
    )
    scheduled_at: datetime | None
    status: str = strawberry.field(
        description="draft, scheduled, sending, paused, completed or cancelled"
    )
    total_contacts_count: int
    sent_count: int
    delivered_count: int
    read_count: int
    failed_count: int
    created_at: datetime
    updated_at: datetime


def as_campaign(row: Any) -> Campaign:
    return Campaign(
        id=strawberry.ID(row.id),
        organization_id=row.organization_id,
        name=row.name,
        chat_phone_number_id=row.chat_phone_number_id,
        message_template_id=row.message_template_id,
        audience_type=row.audience_type,
        audience_tags=row.audience_tags,
        audience_contact_ids=row.audience_contact_ids,
        template_parameters=row.template_parameters,
        scheduled_at=row.scheduled_at,
        status=row.status,
        total_contacts_count=row.total_contacts_count,
        sent_count=row.sent_count,
        delivered_count=row.delivered_count,
        read_count=row.read_count,
        failed_count=row.failed_count,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


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
        LiveChannelForbidden,
    ),
    node=Campaign,
    as_node=as_campaign,
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
