"""Reciprocal rank fusion: one ranking out of several, by rank alone.

Lexical scores (BM25, ts_rank) and cosine similarities live on unrelated scales; RRF ignores
the scores and sums 1 / (k + rank) over the lists an item appears in (Cormack et al., 2009).
k = 60 is the paper's constant: it damps the weight of the very first ranks.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
RRF_K = 60


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[K]], k: int = RRF_K
) -> list[tuple[K, float]]:
    """Items by fused score, best first; ties keep the order of their best single rank."""
    scores: dict[K, float] = {}
    best_rank: dict[K, int] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
            best_rank[item] = min(best_rank.get(item, rank), rank)
    return sorted(scores.items(), key=lambda pair: (-pair[1], best_rank[pair[0]]))
