"""GraphQL: documents, search, delete and re-index call the same service as REST."""

from __future__ import annotations

import httpx

from app.resources import Resources
from tests.conftest import Tenant, TenantFactory, graphql
from tests.knowledge.conftest import index_all, uploaded

DOCUMENTS = """{ knowledgeDocuments { id documentType fileName indexStatus indexError
  chunkCount uploadedAt updatedAt } }"""
DOCUMENT = "query($id: ID!) { knowledgeDocument(id: $id) { id fileName indexStatus } }"
SEARCH = """query($q: String!, $k: Int) { searchKnowledge(query: $q, topK: $k) {
  documentId fileName chunkIndex text score page } }"""
DELETE = """mutation($id: ID!) { deleteKnowledgeDocument(id: $id) { deletedId
  errors { code message } } }"""
REINDEX = """mutation($id: ID!) { reindexKnowledgeDocument(id: $id) {
  document { id indexStatus } errors { code message } } }"""


async def test_documents_search_reindex_delete(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, resources: Resources
) -> None:
    document = await uploaded(client, acme, "guide.txt", b"The router resets with a pin.")
    await index_all(resources)

    listed = await graphql(client, DOCUMENTS, headers=acme.headers)
    [item] = listed["data"]["knowledgeDocuments"]
    assert item["id"] == document["id"]
    assert (item["documentType"], item["fileName"], item["indexStatus"]) == (
        "txt",
        "guide.txt",
        "ready",
    )
    assert item["chunkCount"] == 1

    found = await graphql(client, SEARCH, {"q": "reset router", "k": 3}, headers=acme.headers)
    [hit] = found["data"]["searchKnowledge"]
    assert hit["documentId"] == document["id"]
    assert hit["text"] == "The router resets with a pin."
    assert hit["page"] is None

    theirs = await graphql(client, SEARCH, {"q": "router"}, headers=globex.headers)
    assert theirs["data"]["searchKnowledge"] == []
    assert (await graphql(client, DOCUMENT, {"id": document["id"]}, headers=globex.headers))[
        "data"
    ]["knowledgeDocument"] is None
    foreign_delete = await graphql(client, DELETE, {"id": document["id"]}, headers=globex.headers)
    assert foreign_delete["data"]["deleteKnowledgeDocument"]["errors"] == [
        {"code": "not_found", "message": "Document not found"}
    ]

    again = await graphql(client, REINDEX, {"id": document["id"]}, headers=acme.headers)
    assert again["data"]["reindexKnowledgeDocument"]["document"]["indexStatus"] == "pending"

    deleted = await graphql(client, DELETE, {"id": document["id"]}, headers=acme.headers)
    assert deleted["data"]["deleteKnowledgeDocument"] == {
        "deletedId": document["id"],
        "errors": [],
    }
    assert (await graphql(client, DOCUMENTS, headers=acme.headers))["data"][
        "knowledgeDocuments"
    ] == []


async def test_search_validation_and_scope(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    bad = await graphql(client, SEARCH, {"q": "x", "k": 51}, headers=acme.headers)
    assert bad["data"]["searchKnowledge"] is None
    assert bad["errors"][0]["extensions"]["code"] == "validation_error"
    reader = await tenants.key(acme, ["agents:read"])
    refused = await graphql(client, SEARCH, {"q": "x"}, headers=reader.headers)
    assert refused["errors"][0]["extensions"]["code"] == "insufficient_scope"
    refused = await graphql(client, DOCUMENTS, headers=reader.headers)
    assert refused["errors"][0]["extensions"]["code"] == "insufficient_scope"


def test_index_status_changes_can_be_subscribed_to_by_type() -> None:
    from app.events.graphql import wanted_types

    assert wanted_types(["knowledge.document.updated"]) == frozenset({"knowledge.document.updated"})
