"""Exact cosine search over an organization's vectors, held in memory per process.

Neither pgvector nor sqlite-vec is available on the deployments this targets, and an exact
scan of a few tens of thousands of 384-dimension vectors is one matrix product (well under a
millisecond with numpy). Each process keeps, per organization and model, the matrix of its
ready chunks, tagged with a version read from the documents table (ready documents, their
chunk count and latest `indexed_at`): a search re-reads one aggregate row, and the vectors only
when that version moved. The cache is bounded in bytes (least recently used evicted first); an
organization whose matrix alone exceeds the budget is scored over the lexical candidates
only (a bounded candidate set), which the search falls back to.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.knowledge.embeddings import Matrix, unpack
from app.knowledge.repository import KnowledgeRepository


@dataclass(frozen=True, slots=True)
class _Entry:
    version: tuple[Any, ...]
    ids: npt.NDArray[np.int64]
    matrix: Matrix

    @property
    def size(self) -> int:
        return int(self.ids.nbytes + self.matrix.nbytes)


def _rank(ids: npt.NDArray[np.int64], matrix: Matrix, query: Matrix, limit: int) -> list[int]:
    if not len(ids):
        return []
    scores = matrix @ query
    count = min(limit, len(ids))
    top = np.argpartition(-scores, count - 1)[:count]
    top = top[np.argsort(-scores[top], kind="stable")]
    return [int(ids[index]) for index in top]


class VectorIndex:
    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._used = 0

    async def nearest(
        self,
        repository: KnowledgeRepository,
        model: str,
        query: Matrix,
        limit: int,
        candidates: Sequence[int],
    ) -> list[int]:
        """Chunk ids by cosine similarity to `query` (a unit vector), best first."""
        key = (repository.organization_id, model)
        version = (*await repository.vector_version(model), query.shape[0])
        entry = self._entries.get(key)
        if entry is None or entry.version != version:
            if entry is not None:
                self._forget(key)
            rows = await repository.vectors(model)
            entry = self._build(version, rows, query.shape[0])
            if entry.size > self.budget_bytes:
                # Too large to keep: score the lexical candidates only.
                subset = await repository.vectors(model, candidates) if candidates else []
                small = self._build(version, subset, query.shape[0])
                return _rank(small.ids, small.matrix, query, limit)
            self._remember(key, entry)
        else:
            self._entries.move_to_end(key)
        return _rank(entry.ids, entry.matrix, query, limit)

    @staticmethod
    def _build(version: tuple[Any, ...], rows: Sequence[tuple[int, bytes]], dims: int) -> _Entry:
        usable = [(chunk_id, blob) for chunk_id, blob in rows if len(blob) == dims * 4]
        ids = np.asarray([chunk_id for chunk_id, _ in usable], dtype=np.int64)
        return _Entry(version, ids, unpack([blob for _, blob in usable], dims))

    def _remember(self, key: tuple[str, str], entry: _Entry) -> None:
        while self._entries and self._used + entry.size > self.budget_bytes:
            self._forget(next(iter(self._entries)))
        self._entries[key] = entry
        self._used += entry.size

    def _forget(self, key: tuple[str, str]) -> None:
        entry = self._entries.pop(key)
        self._used -= entry.size
