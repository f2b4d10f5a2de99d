"""The OpenAPI document of /api/v1 is committed (openapi.json, written by `make schema`), so a
change to a resource's shape, a route or a rule that reaches the document shows in review,
as schema.graphql does for GraphQL."""

from __future__ import annotations

from pathlib import Path

from rest_compat.app import OPERATIONS
from rest_compat.openapi import openapi_text

SNAPSHOT = Path(__file__).resolve().parent.parent / "openapi.json"


def test_the_document_is_the_committed_one() -> None:
    assert SNAPSHOT.read_text() == openapi_text(OPERATIONS), (
        "openapi.json is stale: run 'make schema' and commit it"
    )
