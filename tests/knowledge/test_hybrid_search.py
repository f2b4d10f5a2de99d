"""Hybrid retrieval on both databases with a deterministic embedder: vectors are stored with
the chunks, fused with the lexical ranking, kept per organization, and the cache follows
deletes and re-indexes."""

from __future__ import annotations

import httpx
import pytest

from app.knowledge.runtime import KnowledgeRuntime
from app.resources import Resources
from tests.conftest import Tenant
from tests.knowledge.conftest import BASE, index_all, uploaded
from tests.knowledge.fake_embeddings import HashingEmbedder


@pytest.fixture
def embedder(runtime: KnowledgeRuntime) -> HashingEmbedder:
    hashing = HashingEmbedder()
    runtime.embedder = hashing
    return hashing


async def _search(client: httpx.AsyncClient, tenant: Tenant, query: str) -> list[dict[str, object]]:
    response = await client.post(f"{BASE}/search", json={"query": query}, headers=tenant.headers)
    assert response.status_code == 200, response.text
    return response.json()["results"]  # type: ignore[no-any-return]


async def test_vector_ranking_finds_what_words_alone_miss(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    resources: Resources,
    embedder: HashingEmbedder,
) -> None:
    # "refunding" shares no exact word with the query's "refund"; the lexical side still
    # stems it, the vector side matches the 4-letter prefix feature.
    wanted = await uploaded(client, acme, "refunds.txt", b"Refunding customers takes 14 days.")
    await uploaded(client, acme, "parking.txt", b"Visitors park behind the building.")
    await uploaded(client, globex, "theirs.txt", b"Refunding at Globex takes 90 days.")
    assert await index_all(resources) == 3
    assert len(embedder.calls) == 3  # one batch per document

    results = await _search(client, acme, "refund duration")
    assert results[0]["document_id"] == wanted["id"]
    assert {r["file_name"] for r in results} <= {"refunds.txt", "parking.txt"}
    # Both lists found the first chunk: one list alone scores at most 1 / (60 + 1).
    assert results[0]["score"] > 1 / 61

    # Only vectors can rank the unrelated document at all (it shares no word with the query).
    assert len(results) == 2


async def test_vector_cache_follows_deletes_and_reindexes(
    client: httpx.AsyncClient, acme: Tenant, resources: Resources, embedder: HashingEmbedder
) -> None:
    first = await uploaded(client, acme, "a.txt", b"alpha bravo charlie")
    await index_all(resources)
    assert [r["document_id"] for r in await _search(client, acme, "alpha")] == [first["id"]]
    second = await uploaded(client, acme, "b.txt", b"alpha delta echo")
    await index_all(resources)
    assert {r["document_id"] for r in await _search(client, acme, "alpha")} == {
        first["id"],
        second["id"],
    }
    assert (await client.delete(f"{BASE}/{first['id']}", headers=acme.headers)).status_code == 204
    assert [r["document_id"] for r in await _search(client, acme, "alpha")] == [second["id"]]


async def test_search_survives_a_failing_embedder(
    client: httpx.AsyncClient, acme: Tenant, resources: Resources, runtime: KnowledgeRuntime
) -> None:
    await uploaded(client, acme, "a.txt", b"lexical still works")
    await index_all(resources)

    class Broken(HashingEmbedder):
        async def embed(self, texts):  # type: ignore[no-untyped-def]
            from app.knowledge.embeddings import EmbeddingFailed

            raise EmbeddingFailed("down")

    runtime.embedder = Broken()
    results = await _search(client, acme, "lexical")
    assert [r["file_name"] for r in results] == ["a.txt"]


async def test_embedding_failure_fails_the_document_with_its_reason(
    client: httpx.AsyncClient, acme: Tenant, resources: Resources, runtime: KnowledgeRuntime
) -> None:
    class Broken(HashingEmbedder):
        async def embed(self, texts):  # type: ignore[no-untyped-def]
            from app.knowledge.embeddings import EmbeddingFailed

            raise EmbeddingFailed("The embeddings endpoint answered HTTP 503")

    runtime.embedder = Broken()
    document = await uploaded(client, acme, "a.txt", b"some text")
    await index_all(resources)
    got = (await client.get(f"{BASE}/{document['id']}", headers=acme.headers)).json()
    assert got["index_status"] == "failed"
    assert got["index_error"] == "The embeddings endpoint answered HTTP 503"
