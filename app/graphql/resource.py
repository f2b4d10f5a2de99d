"""The resolver glue every domain shares: one node by id, and mutations declared once.

A domain states its mutations once with `DomainMutations` (in the spirit of Saleor's
BaseMutation): the scope they require, the domain errors their payloads may carry, and the
node their payload returns. The kit makes the schema types from that (`<Name>ErrorCode`,
`<Name>Error`, `<Name>Payload`, `Delete<Name>Payload`) and runs the common steps (parse the
input with the REST body's pydantic model, one transaction, domain errors into the payload),
so each create/update/delete resolver is one call:

    CONTACTS = DomainMutations("Contact", scope=Scope.FULL_ACCESS, errors=(InvalidInput,
                               NotFound), node=Contact, as_node=as_contact)

    @CONTACTS.mutation()
    async def create_contact(self, info: Info[Context, None], input: ContactCreateInput) -> Payload:
        return await CONTACTS.save(info, ContactCreate, input, service.create_contact)

A root field that can answer with a GraphQL error (scope, credentials) is nullable, so one
refused field of a document leaves the others' data in place.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import Any, Optional, TypeVar, cast

import strawberry
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession
from strawberry.types import Info

from app.access.scopes import Scope
from app.access.subject import Subject
from app.graphql.context import Context
from app.graphql.errors import as_graphql_error, failure_as_graphql_error, failures
from app.graphql.inputs import provided
from app.graphql.pagination import Connection, ListPage, connection
from app.graphql.permissions import requires
from app.graphql.planned import plannable
from app.kit.errors import DomainError, NotFound, RequestValidationFailed
from app.kit.validation import parse_model

NodeT = TypeVar("NodeT")
ResultT = TypeVar("ResultT")
ModelT = TypeVar("ModelT", bound=BaseModel)
# A payload type the kit made; resolvers return it (the schema type is set by `mutation`).
Payload = Any
Work = Callable[[AsyncSession, Subject], Awaitable[ResultT]]

# The validation types bad input can produce (pydantic's `type`, as REST's 422 bodies carry
# them, and the kit's own `nul_character`); every domain's error-code enum lists them after
# its own codes. A type missing here is answered as a GraphQL error instead of a payload error.
VALIDATION_CODES: tuple[str, ...] = (
    RequestValidationFailed.code,
    "missing",
    "nul_character",
    "value_error",
    "assertion_error",
    "extra_forbidden",
    "string_type",
    "string_too_short",
    "string_too_long",
    "string_pattern_mismatch",
    "string_blank",
    "list_type",
    "too_short",
    "too_long",
    "dict_type",
    "model_type",
    "model_attributes_type",
    "int_type",
    "int_parsing",
    "int_from_float",
    "float_type",
    "float_parsing",
    "finite_number",
    "bool_type",
    "bool_parsing",
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "multiple_of",
    "enum",
    "literal_error",
    "uuid_type",
    "uuid_parsing",
    "url_type",
    "url_parsing",
    "url_scheme",
    "url_too_long",
    "datetime_type",
    "datetime_parsing",
    "datetime_from_date_parsing",
    "timezone_aware",
    "timezone_naive",
    "json_invalid",
    "json_type",
)

_make_enum = cast(Any, Enum)  # the functional API, with computed members


@dataclass(frozen=True, slots=True)
class Described:
    """A payload field with a description: `secret=Described(str, "Shown once")`."""

    annotation: Any
    description: str


def list_field(
    scope: Scope,
    list_page: ListPage,
    as_node: Callable[[Any], Any],
    node: type,
    *,
    description: str | None = None,
) -> Any:
    """A root `<nodes>(first, after, last, before)` connection field: `list_page` is the
    service call that reads one page, `as_node` turns a row into a node. Plannable."""

    @plannable
    async def resolve(
        self: Any,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> Any:
        return await connection(info.context, (first, after, last, before), list_page, as_node)

    return strawberry.field(
        resolver=resolve,
        extensions=requires(scope),
        description=description,
        graphql_type=Optional[Connection[node]],  # type: ignore[valid-type]  # noqa: UP045
    )


def node_field(
    scope: Scope,
    get: Callable[[AsyncSession, Subject, str], Awaitable[Any]],
    as_node: Callable[[Any], Any],
    node: type,
) -> Any:
    """A root `<node>(id)` field: the node, or null when the organization has none with that
    id (see `node_or_none`). Plannable."""

    @plannable
    async def resolve(self: Any, info: Info[Context, None], id: strawberry.ID) -> Any:
        return await node_or_none(
            info.context, lambda session, subject: get(session, subject, id), as_node
        )

    return strawberry.field(
        resolver=resolve,
        extensions=requires(scope),
        graphql_type=Optional[node],  # noqa: UP045 (a runtime type expression)
    )


async def node_or_none(
    context: Context,
    read: Callable[[AsyncSession, Subject], Awaitable[Any]],
    as_node: Callable[[Any], NodeT],
) -> NodeT | None:
    """A `<node>(id:)` field: the node, null when the organization has none with that id,
    any other domain error (a test key asking for a live resource) a coded GraphQL error."""
    try:
        async with context.db() as session:
            return as_node(await read(session, context.require_subject()))
    except NotFound:
        return None
    except DomainError as exc:
        raise as_graphql_error(exc) from exc


class DomainMutations:
    """One domain's mutations: scope, error codes and node payload, declared once."""

    def __init__(
        self,
        name: str,
        *,
        scope: Scope,
        errors: Iterable[type[DomainError]],
        node: type | None = None,
        as_node: Callable[[Any], Any] | None = None,
        node_field: str | None = None,
    ) -> None:
        self.name = name
        self.scope = scope
        codes = dict.fromkeys([*(error.code for error in errors), *VALIDATION_CODES])
        self.error_code: Any = strawberry.enum(
            _make_enum(f"{name}ErrorCode", [(code, code) for code in codes]),
            description=f"The codes of {name}Error: the domain's codes first, then the "
            "validation types of bad input (as in REST's 422 `type`).",
        )
        self._codes: dict[str, Any] = {member.value: member for member in self.error_code}
        self.error: Any = _object_type(
            f"{name}Error",
            {"code": self.error_code, "message": str},
            {"field": Described(str, "The input field at fault, named as in the schema")},
            "An expected failure of a mutation, safe to show to the user.",
        )
        self._as_node = as_node
        self.node_field = node_field or _snake(name)
        self._node = node

    @cached_property
    def payload(self) -> Any:
        """`<Name>Payload { <node> errors }`, the answer of create and update."""
        if self._node is None:
            raise TypeError(f"DomainMutations({self.name!r}) has no node type")
        return self.payload_type(f"{self.name}Payload", {self.node_field: self._node})

    @cached_property
    def delete_payload(self) -> Any:
        return self.payload_type(f"Delete{self.name}Payload", {"deleted_id": strawberry.ID})

    def payload_type(
        self, name: str, fields: dict[str, Any], description: str | None = None
    ) -> Any:
        """A payload: `fields` (null when the mutation failed; a `Described` carries a
        description), then `errors`."""
        return _object_type(name, {}, fields, description, errors=list[self.error])  # type: ignore[name-defined]

    def mutation(
        self, *, payload: Any = None, description: str | None = None, public: bool = False
    ) -> Any:
        """The field decorator: the domain's scope, and the payload as the field's type
        (nullable, since a missing scope answers a GraphQL error). `public`: no scope needed
        and every failure is in the payload, so the field stays non-null."""
        graphql_type = self.payload if payload is None else payload
        if public:
            return strawberry.mutation(description=description, graphql_type=graphql_type)
        return strawberry.mutation(
            extensions=requires(self.scope),
            description=description,
            graphql_type=Optional[graphql_type],  # noqa: UP045 (a runtime type expression)
        )

    def create_field(
        self,
        input_type: type,
        model: type[ModelT],
        write: Callable[..., Awaitable[Any]],
        *,
        description: str | None = None,
        guards_urls: bool = False,
    ) -> Any:
        """`create<Name>(input)`: `write(session, subject, data)` returns the new node.
        `guards_urls`: the input carries user-supplied URLs, so `write` also takes the
        outbound URL guard's switch (`allow_private=`)."""
        kit = self

        async def resolve(self: Any, info: Info[Context, None], input: Any) -> Payload:
            return await kit.save(info, model, input, _url_policy(write, info, guards_urls))

        resolve.__annotations__["input"] = input_type
        return self.mutation(description=description)(resolve)

    def update_field(
        self,
        input_type: type,
        model: type[ModelT],
        write: Callable[..., Awaitable[Any]],
        *,
        description: str | None = None,
        guards_urls: bool = False,
    ) -> Any:
        """`update<Name>(id, input)`: `write(session, subject, id, data)` returns the node;
        `guards_urls` as in `create_field`."""
        kit = self

        async def resolve(
            self: Any, info: Info[Context, None], id: strawberry.ID, input: Any
        ) -> Payload:
            guarded = _url_policy(write, info, guards_urls)
            return await kit.save(
                info,
                model,
                input,
                lambda session, subject, data: guarded(session, subject, id, data),
            )

        resolve.__annotations__["input"] = input_type
        return self.mutation(description=description)(resolve)

    def delete_field(
        self, remove: Callable[[AsyncSession, Subject, str], Awaitable[object]]
    ) -> Any:
        """`delete<Name>(id)`: `remove(session, subject, id)`; see `delete`."""
        kit = self

        async def resolve(self: Any, info: Info[Context, None], id: strawberry.ID) -> Payload:
            return await kit.delete(info, id, remove)

        return self.mutation(payload=self.delete_payload)(resolve)

    def errors(self, exc: DomainError) -> list[Any]:
        """The payload errors of `exc`; a failure this domain does not declare is raised as a
        GraphQL error rather than sent as a value its enum does not have."""
        found = []
        for failure in failures(exc):
            code = self._codes.get(failure.code)
            if code is None:
                raise failure_as_graphql_error(failure) from exc
            found.append(self.error(code=code, message=failure.message, field=failure.field))
        return found

    async def perform(
        self,
        info: Info[Context, None],
        work: Work[ResultT],
        answer: Callable[[ResultT], dict[str, Any]],
        *,
        payload: Any = None,
    ) -> Payload:
        """The general form: `work` in one transaction, its result as `answer`'s payload
        fields, or its domain error in `errors`."""
        payload_type = self.payload if payload is None else payload
        context = info.context
        subject = context.require_subject()
        try:
            async with context.unit_of_work() as session:
                result = await work(session, subject)
        except DomainError as exc:
            return payload_type(errors=self.errors(exc))
        return payload_type(**answer(result))

    async def save(
        self,
        info: Info[Context, None],
        model: type[ModelT],
        input: object,
        write: Callable[[AsyncSession, Subject, ModelT], Awaitable[ResultT]],
        *,
        answer: Callable[[ResultT], dict[str, Any]] | None = None,
        payload: Any = None,
    ) -> Payload:
        """Create or update: `input` parsed as the REST body's `model`, then `write`, whose
        result is the node (or what `answer` makes of it)."""
        payload_type = self.payload if payload is None else payload
        try:
            data = parse_model(model, provided(input), "input")
        except DomainError as exc:
            return payload_type(errors=self.errors(exc))
        return await self.perform(
            info,
            lambda session, subject: write(session, subject, data),
            self.node_answer if answer is None else answer,
            payload=payload_type,
        )

    def node_answer(self, value: Any) -> dict[str, Any]:
        as_node = self._as_node
        return {self.node_field: value if as_node is None else as_node(value)}

    async def delete(
        self,
        info: Info[Context, None],
        id: strawberry.ID,
        remove: Callable[[AsyncSession, Subject, str], Awaitable[object]],
    ) -> Payload:
        """Delete by id: `deletedId` is the id the service answers with, else the one asked."""
        return await self.perform(
            info,
            lambda session, subject: remove(session, subject, id),
            lambda removed: {"deleted_id": removed if isinstance(removed, str) else id},
            payload=self.delete_payload,
        )


