"""What a GraphQL caller sees when part of a document fails: the data it may see plus an error
per refused root field, error codes from the domain's enum, and fields and cursor arguments
named as the schema names them (never REST's names)."""

from __future__ import annotations

import uuid

import httpx
import pytest
from graphql import GraphQLError, get_named_type

from app.access.scopes import Scope
from app.graphql.resource import DomainMutations
from app.graphql.schema import build_schema
from app.kit.errors import Conflict, NotFound, RequestValidationFailed
from tests.conftest import Tenant, TenantFactory, graphql

BOTH = "{ agents { totalCount } contacts { totalCount } }"
CREATE_CONTACT = """mutation($input: ContactCreateInput!) {
  createContact(input: $input) { contact { id } errors { code message field } }
}"""


async def test_a_refused_root_field_leaves_the_others_data(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    agents_only = await tenants.key(acme, ["agents:read"])
    body = await graphql(client, BOTH, None, agents_only.headers)
    assert body["data"] == {"agents": {"totalCount": 0}, "contacts": None}
    assert len(body["errors"]) == 1
    assert body["errors"][0]["path"] == ["contacts"]
    assert body["errors"][0]["extensions"]["code"] == "insufficient_scope"

    full = await graphql(client, BOTH, None, acme.headers)
    assert full == {"data": {"agents": {"totalCount": 0}, "contacts": {"totalCount": 0}}}


async def test_a_refused_mutation_leaves_the_others_result(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    agents_only = await tenants.key(acme, ["agents:read", "agents:write"])
    body = await graphql(
        client,
        """mutation {
          createAgent(input: {name: "Front desk"}) { agent { name } errors { code } }
          deleteContact(id: "00000000-0000-4000-8000-000000000000") { deletedId }
        }""",
        None,
        agents_only.headers,
    )
    assert body["data"] == {
        "createAgent": {"agent": {"name": "Front desk"}, "errors": []},
        "deleteContact": None,
    }
    assert body["errors"][0]["path"] == ["deleteContact"]


async def test_user_error_fields_are_named_as_the_schema_names_them(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    body = await graphql(
        client, CREATE_CONTACT, {"input": {"phoneNumber": "nope", "name": "Ada"}}, acme.headers
    )
    assert body["data"]["createContact"]["errors"] == [
        {
            "code": "invalid_input",
            "message": "Invalid phone number format or length",
            "field": "phoneNumber",
        }
    ]
    nested = await graphql(
        client,
        """mutation { createAgent(input: {name: "A", agentConfig: {temperature: 7}}) {
          errors { code field } } }""",
        None,
        acme.headers,
    )
    assert nested["data"]["createAgent"]["errors"] == [
        {"code": "less_than_equal", "field": "agentConfig.temperature"}
    ]


def test_mutation_error_codes_are_each_domains_enum() -> None:
    schema = build_schema()._schema
    for error_type, codes in (
        ("ContactError", {"not_found", "invalid_input", "string_too_long", "missing"}),
        ("ChannelError", {"not_found", "conflict", "livemode_mismatch"}),
        ("TicketError", {"not_found", "invalid_state", "uuid_parsing"}),
        ("AuthError", {"invalid_credentials", "rate_limit_exceeded", "not_found"}),
    ):
        code_type = get_named_type(schema.get_type(error_type).fields["code"].type)  # type: ignore[union-attr]
        assert code_type.name == error_type + "Code"
        assert codes <= set(code_type.values), error_type
    mutation = schema.mutation_type
    assert mutation is not None
    payload = mutation.fields["createContact"].type
    assert get_named_type(payload.fields["errors"].type).name == "ContactError"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("arguments", "name"),
    [('after: "{id}"', "after"), ('last: 2, before: "{id}"', "before")],
)
async def test_cursor_errors_name_the_graphql_argument(
    client: httpx.AsyncClient, acme: Tenant, arguments: str, name: str
) -> None:
    unknown = str(uuid.uuid4())
    for field in ("contacts", "agents", "webhooks", "tickets", "quickReplies", "channels"):
        query = f"{{ {field}({arguments.format(id=unknown)}) {{ totalCount }} }}"
        body = await graphql(client, query, None, acme.headers)
        assert body["data"] == {field: None}, field
        error = body["errors"][0]
        assert error["message"] == f"{name}: no such object: '{unknown}'", field
        assert error["extensions"] == {"code": "invalid_input", "field": name}, field


async def test_rest_keeps_naming_its_query_parameters(
    client: httpx.AsyncClient, acme: Tenant
) -> None:
    unknown = str(uuid.uuid4())
    response = await client.get(
        "/api/v1/contacts", params={"starting_after": unknown}, headers=acme.headers
    )
    assert response.status_code == 400
    assert response.json() == {"detail": f"starting_after: no such object: '{unknown}'"}


def test_a_failure_the_domain_does_not_declare_is_a_graphql_error() -> None:
    kit = DomainMutations("Probe", scope=Scope.FULL_ACCESS, errors=(NotFound,))
    (declared,) = kit.errors(NotFound("Probe"))
    assert (declared.code.value, declared.message) == ("not_found", "Probe not found")
    (validation,) = kit.errors(
        RequestValidationFailed([{"loc": ["input", "phone_number"], "msg": "m", "type": "missing"}])
    )
    assert (validation.code.value, validation.field) == ("missing", "phoneNumber")
    with pytest.raises(GraphQLError) as raised:
        kit.errors(Conflict("already taken", field="short_cut"))
    assert raised.value.extensions == {"code": "conflict", "field": "shortCut"}
    with pytest.raises(GraphQLError):
        kit.errors(RequestValidationFailed([{"loc": ["input"], "msg": "m", "type": "new_type"}]))
