"""Login, the caller's identity, and API key management for organization users."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import strawberry
from strawberry.dataloader import DataLoader
from strawberry.types import Info

from app.access.scopes import Scope
from app.auth import service as auth_service
from app.graphql.context import Context
from app.graphql.errors import as_graphql_error
from app.graphql.pagination import PageInfo, cursor_params, page_info
from app.graphql.permissions import requires
from app.graphql.resource import Described, DomainMutations, Payload
from app.kit.errors import DomainError, InvalidInput, InvalidLogin, NotFound, RateLimited
from app.kit.ratelimit import RateLimit
from app.organizations import repository as org_repository
from app.organizations import service as org_service

# Password guessing is slowed per email address, whatever the caller's IP.
LOGIN_LIMIT = RateLimit(limit=10, period=60)


@strawberry.type
class User:
    id: strawberry.ID
    organization_id: str
    email: str
    created_at: datetime


def user_loader(context: Context) -> DataLoader[str, User | None]:
    """Batches every `createdBy` of a key list into one query."""

    async def load(ids: list[str]) -> list[User | None]:
        subject = context.require_subject()
        async with context.db() as session:
            users = await org_repository.users_by_ids(session, subject.organization_id, ids)
        by_id: dict[str, Any] = {user.id: user for user in users}
        return [by_id.get(user_id) for user_id in ids]

    return context.loader("user", load)


@strawberry.type
class ApiKey:
    id: strawberry.ID
    name: str
    display_prefix: str = strawberry.field(description="First characters of the key")
    scopes: list[str]
    livemode: bool
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    created_at: datetime
    created_by_user_id: strawberry.Private[str | None]

    @strawberry.field
    async def created_by(self, info: Info[Context, None]) -> User | None:
        if self.created_by_user_id is None:
            return None
        return await user_loader(info.context).load(self.created_by_user_id)


def as_api_key(value: Any) -> ApiKey:
    return ApiKey(
        id=value.id,
        name=value.name,
        display_prefix=value.display_prefix,
        scopes=list(value.scopes),
        livemode=value.livemode,
        expires_at=value.expires_at,
        revoked_at=value.revoked_at,
        last_used_at=value.last_used_at,
        created_at=value.created_at,
        created_by_user_id=value.created_by_user_id,
    )


@strawberry.type
class ApiKeyConnection:
    nodes: list[ApiKey]
    page_info: PageInfo
    total_count: int


@strawberry.type
class Viewer:
    organization_id: str
    principal_id: str
    principal_type: str
    scopes: list[str]
    livemode: bool


@strawberry.input
class CreateApiKeyInput:
    name: str
    scopes: list[str]
    livemode: bool = False
    expires_at: datetime | None = None


AUTH = DomainMutations(
    "Auth",
    scope=Scope.FULL_ACCESS,
    errors=(InvalidInput, NotFound, InvalidLogin, RateLimited),
)
LoginPayload = AUTH.payload_type("LoginPayload", {"token": str, "expires_in": int, "user": User})
CreateApiKeyPayload = AUTH.payload_type(
    "CreateApiKeyPayload",
    {"api_key": ApiKey, "secret": Described(str, "The full key: shown this once, never again")},
)
ApiKeyPayload = AUTH.payload_type("ApiKeyPayload", {"api_key": ApiKey})


@strawberry.type
class Query:
    @strawberry.field
    def viewer(self, info: Info[Context, None]) -> Viewer | None:
        subject = info.context.subject
        if subject is None:
            return None
        return Viewer(
            organization_id=subject.organization_id,
            principal_id=subject.principal_id,
            principal_type=subject.principal_type.value,
            scopes=sorted(scope.value for scope in subject.scopes),
            livemode=subject.livemode,
        )

    @strawberry.field(extensions=requires(Scope.FULL_ACCESS))
    async def api_keys(
        self, info: Info[Context, None], first: int | None = None, after: str | None = None
    ) -> ApiKeyConnection | None:
        context = info.context
        try:
            subject = context.require_user()
            params = cursor_params(first, after, None, None)
            async with context.db() as session:
                page = await auth_service.list_api_keys(session, subject, params)
        except DomainError as exc:
            raise as_graphql_error(exc) from exc
        nodes = [as_api_key(row) for row in page.items]
        return ApiKeyConnection(
            nodes=nodes,
            page_info=page_info(page, [str(node.id) for node in nodes], False),
            total_count=page.total_count,
        )


@strawberry.type
class Mutation:
    @AUTH.mutation(payload=LoginPayload, public=True)
    async def login(self, info: Info[Context, None], email: str, password: str) -> Payload:
        context = info.context
        resources = context.resources
        try:
            decision = await resources.rate_limiter.hit(
                f"login:{email.strip().lower()}", LOGIN_LIMIT
            )
            if not decision.allowed:
                raise RateLimited(decision.retry_after)
            async with context.db() as session:
                result = await org_service.login(
                    session,
                    email,
                    password,
                    secret_key=resources.secret_key,
                    ttl_seconds=resources.settings.jwt_ttl_seconds,
                )
        except DomainError as exc:
            return LoginPayload(errors=AUTH.errors(exc))
        user = result.user
        return LoginPayload(
            token=result.token,
            expires_in=result.expires_in,
            user=User(
                id=strawberry.ID(user.id),
                organization_id=user.organization_id,
                email=user.email,
                created_at=user.created_at,
            ),
        )

    @AUTH.mutation(payload=CreateApiKeyPayload)
    async def create_api_key(self, info: Info[Context, None], input: CreateApiKeyInput) -> Payload:
        user = info.context.require_user()
        return await AUTH.perform(
            info,
            lambda session, _subject: auth_service.create_api_key(
                session,
                user.organization_id,
                name=input.name,
                scopes=input.scopes,
                secret_key=info.context.resources.secret_key,
                livemode=input.livemode,
                expires_at=input.expires_at,
                created_by_user_id=user.user_id,
            ),
            lambda created: {"api_key": as_api_key(created.key), "secret": created.secret},
            payload=CreateApiKeyPayload,
        )

    @AUTH.mutation(payload=ApiKeyPayload)
    async def revoke_api_key(self, info: Info[Context, None], id: strawberry.ID) -> Payload:
        user = info.context.require_user()
        return await AUTH.perform(
            info,
            lambda session, _subject: auth_service.revoke_api_key(
                session, user.organization_id, id
            ),
            lambda key: {"api_key": as_api_key(key)},
            payload=ApiKeyPayload,
        )
