"""Knowledge base speed: indexing pages/s, and search latency over 10,000 chunks.

    .venv/bin/python bench/knowledge.py [--backends sqlite,postgresql] [--queries 300]

1. Indexing: a generated 200-page PDF (~250 words a page) is uploaded through REST and its
   indexing job body (child-process extraction, chunking, writes; embeddings `none`) is timed.
2. Search: 10,000 chunks of 60 words (Zipf-distributed synthetic vocabulary) in 100 ready
   documents, with random unit 384-dimension vectors, are written straight into the tables of
   one organization (plus 1,000 chunks of another). Then `service.search` runs 3-word queries:
   lexical (no embedder) and hybrid (a fixed-vector embedder, so the figure is retrieval
   alone: the query's embedding by a model is not included; the local model's cost per query
   is printed separately when the `embeddings` extra is installed). Queries are three content
   words (vocabulary ranks 20-2000, uniform): stop words of real queries are dropped.

Prints per backend and mode p50/p99 in milliseconds and ends with a one-line JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from knowledge_common import BenchApp, bench_app, fresh

from app.access.subject import Subject
from app.core.clock import utcnow
from app.knowledge import service
from app.knowledge.embeddings import Matrix, pack
from app.knowledge.models import READY, KnowledgeDocument
from app.knowledge.repository import ChunkRow, KnowledgeRepository
from app.knowledge.runtime import knowledge_runtime
from app.knowledge.schemas import KnowledgeSearch
from tests.knowledge.conftest import index_all, uploaded
from tests.knowledge.documents import make_pdf

CHUNKS = 10_000
DOCUMENTS = 100
WORDS_PER_CHUNK = 60
DIMENSIONS = 384
MODEL = "bench-random-384"
RNG = np.random.default_rng(7)
VOCABULARY = [f"w{index:04d}{'abcdefghij'[index % 10]}" for index in range(5000)]


def _query() -> str:
    """Three content words (ranks 20 to 2000): real queries' stop words are dropped."""
    return " ".join(VOCABULARY[int(rank)] for rank in RNG.integers(20, 2000, size=3))


def _zipf_words(count: int) -> list[str]:
    ranks = np.minimum(RNG.zipf(1.2, size=count), len(VOCABULARY)) - 1
    return [VOCABULARY[int(rank)] for rank in ranks]


class FixedEmbedder:
    """Random unit vectors: retrieval cost without a model's."""

    model = MODEL
    enabled = True

    async def embed(self, texts: Sequence[str]) -> Matrix:
        rows = RNG.standard_normal((len(texts), DIMENSIONS)).astype(np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


async def index_pages(bench: BenchApp, pages: int = 200) -> float:
    text = " ".join(_zipf_words(250))
    pdf = make_pdf([f"Page {number}. {text}" for number in range(pages)])
    await uploaded(bench.client, bench.tenant, "big.pdf", pdf)
    started = time.perf_counter()
    assert await index_all(bench.resources) == 1
    return pages / (time.perf_counter() - started)


async def seed_chunks(bench: BenchApp, organization_id: str, chunks: int) -> None:
    per_document = chunks // DOCUMENTS
    async with bench.resources.session(writes=True) as session:
        repository = KnowledgeRepository(session, organization_id)
        for number in range(DOCUMENTS):
            document = KnowledgeDocument(
                organization_id=organization_id,
                document_type="txt",
                file_name=f"seed{number}.txt",
                storage_key=f"knowledge/{organization_id}/seed{number}/seed.txt",
                size_bytes=1,
                sha256="0" * 64,
                index_status=READY,
                chunk_count=per_document,
                embedding_model=MODEL,
                embedding_dimensions=DIMENSIONS,
                indexed_at=utcnow(),
            )
            session.add(document)
            await session.flush()
            vectors = await FixedEmbedder().embed(["x"] * per_document)
            await repository.insert_chunks(
                document.id,
                [
                    ChunkRow(
                        index,
                        " ".join(_zipf_words(WORDS_PER_CHUNK)),
                        None,
                        None,
                        WORDS_PER_CHUNK,
                        pack(vectors[index]),
                    )
                    for index in range(per_document)
                ],
            )
        await session.commit()


async def search_latency(
    bench: BenchApp, subject: Subject, queries: int, hybrid: bool
) -> dict[str, float]:
    runtime = knowledge_runtime(bench.settings)
    runtime.embedder = FixedEmbedder() if hybrid else _NONE
    timings = []
    for number in range(queries + 20):
        data = KnowledgeSearch(query=_query(), top_k=5)
        started = time.perf_counter()
        async with bench.resources.session(writes=False) as session:
            await service.search(session, runtime, subject, data)
        if number >= 20:  # warm-up (first vector load included there)
            timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    return {
        "p50_ms": round(statistics.median(timings), 2),
        "p99_ms": round(timings[int(len(timings) * 0.99) - 1], 2),
    }


async def local_query_embedding_ms() -> float | None:
    import importlib.util

    if importlib.util.find_spec("sentence_transformers") is None:
        return None
    from app.knowledge.embeddings import LocalEmbedder

    embedder = LocalEmbedder(None, Path(tempfile.gettempdir()))
    await embedder.embed(["warm up"])
    timings = []
    for _ in range(50):
        started = time.perf_counter()
        await embedder.embed([" ".join(_zipf_words(6))])
        timings.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(timings), 2)


async def run_backend(url: str, directory: Path, queries: int) -> dict[str, Any]:
    from app.knowledge.embeddings import NoEmbedder

    global _NONE
    _NONE = NoEmbedder()
    figures: dict[str, Any] = {}
    async with bench_app(url, directory, knowledge_max_upload_bytes=64 * 1024 * 1024) as bench:
        figures["pages_per_s"] = round(await index_pages(bench), 1)
        other = await bench.tenants.organization("other")
        await seed_chunks(bench, bench.tenant.organization_id, CHUNKS)
        await seed_chunks(bench, other.organization_id, CHUNKS // 10)
        subject = Subject(
            organization_id=bench.tenant.organization_id,
            principal_id="bench",
            principal_type=_principal_type(),
            scopes=frozenset(),
            livemode=False,
        )
        figures["lexical"] = await search_latency(bench, subject, queries, hybrid=False)
        figures["hybrid"] = await search_latency(bench, subject, queries, hybrid=True)
    return figures


_NONE: Any = None


def _principal_type() -> Any:
    from app.access.subject import PrincipalType

    return next(iter(PrincipalType))


def main() -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    summary: dict[str, Any] = {"chunks": CHUNKS}
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory() as directory, fresh(backend, Path(directory)) as url:
            figures = asyncio.run(run_backend(url, Path(directory), args.queries))
        print(
            f"{backend}: indexing {figures['pages_per_s']} pages/s; "
            f"lexical p50 {figures['lexical']['p50_ms']} ms p99 {figures['lexical']['p99_ms']} ms; "
            f"hybrid p50 {figures['hybrid']['p50_ms']} ms p99 {figures['hybrid']['p99_ms']} ms"
        )
        summary[backend] = {
            "pages_per_s": figures["pages_per_s"],
            "search_p50_ms": {
                "lexical": figures["lexical"]["p50_ms"],
                "hybrid": figures["hybrid"]["p50_ms"],
            },
            "search_p99_ms": {
                "lexical": figures["lexical"]["p99_ms"],
                "hybrid": figures["hybrid"]["p99_ms"],
            },
        }
    embedding = asyncio.run(local_query_embedding_ms())
    if embedding is not None:
        print(f"local model: one query embedded in {embedding} ms (p50), on top of hybrid search")
    summary["local_query_embedding_p50_ms"] = embedding
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
