"""Template types and fields; each field calls one templates service operation.

Mutations answer typed errors (`errors: [UserError]`) for every expected failure: bad input,
an unknown channel, a platform refusal. Template status changes reach the `events`
subscription as `template.status_updated` / `template.quality_updated`.
"""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

from app.access.scopes import Scope
from app.channels.service import PlatformFailure
from app.graphql.context import Context
from app.graphql.errors import as_graphql_error
from app.graphql.pagination import numbered_page
from app.graphql.permissions import requires
from app.graphql.resource import DomainMutations, Payload, node_or_none
from app.kit.errors import Conflict, DomainError, InvalidInput, LiveModeForbidden, NotFound
from app.kit.pagination import PageParams
from app.kit.validation import parse_model
from app.templates import service
from app.templates.schemas import (
    TEMPLATE,
    LibraryCreate,
    LibraryQuery,
    MessageTemplate,
    TemplateCreate,
    TemplatePageQuery,
    TemplateSync,
    TemplateValidate,
)


def as_template(row: Any) -> MessageTemplate:
    return TEMPLATE.as_graphql(row)


@strawberry.type(description="A page of templates (page numbers, as REST's envelope A).")
class MessageTemplatePage:
    items: list[MessageTemplate]
    total: int
    page: int
    limit: int
    has_more: bool


@strawberry.type(description="A ready-made template of the platform's library.")
class LibraryTemplate:
    id: str
    name: str
    language: str
    category: str
    topic: str
    usecase: str
    industry: str
    header: JSON | None
    body: str
    body_params: list[str]
    buttons: JSON


@strawberry.type
class TemplateRuleViolation:
    rule: str
    message: str


TEMPLATES = DomainMutations(
    "MessageTemplate",
    scope=Scope.FULL_ACCESS,
    errors=(
        InvalidInput,
        NotFound,
        Conflict,
        service.ChannelNotFound,
        service.AccessTokenUnavailable,
        PlatformFailure,
        LiveModeForbidden,
    ),
    node=MessageTemplate,
    as_node=as_template,
    node_field="template",
)
SYNC_PAYLOAD = TEMPLATES.payload_type(
    "SyncTemplatesPayload", {"success": bool, "message": str, "synced_count": int}
)
VALIDATE_PAYLOAD = TEMPLATES.payload_type(
    "ValidateTemplatePayload", {"valid": bool, "violations": list[TemplateRuleViolation]}
)


@strawberry.input
class TemplateContentInput:
    name: str
    language: str
    category: str
    components: JSON


@strawberry.input
class TemplateCreateInput:
    channel_id: strawberry.ID
    name: str
    language: str
    category: str
    components: JSON


@strawberry.input
class TemplateSyncInput:
    channel_id: strawberry.ID


@strawberry.input
class TemplateFromLibraryInput:
    channel_id: strawberry.ID
    name: str
    language: str | None = strawberry.UNSET
    body_params: list[str] | None = strawberry.UNSET


@strawberry.type
class Query:
    @strawberry.field(extensions=requires(Scope.FULL_ACCESS), description="Newest first.")
    async def message_templates(
        self, info: Info[Context, None], page: int = 1, limit: int = 100
    ) -> MessageTemplatePage | None:
        context = info.context
        try:
            query = parse_model(TemplatePageQuery, {"page": page, "limit": limit}, "input")
            params = PageParams(query.page, query.limit)
            async with context.db() as session:
                found = await service.list_templates(session, context.require_subject(), params)
        except DomainError as exc:
            raise as_graphql_error(exc) from exc
        return numbered_page(MessageTemplatePage, found, as_template)

    @strawberry.field(extensions=requires(Scope.FULL_ACCESS))
    async def message_template(
        self, info: Info[Context, None], id: strawberry.ID
    ) -> MessageTemplate | None:
        return await node_or_none(
            info.context,
            lambda session, subject: service.get_template(session, subject, id),
            as_template,
        )

    @strawberry.field(
        extensions=requires(Scope.FULL_ACCESS),
        description="Browse the platform's template library with the channel's access token.",
    )
    async def template_library(
        self,
        info: Info[Context, None],
        channel_id: strawberry.ID,
        search: str | None = None,
        topic: str | None = None,
        usecase: str | None = None,
        industry: str | None = None,
        language: str | None = None,
        name: str | None = None,
    ) -> list[LibraryTemplate] | None:
        context = info.context
        try:
            query = parse_model(
                LibraryQuery,
                {
                    "channel_id": channel_id,
                    "search": search,
                    "topic": topic,
                    "usecase": usecase,
                    "industry": industry,
                    "language": language,
                    "name": name,
                },
                "input",
            )
            async with context.db() as session:
                entries = await service.browse_library(
                    session, context.require_subject(), context.resources.settings, query
                )
        except DomainError as exc:
            raise as_graphql_error(exc) from exc
        return [LibraryTemplate(**entry) for entry in entries]


@strawberry.type
class Mutation:
    @TEMPLATES.mutation(description="Stored PENDING, then submitted to the platform.")
    async def create_template(
        self, info: Info[Context, None], input: TemplateCreateInput
    ) -> Payload:
        return await TEMPLATES.save(info, TemplateCreate, input, service.create_template)

    @TEMPLATES.mutation()
    async def create_template_from_library(
        self,
        info: Info[Context, None],
        library_template_id: str,
        input: TemplateFromLibraryInput,
    ) -> Payload:
        settings = info.context.resources.settings
        return await TEMPLATES.save(
            info,
            LibraryCreate,
            input,
            lambda session, subject, data: service.create_from_library(
                session, subject, settings, library_template_id, data
            ),
        )

    @TEMPLATES.mutation(payload=SYNC_PAYLOAD)
    async def sync_templates(self, info: Info[Context, None], input: TemplateSyncInput) -> Payload:
        settings = info.context.resources.settings
        return await TEMPLATES.save(
            info,
            TemplateSync,
            input,
            lambda session, subject, data: service.sync_templates(
                session, subject, settings, str(data.channel_id)
            ),
            answer=lambda result: {
                "success": result.success,
                "message": result.message,
                "synced_count": result.synced_count,
            },
            payload=SYNC_PAYLOAD,
        )

    @TEMPLATES.mutation(
        payload=VALIDATE_PAYLOAD,
        description="Check a template against the platform's content rules; nothing is stored.",
    )
    async def validate_template(
        self, info: Info[Context, None], input: TemplateContentInput
    ) -> Payload:
        async def check(_session: Any, _subject: Any, data: TemplateValidate) -> list[Any]:
            return service.validate_content(data)

        return await TEMPLATES.save(
            info,
            TemplateValidate,
            input,
            check,
            answer=lambda violations: {
                "valid": not violations,
                "violations": [
                    TemplateRuleViolation(rule=v.rule, message=v.message) for v in violations
                ],
            },
            payload=VALIDATE_PAYLOAD,
        )

    @TEMPLATES.mutation(payload=TEMPLATES.delete_payload)
    async def delete_template(self, info: Info[Context, None], id: strawberry.ID) -> Payload:
        settings = info.context.resources.settings
        return await TEMPLATES.delete(
            info,
            id,
            lambda session, subject, template_id: service.delete_template(
                session, subject, settings, template_id
            ),
        )
