"""/api/v1/templates: routes → templates service → the JSON shapes of docs/api.md."""

from __future__ import annotations

from starlette.responses import Response

from app.access.scopes import Scope
from app.kit.pagination import PageParams, envelope_a
from app.templates import service
from app.templates.schemas import (
    LibraryCreate,
    LibraryQuery,
    LibraryResponse,
    SyncResponse,
    TemplateCreate,
    TemplatePageQuery,
    TemplateResponse,
    TemplateSync,
    TemplateValidate,
    ValidationResponse,
    template_to_public,
)
from rest_compat.endpoint import Operation, RequestContext, json_response


async def create_template(ctx: RequestContext) -> Response:
    template = await service.create_template(ctx.session, ctx.subject, ctx.body(TemplateCreate))
    return json_response(template_to_public(template), status_code=201)


async def list_templates(ctx: RequestContext) -> Response:
    query = ctx.query(TemplatePageQuery)
    page = await service.list_templates(
        ctx.session, ctx.subject, PageParams(query.page, query.limit)
    )
    return json_response(envelope_a([template_to_public(row) for row in page.items], page))


async def get_template(ctx: RequestContext) -> Response:
    row = await service.get_template(ctx.session, ctx.subject, ctx.path_param("template_id"))
    return json_response(template_to_public(row))


async def delete_template(ctx: RequestContext) -> Response:
    await service.delete_template(
        ctx.session, ctx.subject, ctx.resources.settings, ctx.path_param("template_id")
    )
    return Response(status_code=204)


async def sync_templates(ctx: RequestContext) -> Response:
    data = ctx.body(TemplateSync)
    result = await service.sync_templates(
        ctx.session, ctx.subject, ctx.resources.settings, str(data.channel_id)
    )
    return json_response(result.as_dict())


async def browse_library(ctx: RequestContext) -> Response:
    entries = await service.browse_library(
        ctx.session, ctx.subject, ctx.resources.settings, ctx.query(LibraryQuery)
    )
    return json_response({"data": entries})


async def create_from_library(ctx: RequestContext) -> Response:
    template = await service.create_from_library(
        ctx.session,
        ctx.subject,
        ctx.resources.settings,
        ctx.path_param("template_id"),
        ctx.body(LibraryCreate),
    )
    return json_response(template_to_public(template), status_code=201)


async def validate_template(ctx: RequestContext) -> Response:
    violations = service.validate_content(ctx.body(TemplateValidate))
    return json_response({"valid": not violations, "violations": [v.as_dict() for v in violations]})


_TAG = "templates"
OPERATIONS = (
    Operation(
        "POST",
        "/templates",
        create_template,
        Scope.FULL_ACCESS,
        "Create a message template (stored PENDING, then submitted to the platform)",
        _TAG,
        status_code=201,
        request_model=TemplateCreate,
        response_model=TemplateResponse,
        errors=(400, 403, 409, 422),
    ),
    Operation(
        "GET",
        "/templates",
        list_templates,
        Scope.FULL_ACCESS,
        "List message templates (newest first; test keys see test-mode templates only)",
        _TAG,
        query_model=TemplatePageQuery,
        response_model=TemplateResponse,
        envelope="A",
        errors=(422,),
    ),
    Operation(
        "POST",
        "/templates/sync",
        sync_templates,
        Scope.FULL_ACCESS,
        "Pull every template of the channel's business account from the platform and upsert it",
        _TAG,
        request_model=TemplateSync,
        response_model=SyncResponse,
        errors=(400, 403, 422, 502),
    ),
    Operation(
        "POST",
        "/templates/validate",
        validate_template,
        Scope.FULL_ACCESS,
        "Check a template against the platform's content rules without storing it",
        _TAG,
        request_model=TemplateValidate,
        response_model=ValidationResponse,
        errors=(422,),
    ),
    Operation(
        "GET",
        "/templates/library",
        browse_library,
        Scope.FULL_ACCESS,
        "Browse the platform's template library",
        _TAG,
        query_model=LibraryQuery,
        response_model=LibraryResponse,
        errors=(400, 422, 502),
    ),
    Operation(
        "POST",
        "/templates/library/{template_id}/create",
        create_from_library,
        Scope.FULL_ACCESS,
        "Create a template from a library entry (by id or name)",
        _TAG,
        status_code=201,
        request_model=LibraryCreate,
        response_model=TemplateResponse,
        errors=(400, 403, 404, 409, 422, 502),
    ),
    Operation(
        "GET",
        "/templates/{template_id}",
        get_template,
        Scope.FULL_ACCESS,
        "Get a message template",
        _TAG,
        response_model=TemplateResponse,
        errors=(403, 404),
    ),
    Operation(
        "DELETE",
        "/templates/{template_id}",
        delete_template,
        Scope.FULL_ACCESS,
        "Delete a message template, here and on the platform",
        _TAG,
        status_code=204,
        errors=(403, 404, 502),
    ),
)
