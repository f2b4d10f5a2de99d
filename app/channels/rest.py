"""/api/v1/channels: routes → channels service → the JSON shapes of docs/api.md."""

from __future__ import annotations

from starlette.responses import Response

from app.access.scopes import Scope
from app.channels import service
from app.channels.schemas import (
    ChannelCreate,
    ChannelResponse,
    ChannelUpdate,
    channel_to_public,
)
from app.kit.errors import NotFound
from app.kit.http_errors import ErrorStyle, error_response
from app.kit.queries import CursorQuery
from rest_compat.endpoint import Operation, RequestContext, json_response
from rest_compat.resource import delete_handler, get_handler, list_handler


async def create_channel(ctx: RequestContext) -> Response:
    channel = await service.create_channel(
        ctx.session,
        ctx.subject,
        ctx.body(ChannelCreate),
        service.access_token_box(ctx.resources.secret_key),
        ctx.resources.settings,
    )
    return json_response(channel_to_public(channel), status_code=201)


list_channels = list_handler(service.list_channels, channel_to_public)


get_channel = get_handler(service.get_channel, "channel_id", channel_to_public)


async def update_channel(ctx: RequestContext) -> Response:
    try:
        channel = await service.update_channel(
            ctx.session, ctx.subject, ctx.path_param("channel_id"), ctx.body(ChannelUpdate)
        )
    except NotFound as exc:
        if exc.resource != service.AGENT:
            raise
        # An unknown agent (or another organization's) answers as the agents routes do.
        return error_response(exc, ErrorStyle.AGENT)
    return json_response(channel_to_public(channel))


delete_channel = delete_handler(service.delete_channel, "channel_id")


_TAG = "channels"
OPERATIONS = (
    Operation(
        "POST",
        "/channels",
        create_channel,
        Scope.FULL_ACCESS,
        "Register a messaging phone number (the access token is stored encrypted, never shown;"
        " a live key's number is verified with the platform first)",
        _TAG,
        status_code=201,
        request_model=ChannelCreate,
        response_model=ChannelResponse,
        errors=(400, 409, 422, 502),
    ),
    Operation(
        "GET",
        "/channels",
        list_channels,
        Scope.FULL_ACCESS,
        "List channels (newest first; test keys see test-mode channels only)",
        _TAG,
        query_model=CursorQuery,
        response_model=ChannelResponse,
        envelope="C",
        errors=(400, 422),
    ),
    Operation(
        "GET",
        "/channels/{channel_id}",
        get_channel,
        Scope.FULL_ACCESS,
        "Get a channel",
        _TAG,
        response_model=ChannelResponse,
        errors=(404,),
    ),
    Operation(
        "PUT",
        "/channels/{channel_id}",
        update_channel,
        Scope.FULL_ACCESS,
        "Update a channel's name, send budget or answering agent (fields present replace"
        " stored ones)",
        _TAG,
        request_model=ChannelUpdate,
        response_model=ChannelResponse,
        errors=(400, 404, 422),
        # An unknown channel is `{detail}`; an unknown agent_id the agents' 404 body.
        error_styles=((404, ErrorStyle.DETAIL), (404, ErrorStyle.AGENT)),
    ),
    Operation(
        "DELETE",
        "/channels/{channel_id}",
        delete_channel,
        Scope.FULL_ACCESS,
        "Delete a channel",
        _TAG,
        status_code=204,
        errors=(404,),
    ),
)
