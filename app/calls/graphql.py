"""Call log types and fields; each field calls one calls service operation.

`callLogs` pages by number like REST's envelope B. Contact.recentCalls, declared here on the
contacts domain's type (`ContactCalls`), goes through `load_recent_calls`, which batches every
contact of a response into one query.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Any, cast

import strawberry
from graphql import GraphQLError
from strawberry.dataloader import DataLoader
from strawberry.scalars import JSON
from strawberry.types import Info

from app.access.scopes import Scope
from app.agents.graphql import as_agent
from app.agents.repository import AgentRepository
from app.agents.schemas import Agent
from app.calls import analysis, numbers, service, telephony, web
from app.calls.schemas import (
    CALL_LOG,
    DEFAULT_PAGE_SIZE,
    PHONE_NUMBER,
    CallDispatch,
    CallLogListQuery,
    CallLogShape,
    PhoneNumber,
    PhoneNumberAssign,
    WebCallStart,
    call_log_to_public,
)
from app.contacts.graphql import Contact
from app.core.jsonutil import dumps, loads
from app.engine.limits import ConversationLimits
from app.graphql.context import Context
from app.graphql.errors import as_graphql_error, failures
from app.graphql.links import extends
from app.graphql.pagination import Connection
from app.graphql.permissions import requires
from app.graphql.planned import plannable
from app.graphql.resource import DomainMutations, Payload, list_field, node_field
from app.graphql.socket import (
    SUBSCRIPTIONS_OVER_WEBSOCKET,
    LiveEvents,
    SocketContext,
    follow_live,
)
from app.integrations.telephony.base import END_STATUSES
from app.kit.errors import (
    Conflict,
    DomainError,
    InvalidInput,
    InvalidState,
    LiveModeForbidden,
    NotFound,
    RequestValidationFailed,
)
from app.kit.event_stream import PendingRead
from app.kit.validation import parse_model

RECENT_CALLS_LOADER = "calls.recent_by_contact"


AGENTS_LOADER = "calls.agents_by_id"


def agents_loader(context: Context) -> DataLoader[str, Any]:
    """One query for the agents of every call log a response shows."""

    async def load(keys: list[str]) -> list[Any]:
        async with context.db() as session:
            rows = await AgentRepository(session, context.require_subject()).rows_by_ids(keys)
        return [rows.get(key) for key in keys]

    return context.loader(AGENTS_LOADER, load)


async def _agent(root: strawberry.Parent[Any], info: Info[Context, None]) -> Agent | None:
    if root.agent_id is None:
        return None
    row = await agents_loader(info.context).load(root.agent_id)
    return None if row is None else as_agent(row)


@strawberry.type
class CallLog(CallLogShape):
    agent: Agent | None = strawberry.field(
        resolver=_agent,
        extensions=requires(Scope.AGENTS_READ),
        description="The agent of the call; null once deleted (needs agents:read)",
    )


@strawberry.type(description="A numbered page of call logs, as REST's envelope B.")
class CallLogPage:
    total: int = strawberry.field(description="Call logs matching the filters, on all pages")
    page: int
    page_size: int
    items: list[CallLog]


as_call_log = CALL_LOG.serving(CallLog)


def _invalid_argument(exc: RequestValidationFailed) -> GraphQLError:
    """The first refused argument, named as in the schema (pageSize), with pydantic's reason."""
    first = failures(exc)[0]
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

    return context.loader(RECENT_CALLS_LOADER, load)


async def load_recent_calls(context: Context, contact_id: str, limit: int) -> list[CallLog]:
    try:
        service.check_recent_calls_limit(limit)
    except DomainError as exc:
        raise as_graphql_error(exc) from exc
    return await recent_calls_loader(context).load((contact_id, limit))


@extends(Contact)
class ContactCalls(Contact):
    @strawberry.field(
        extensions=requires(Scope.CALLS_READ),
        description="The contact's newest calls first (limit 1 to 20); batched per response.",
    )
    async def recent_calls(self, info: Info[Context, None], limit: int = 5) -> list[CallLog]:
        return await load_recent_calls(info.context, self.id, limit)


PhoneNumberConnection = Connection[PhoneNumber]


def as_phone_number(value: Any) -> PhoneNumber:
    return PHONE_NUMBER.as_graphql(value)


@strawberry.type
class Query:
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
    ) -> CallLogPage | None:
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

    call_log = node_field(Scope.CALLS_READ, service.get_call_log, as_call_log, CallLog)
    phone_numbers = list_field(
        Scope.AGENTS_READ,
        numbers.list_phone_numbers,
        as_phone_number,
        PhoneNumber,
        description="Which agent answers each number's incoming calls",
    )