def _snake(name: str) -> str:
    return "".join(f"_{char.lower()}" if char.isupper() else char for char in name).lstrip("_")


def _object_type(
    name: str,
    required: dict[str, Any],
    optional: dict[str, Any],
    description: str | None,
    **lists: Any,
) -> Any:
    """A Strawberry object type made at run time: `required` fields, then `optional` ones
    (default null; a `Described` carries a description), then list fields (default empty)."""
    annotations: dict[str, Any] = dict(required)
    namespace: dict[str, Any] = {"__module__": __name__}
    for key, value in optional.items():
        annotation, text = (
            (value.annotation, value.description) if isinstance(value, Described) else (value, None)
        )
        annotations[key] = Optional[annotation]  # noqa: UP045 (a runtime type expression)
        namespace[key] = strawberry.field(default=None, description=text)
    for key, annotation in lists.items():
        annotations[key] = annotation
        namespace[key] = strawberry.field(default_factory=list)
    namespace["__annotations__"] = annotations
    return strawberry.type(type(name, (), namespace), description=description)


def _url_policy(
    write: Callable[..., Awaitable[Any]], info: Info[Context, None], guards_urls: bool
) -> Callable[..., Awaitable[Any]]:
    """`write` with the outbound URL guard's switch bound, when its input carries URLs."""
    if not guards_urls:
        return write
    allow_private = info.context.allow_private_urls

    async def guarded(*args: Any) -> Any:
        return await write(*args, allow_private=allow_private)

    return guarded
