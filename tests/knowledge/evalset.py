"""The labelled retrieval set (tests/data/knowledge_eval.json) run through the public API:
each document uploaded as its file type, indexed, then every question searched.

Shared by the CI test (lexical on both databases, fusion with a deterministic embedder) and
bench/knowledge_eval.py (recall@3 lexical and hybrid with the local model).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.resources import Resources
from tests.conftest import Tenant
from tests.knowledge.conftest import BASE, index_all, uploaded
from tests.knowledge.documents import make_docx, make_pdf

EVAL_SET = Path(__file__).resolve().parents[1] / "data" / "knowledge_eval.json"
# Passages about one section long, so recall@3 tells passages apart, not just documents.
EVAL_CHUNK_TOKENS = 48
EVAL_CHUNK_OVERLAP = 12


def load_set() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(EVAL_SET.read_text())
    return data


def document_file(document: dict[str, Any]) -> bytes:
    sections: list[str] = document["sections"]
    name: str = document["file_name"]
    if name.endswith(".pdf"):
        return make_pdf(sections)  # one page per section
    if name.endswith(".docx"):
        return make_docx(sections)
    return "\n\n".join(sections).encode()


@dataclass
class Outcome:
    hits: int = 0
    total: int = 0
    misses: list[str] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return self.hits / self.total if self.total else 0.0


async def run_eval(
    client: httpx.AsyncClient, tenant: Tenant, resources: Resources, top_k: int = 3
) -> Outcome:
    data = load_set()
    ids = {}
    for document in data["documents"]:
        created = await uploaded(client, tenant, document["file_name"], document_file(document))
        ids[created["id"]] = document["id"]
    await index_all(resources)
    outcome = Outcome()
    for question in data["questions"]:
        response = await client.post(
            f"{BASE}/search",
            json={"query": question["question"], "top_k": top_k},
            headers=tenant.headers,
        )
        response.raise_for_status()
        found = any(
            ids.get(result["document_id"]) == question["document"]
            and question["answer"] in " ".join(result["text"].split())
            for result in response.json()["results"]
        )
        outcome.total += 1
        outcome.hits += found
        if not found:
            outcome.misses.append(question["question"])
    return outcome