@strawberry.input(description="POST /api/v1/calls: an outbound call placed by an agent.")
class DispatchCallInput:
    agent_id: strawberry.ID
    to_number: str = strawberry.field(description="E.164")
    from_number: str | None = strawberry.field(
        default=strawberry.UNSET, description="E.164; test-mode calls default to +15005550006"
    )
    metadata: JSON | None = strawberry.field(
        default=strawberry.UNSET,
        description="Free-form; `script` (caller lines) drives a test-mode call's caller",
    )


CALLS = DomainMutations(
    "Call",
    scope=Scope.CALLS_DISPATCH,
    errors=(InvalidInput, NotFound, telephony.ContactRefusesCalls),
    node=CallLog,
    as_node=as_call_log,
    node_field="call_log",
)


@strawberry.input(description="POST /api/v1/calls/web: a browser session with an agent.")
class StartWebCallInput:
    agent_id: strawberry.ID


@strawberry.type(description="Where a browser streams its microphone to talk to the agent.")
class WebCall:
    call_log_id: strawberry.ID
    url: str = strawberry.field(description="The session's websocket URL (ws:// or wss://)")
    token: str = strawberry.field(description="Opens the stream once, until expiresAt")
    expires_at: datetime


START_WEB_CALL_PAYLOAD = CALLS.payload_type(
    "StartWebCallPayload", {"web_call": WebCall}, "The browser session, or why it was refused."
)


CALL_ANALYSIS = DomainMutations(
    "CallAnalysis",
    scope=Scope.CALLS_DISPATCH,
    errors=(InvalidState, NotFound, LiveModeForbidden),
    node=CallLog,
    as_node=as_call_log,
    node_field="call_log",
)


@strawberry.input(description="POST /api/v1/phone-numbers")
class AssignPhoneNumberInput:
    phone_number: str = strawberry.field(description="E.164")
    agent_id: strawberry.ID


PHONE_NUMBERS = DomainMutations(
    "PhoneNumber",
    scope=Scope.AGENTS_WRITE,
    errors=(
        InvalidInput,
        NotFound,
        Conflict,
        LiveModeForbidden,
        numbers.NumberNotVerified,
        numbers.CarrierFailure,
    ),
    node=PhoneNumber,
    as_node=as_phone_number,
)


@strawberry.type
class Mutation:
    @PHONE_NUMBERS.mutation(
        description="Route the number's incoming calls to the agent; a live key's number is "
        "verified with the carrier first."
    )
    async def assign_phone_number(
        self, info: Info[Context, None], input: AssignPhoneNumberInput
    ) -> Payload:
        settings = info.context.resources.settings
        return await PHONE_NUMBERS.save(
            info,
            PhoneNumberAssign,
            input,
            lambda session, subject, data: numbers.assign_phone_number(
                session, subject, data, settings
            ),
        )

    unassign_phone_number = PHONE_NUMBERS.delete_field(numbers.unassign_phone_number)

    @CALL_ANALYSIS.mutation(
        description="POST /api/v1/call-logs/{id}/analyze: run the call's analysis again; "
        "the call log comes back with `analysis.status` `pending`."
    )
    async def analyze_call_log(self, info: Info[Context, None], id: strawberry.ID) -> Payload:
        return await CALL_ANALYSIS.perform(
            info,
            lambda session, subject: analysis.request_analysis(session, subject, id),
            CALL_ANALYSIS.node_answer,
        )

    @CALLS.mutation(
        description="Log an outbound call (in-progress) and place it: test keys on the "
        "simulator, live keys with the carrier."
    )
    async def dispatch_call(self, info: Info[Context, None], input: DispatchCallInput) -> Payload:
        limit = info.context.resources.settings.voice_max_concurrent_calls
        limits = ConversationLimits(info.context.resources)
        return await CALLS.save(
            info,
            CallDispatch,
            input,
            lambda session, subject, data: telephony.dispatch_call(
                session, subject, data, max_live_calls=limit, limits=limits
            ),
        )

    @CALLS.mutation(
        payload=START_WEB_CALL_PAYLOAD,
        description="Start a browser session with an agent (an inbound call log): the "
        "browser streams its microphone to `url` with the single-use `token`.",
    )
    async def start_web_call(self, info: Info[Context, None], input: StartWebCallInput) -> Payload:
        settings = info.context.resources.settings
        public_url = web.public_base_url(info.context.request, settings)

        def answer(started: web.WebCall) -> dict[str, Any]:
            return {
                "web_call": WebCall(
                    call_log_id=strawberry.ID(started.call_log.id),
                    url=started.url,
                    token=started.token,
                    expires_at=started.expires_at,
                )
            }

        return await CALLS.save(
            info,
            WebCallStart,
            input,
            lambda session, subject, data: web.start_web_call(
                session,
                subject,
                data,
                public_url=public_url,
                max_calls=settings.voice_max_concurrent_calls,
                token_seconds=settings.voice_stream_token_seconds,
            ),
            answer=answer,
            payload=START_WEB_CALL_PAYLOAD,
        )


