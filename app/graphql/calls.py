"""Call log types and fields; each field calls one calls service operation.

`callLogs` pages by number like REST's envelope B. Contact.recentCalls (app/graphql/contacts.py)
goes through `load_recent_calls`, which batches every contact of a response into one query.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import strawberry
from graphql import GraphQLError
from strawberry.dataloader import DataLoader
from strawberry.types import Info

from app.auth.scopes import Scope
from app.calls import service
from app.calls.schemas import DEFAULT_PAGE_SIZE, CallLogListQuery
from app.graphql.context import Context
from app.graphql.errors import as_graphql_error, user_errors
from app.graphql.permissions import requires
from app.graphql.planned import plannable
from app.kit.errors import DomainError, NotFound, RequestValidationFailed
from app.kit.validation import parse_model

RECENT_CALLS_LOADER = "calls.recent_by_contact"


@strawberry.type(description="One turn of a call's transcript.")
class TranscriptSegment:
    speaker: str = strawberry.field(description="`agent` or `caller`")
    text: str
    timestamp: float = strawberry.field(description="Seconds from the start of the call")


def _transcript(root: strawberry.Parent[Any]) -> list[TranscriptSegment]:
    return [
        TranscriptSegment(
            speaker=segment["speaker"], text=segment["text"], timestamp=segment["timestamp"]
        )
        for segment in root.transcript or ()
    ]


@strawberry.type
class CallLog:
    id: strawberry.ID
    organization_id: str
    call_id: str = strawberry.field(description="Carrier or gateway session identifier")
    agent_id: str | None
    chat_phone_number_id: str | None
    phone_number_id: str | None
    contact_id: str | None
    from_number: str
    to_number: str
    direction: str = strawberry.field(description="`inbound` or `outbound`")
    status: str = strawberry.field(
        description="`completed`, `in-progress`, `busy`, `failed` or `no-answer`"
    )
    duration_seconds: int
    started_at: datetime
    ended_at: datetime | None
    recording_url: str | None
    transcript: list[TranscriptSegment] = strawberry.field(resolver=_transcript)
    summary: str | None
    cost: float = strawberry.field(description="USD")
    livemode: bool
    created_at: datetime
    updated_at: datetime


@strawberry.type(description="A numbered page of call logs, as REST's envelope B.")
class CallLogPage:
    total: int = strawberry.field(description="Call logs matching the filters, on all pages")
    page: int
    page_size: int
    items: list[CallLog]


def as_call_log(value: Any) -> CallLog:
    # Rows carry the same attributes as the type; no copy is needed.
    return cast(CallLog, value)


def _invalid_argument(exc: RequestValidationFailed) -> GraphQLError:
    """The first refused argument, named as in the schema (pageSize), with pydantic's reason."""
    first = user_errors(exc)[0]
    return GraphQLError(
        f"{first.field}: {first.message}" if first.field else first.message,
        extensions={"code": "invalid_input", "field": first.field},
    )


def recent_calls_loader(context: Context) -> DataLoader[tuple[str, int], list[CallLog]]:
    """One query for the recent calls of every contact a response shows (keys: id, limit)."""

    async def load(keys: list[tuple[str, int]]) -> list[list[CallLog]]:
        # Aliases may ask different limits: fetch the largest for all, then cut per key.
        largest = max(limit for _contact_id, limit in keys)
        async with context.db() as session:
            by_contact = await service.recent_calls_by_contact(
                session,
                context.require_subject(),
                [contact_id for contact_id, _limit in keys],
                largest,
            )
        return [
            [as_call_log(row) for row in by_contact.get(contact_id, [])[:limit]]
            for contact_id, limit in keys
        ]

    loader = context.loaders.get(RECENT_CALLS_LOADER)
    if loader is None:
        loader = context.loaders[RECENT_CALLS_LOADER] = DataLoader(load_fn=load)
    return cast(DataLoader[tuple[str, int], list[CallLog]], loader)


async def load_recent_calls(context: Context, contact_id: str, limit: int) -> list[CallLog]:
    try:
        service.check_recent_calls_limit(limit)
    except DomainError as exc:
        raise as_graphql_error(exc) from exc
    return await recent_calls_loader(context).load((contact_id, limit))


@strawberry.type
class CallLogQuery:
    @strawberry.field(extensions=requires(Scope.CALLS_READ))
    @plannable
    async def call_logs(
        self,
        info: Info[Context, None],
        page: int = 1,
        page_size: int = DEFAULT_PAGE_SIZE,
        direction: str | None = None,
        status: str | None = None,
        search: str | None = None,
    ) -> CallLogPage:
        context = info.context
        arguments = {
            "page": page,
            "page_size": page_size,
            "direction": direction,
            "status": status,
            "search": search,
        }
        try:
            query = parse_model(CallLogListQuery, arguments, "input")
            async with context.db() as session:
                result = await service.list_call_logs(session, context.require_subject(), query)
        except RequestValidationFailed as exc:
            raise _invalid_argument(exc) from exc
        except DomainError as exc:
            raise as_graphql_error(exc) from exc
        return CallLogPage(
            total=result.total,
            page=query.page,
            page_size=query.page_size,
            items=[as_call_log(row) for row in result.items],
        )

    @strawberry.field(extensions=requires(Scope.CALLS_READ))
    @plannable
    async def call_log(self, info: Info[Context, None], id: strawberry.ID) -> CallLog | None:
        context = info.context
        try:
            async with context.db() as session:
                return as_call_log(
                    await service.get_call_log(session, context.require_subject(), id)
                )
        except NotFound:
            return None
