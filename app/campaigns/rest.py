"""/api/v1/campaigns: routes → campaigns service → the JSON shapes of docs/api.md, and
the recipient ledger as CSV (app/campaigns/reports.py). Every route requires
`campaigns:manage`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response, StreamingResponse

from app.access.scopes import Scope
from app.access.subject import Subject
from app.campaigns import costs, reports, service
from app.campaigns.schemas import (
    CampaignCostResponse,
    CampaignCreate,
    CampaignPageQuery,
    CampaignResponse,
    CampaignUpdate,
    RecipientTagging,
    RecipientTaggingResponse,
    campaign_to_public,
)
from app.kit.pagination import PageParams, envelope_a
from rest_compat.endpoint import Handler, Operation, RequestContext, json_response


async def create_campaign(ctx: RequestContext) -> Response:
    campaign = await service.create_campaign(ctx.session, ctx.subject, ctx.body(CampaignCreate))
    return json_response(campaign_to_public(campaign), status_code=201)


async def list_campaigns(ctx: RequestContext) -> Response:
    query = ctx.query(CampaignPageQuery)
    page = await service.list_campaigns(
        ctx.session, ctx.subject, PageParams(query.page, query.limit), query.status_filter
    )
    return json_response(envelope_a([campaign_to_public(row) for row in page.items], page))


async def get_campaign(ctx: RequestContext) -> Response:
    row = await service.get_campaign(ctx.session, ctx.subject, ctx.path_param("campaign_id"))
    return json_response(campaign_to_public(row))


async def update_campaign(ctx: RequestContext) -> Response:
    campaign = await service.update_campaign(
        ctx.session, ctx.subject, ctx.path_param("campaign_id"), ctx.body(CampaignUpdate)
    )
    return json_response(campaign_to_public(campaign))


async def campaign_cost(ctx: RequestContext) -> Response:
    cost = await costs.campaign_cost(
        ctx.session, ctx.subject, ctx.path_param("campaign_id"), ctx.resources.settings
    )
    return json_response(cost.as_dict())


async def delete_campaign(ctx: RequestContext) -> Response:
    await service.delete_campaign(ctx.session, ctx.subject, ctx.path_param("campaign_id"))
    return Response(status_code=204)


CSV_MEDIA_TYPE = "text/csv"


async def tag_campaign_recipients(ctx: RequestContext) -> Response:
    result = await service.tag_recipients(
        ctx.session, ctx.subject, ctx.path_param("campaign_id"), ctx.body(RecipientTagging)
    )
    return json_response(vars(result))


async def export_campaign_recipients(ctx: RequestContext) -> Response:
    campaign = await service.get_campaign(ctx.session, ctx.subject, ctx.path_param("campaign_id"))
    # The request's read ends here; the body is read batch by batch, each in a short session
    # of its own, while the client downloads it.
    resources = ctx.resources
    rows = reports.recipients_csv(lambda: resources.session(writes=False), campaign.id)
    return StreamingResponse(
        rows,
        headers={
            # Set directly: Starlette would append its own charset to a text/* media type.
            "Content-Type": CSV_MEDIA_TYPE + "; charset=utf-8",
            "Content-Disposition": f'attachment; filename="{reports.csv_file_name(campaign.id)}"',
            "X-Content-Type-Options": "nosniff",
        },
    )


Move = Callable[[AsyncSession, Subject, str], Awaitable[Any]]


def _move(name: str, move: Move) -> Handler:
    async def handle(ctx: RequestContext) -> Response:
        campaign = await move(ctx.session, ctx.subject, ctx.path_param("campaign_id"))
        return json_response(campaign_to_public(campaign))

    handle.__name__ = f"{name}_campaign"  # the OpenAPI operationId, unique per route
    return handle


_TAG = "campaigns"


def _action(name: str, move: Move, summary: str) -> Operation:
    return Operation(
        "POST",
        f"/campaigns/{{campaign_id}}/{name}",
        _move(name, move),
        Scope.CAMPAIGNS_MANAGE,
        summary,
        _TAG,
        response_model=CampaignResponse,
        errors=(400, 403, 404),
    )


OPERATIONS = (
    Operation(
        "POST",
        "/campaigns",
        create_campaign,
        Scope.CAMPAIGNS_MANAGE,
        "Create a campaign (draft)",
        _TAG,
        status_code=201,
        request_model=CampaignCreate,
        response_model=CampaignResponse,
        errors=(400, 403, 422),
    ),
    Operation(
        "GET",
        "/campaigns",
        list_campaigns,
        Scope.CAMPAIGNS_MANAGE,
        "List campaigns (newest first; test keys see test-mode campaigns only)",
        _TAG,
        query_model=CampaignPageQuery,
        response_model=CampaignResponse,
        envelope="A",
        errors=(422,),
    ),
    Operation(
        "GET",
        "/campaigns/{campaign_id}",
        get_campaign,
        Scope.CAMPAIGNS_MANAGE,
        "Get a campaign",
        _TAG,
        response_model=CampaignResponse,
        errors=(404,),
    ),
    Operation(
        "PUT",
        "/campaigns/{campaign_id}",
        update_campaign,
        Scope.CAMPAIGNS_MANAGE,
        "Update a draft campaign",
        _TAG,
        request_model=CampaignUpdate,
        response_model=CampaignResponse,
        errors=(400, 403, 404, 422),
    ),
    Operation(
        "DELETE",
        "/campaigns/{campaign_id}",
        delete_campaign,
        Scope.CAMPAIGNS_MANAGE,
        "Delete a draft, completed or cancelled campaign",
        _TAG,
        status_code=204,
        errors=(400, 404),
    ),
    Operation(
        "GET",
        "/campaigns/{campaign_id}/cost",
        campaign_cost,
        Scope.CAMPAIGNS_MANAGE,
        "Estimated cost and cost so far, from the message rate card",
        _TAG,
        response_model=CampaignCostResponse,
        errors=(404,),
    ),
    Operation(
        "GET",
        "/campaigns/{campaign_id}/recipients.csv",
        export_campaign_recipients,
        Scope.CAMPAIGNS_MANAGE,
        "Download the recipient ledger as CSV (streamed, contact id order)",
        _TAG,
        errors=(404,),
        binary_response=(CSV_MEDIA_TYPE,),
    ),
    Operation(
        "POST",
        "/campaigns/{campaign_id}/recipients/tag",
        tag_campaign_recipients,
        Scope.CAMPAIGNS_MANAGE,
        "Retargeting: tag the contacts whose recipient status is one of `statuses`",
        _TAG,
        request_model=RecipientTagging,
        response_model=RecipientTaggingResponse,
        errors=(400, 404, 422),
    ),
    _action(
        "launch",
        service.launch_campaign,
        "Launch a draft: resolve its audience, then schedule it or start sending",
    ),
    _action("pause", service.pause_campaign, "Pause a scheduled or sending campaign"),
    _action("resume", service.resume_campaign, "Resume a paused campaign"),
    _action("cancel", service.cancel_campaign, "Cancel a scheduled, sending or paused campaign"),
)