# A call's events on the organization's stream (app/kit/event_stream.py).
CALL_EVENT_TYPES = frozenset(
    {"call.started", "ai.reply.generated", "ai.tool.executed", "agent.handoff", "call.completed"}
)
# The stream is best effort: while nothing arrives, the call is read again this often, so a
# completion the stream missed still ends the subscription.
PROGRESS_RECHECK_SECONDS = 2.0


@strawberry.type(description="One step of a call as it happens.")
class CallProgress:
    type: str = strawberry.field(
        description="`snapshot` (the call as it is, first and after a missed step), then "
        "call.started, ai.reply.generated, ai.tool.executed, agent.handoff, call.completed"
    )
    status: str = strawberry.field(description="The call's status after this step")
    data: JSON = strawberry.field(
        description="The event's data; the call log for snapshot and call.* steps"
    )


def row_id(progress: CallProgress) -> str:
    return str(cast(dict[str, Any], progress.data)["id"])


async def _snapshot(context: SocketContext, call_log_id: str) -> CallProgress:
    async with context.db() as session:
        row = await service.get_call_log(session, context.require_subject(), call_log_id)
    data = loads(dumps(call_log_to_public(row)))  # datetimes as the event JSON has them
    return CallProgress(type="snapshot", status=row.status, data=data)


def _progress(
    context: SocketContext, stream: LiveEvents, first: CallProgress
) -> AsyncGenerator[CallProgress, None]:
    organization_id = context.require_subject().organization_id
    return follow_live(stream, _steps(context, stream, first), organization_id)


async def _steps(
    context: SocketContext, stream: LiveEvents, first: CallProgress
) -> AsyncGenerator[CallProgress, None]:
    """`first`, then the call's events from `stream` (subscribed before `first` was read, so
    no step in between is lost), until it ends. While the stream is silent the call is read
    again every PROGRESS_RECHECK_SECONDS, so an end the stream missed still ends it."""
    call_log_id = row_id(first)
    # The call's mode, not the credential's: a live key may follow a test-mode call.
    livemode = cast(dict[str, Any], first.data)["livemode"]
    status = first.status
    reads = PendingRead(stream)
    try:
        yield first
        if status in END_STATUSES:
            return
        while True:
            body = await reads.next(PROGRESS_RECHECK_SECONDS)
            if body is None:
                snapshot = await _snapshot(context, call_log_id)
                if snapshot.status in END_STATUSES:
                    yield snapshot
                    return
                continue
            data: dict[str, Any] = body.get("data") or {}
            if (
                body.get("livemode") is not livemode
                or body.get("type") not in CALL_EVENT_TYPES
                or call_log_id not in (data.get("id"), data.get("call_log_id"))
            ):
                continue
            await context.recheck()
            if body["type"].startswith("call."):
                status = data["status"]
            yield CallProgress(type=body["type"], status=status, data=cast(JSON, data))
            if body["type"] == "call.completed":
                return
    finally:
        await reads.close()


@strawberry.type
class Subscription:
    @strawberry.subscription(
        extensions=requires(Scope.CALLS_READ),
        description="A call's steps as they happen, from its current state until it ends.",
    )
    async def call_progress(
        self, info: Info[Context, None], id: strawberry.ID
    ) -> AsyncGenerator[CallProgress, None]:
        # Not a generator itself: an unknown id is refused before the subscription starts.
        context = info.context
        if not isinstance(context, SocketContext):
            raise GraphQLError(SUBSCRIPTIONS_OVER_WEBSOCKET, extensions={"code": "bad_request"})
        subject = context.require_subject()
        # Subscribed first, then the snapshot: a step taken while it is read is not lost.
        stream = LiveEvents(context, subject)
        try:
            await stream.subscribed()
            first = await _snapshot(context, id)
        except BaseException as exc:
            await stream.aclose()
            if isinstance(exc, DomainError):
                raise as_graphql_error(exc) from exc
            raise
        return _progress(context, stream, first)
