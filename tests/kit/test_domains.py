"""The kit collects every domain's surfaces from its package: one line in DOMAINS is all a
domain needs to be in the schema, the REST routes and Base.metadata."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import strawberry
from strawberry.tools import merge_types

from app.domains import DOMAINS
from app.graphql.schema import build_schema
from app.kit.domains import collect, surface_modules
from app.tables import DOMAIN_MODELS, Base
from rest_compat.app import OPERATIONS
from rest_compat.openapi import build_openapi

# Tables of the shared layers (the kit's machinery, the credential kernel's API keys),
# imported by app/tables.py itself.
KIT_TABLES = {"resource_counters", "idempotency_records", "outbox_jobs", "api_keys"}
# Domains without a table of their own: the API keys the auth domain manages live in the
# credential kernel (app/access/models.py), which reads them on every request.
DOMAINS_WITHOUT_TABLES = {"app.auth"}
# Tables an integration keeps for itself: the WhatsApp simulator's templates (test mode stands
# in for Meta's template store), beside the simulator rather than in the templates domain.
INTEGRATION_TABLES = {
    "whatsapp_simulator_templates": "app.integrations.whatsapp.simulator_models",
}


def _fields(root: type) -> list[str]:
    definition = root.__strawberry_definition__  # type: ignore[attr-defined]
    return [field.python_name for field in definition.fields]


def test_every_domain_is_a_package_with_its_surfaces_collected() -> None:
    for package in DOMAINS:
        assert __import__(package, fromlist=["_"]).__path__, package
    graphql_modules = surface_modules("graphql")
    assert {module.__name__ for module in graphql_modules} == {
        f"{package}.graphql"
        for package in DOMAINS
        # AI replies have no surface of their own: channels and messages show them.
        if package not in ("app.organizations", "app.ai_replies")
    }
    schema = build_schema()
    for kind, schema_type in (
        ("Query", schema.query),
        ("Mutation", schema.mutation),
        ("Subscription", schema.subscription),
    ):
        expected = [name for part in collect("graphql", kind) for name in _fields(part)]
        assert expected, kind
        assert _fields(schema_type) == expected, kind
    rest_operations = [op for ops in collect("rest", "OPERATIONS") for op in ops]
    assert list(OPERATIONS) == rest_operations
    assert {op.tag for op in OPERATIONS} >= {"contacts", "agents", "webhooks"}


def test_every_table_comes_from_a_domain_models_module_or_the_kit() -> None:
    assert {module.__name__ for module in DOMAIN_MODELS} == {
        f"{package}.models" for package in DOMAINS if package not in DOMAINS_WITHOUT_TABLES
    }
    owners = {module.__name__.removesuffix(".models") for module in DOMAIN_MODELS}
    for mapper in Base.registry.mappers:
        table = mapper.local_table.name  # type: ignore[union-attr]
        module = mapper.class_.__module__
        if table in INTEGRATION_TABLES:
            assert module == INTEGRATION_TABLES[table], (table, module)
            continue
        assert table in KIT_TABLES or module.removesuffix(".models") in owners, (table, module)


@pytest.fixture
def widgets_package(tmp_path: Path) -> Iterator[str]:
    """A new domain written the way docs/adding-a-resource.md says, outside app/."""
    package = tmp_path / "widgets_domain"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(
        textwrap.dedent(
            """
            from sqlalchemy import MetaData, Table, Column, String
            # Its own metadata: the test must not add a table to the service's.
            metadata = MetaData()
            widgets = Table("widgets", metadata, Column("id", String, primary_key=True))
            """
        )
    )
    (package / "graphql.py").write_text(
        textwrap.dedent(
            """
            import strawberry

            @strawberry.type
            class Query:
                @strawberry.field
                def widget_names(self) -> list[str]:
                    return ["sprocket"]

            @strawberry.type
            class Mutation:
                @strawberry.mutation
                def spin_widget(self) -> bool:
                    return True
            """
        )
    )
    (package / "rest.py").write_text(
        textwrap.dedent(
            """
            from starlette.responses import Response
            from app.access.scopes import Scope
            from rest_compat.endpoint import Operation

            async def list_widgets(ctx):
                return Response(b"[]")

            OPERATIONS = (
                Operation("GET", "/widgets", list_widgets, Scope.FULL_ACCESS, "List widgets",
                          "widgets"),
            )
            """
        )
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield "widgets_domain"
    finally:
        sys.path.remove(str(tmp_path))
        for name in [name for name in sys.modules if name.startswith("widgets_domain")]:
            del sys.modules[name]


def test_one_line_in_domains_adds_a_domain_everywhere(widgets_package: str) -> None:
    domains = (*DOMAINS, widgets_package)
    models = surface_modules("models", domains)
    assert models[-1].__name__ == "widgets_domain.models"
    assert "widgets" in models[-1].metadata.tables

    schema = strawberry.Schema(
        query=merge_types("Query", tuple(collect("graphql", "Query", domains))),
        mutation=merge_types("Mutation", tuple(collect("graphql", "Mutation", domains))),
    )
    assert schema.execute_sync("{ widgetNames }").data == {"widgetNames": ["sprocket"]}
    assert schema.execute_sync("mutation { spinWidget }").data == {"spinWidget": True}
    assert "contacts" in str(schema)  # the existing domains are still there

    operations = [op for ops in collect("rest", "OPERATIONS", domains) for op in ops]
    document = build_openapi(operations)
    assert "/api/v1/widgets" in document["paths"]
    assert "/api/v1/contacts" in document["paths"]


def test_a_misspelt_domain_fails_instead_of_vanishing() -> None:
    with pytest.raises(ModuleNotFoundError):
        surface_modules("graphql", (*DOMAINS, "app.no_such_domain"))
