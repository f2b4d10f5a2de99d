"""Retrieval quality on the labelled set, in CI: the lexical path on both databases, and the
fusion with a deterministic embedder. (bench/knowledge_eval.py measures the local model.)"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.knowledge.runtime import KnowledgeRuntime
from app.resources import Resources
from tests.conftest import Tenant, make_settings
from tests.knowledge.evalset import EVAL_CHUNK_OVERLAP, EVAL_CHUNK_TOKENS, load_set, run_eval
from tests.knowledge.fake_embeddings import HashingEmbedder

# Floors under the figures measured when written (lexical 0.88 on both databases; the crude
# hashing embedder 0.65 SQLite / 0.76 PostgreSQL), so a regression in tokenising, ranking or
# fusion fails here. The real model's figure comes from bench/knowledge_eval.py.
LEXICAL_FLOOR = 0.8
HYBRID_FLOOR = 0.55


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return make_settings(
        database_url,
        tmp_path,
        knowledge_chunk_tokens=EVAL_CHUNK_TOKENS,
        knowledge_chunk_overlap=EVAL_CHUNK_OVERLAP,
        knowledge_upload_rate_limit="1000/m",
    )


def test_the_set_is_large_enough() -> None:
    data = load_set()
    assert len(data["documents"]) >= 5
    assert len(data["questions"]) >= 30
    assert {q["document"] for q in data["questions"]} == {d["id"] for d in data["documents"]}


async def test_lexical_recall_at_3(
    client: httpx.AsyncClient, acme: Tenant, resources: Resources
) -> None:
    outcome = await run_eval(client, acme, resources)
    assert outcome.recall >= LEXICAL_FLOOR, outcome.misses


async def test_hybrid_recall_at_3_with_a_deterministic_embedder(
    client: httpx.AsyncClient, acme: Tenant, resources: Resources, runtime: KnowledgeRuntime
) -> None:
    runtime.embedder = HashingEmbedder()
    outcome = await run_eval(client, acme, resources)
    assert outcome.recall >= HYBRID_FLOOR, outcome.misses
