"""Token windows with overlap that keep their pages; reciprocal rank fusion."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.knowledge.chunking import chunk_pages
from app.knowledge.extraction import PageText
from app.knowledge.fusion import reciprocal_rank_fusion


def _words(count: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{index}" for index in range(count))


def test_windows_overlap_by_the_given_number_of_tokens() -> None:
    chunks = chunk_pages([PageText(None, _words(25))], size=10, overlap=3)
    assert [chunk.token_count for chunk in chunks] == [10, 10, 10, 4]
    assert chunks[0].text.split()[-3:] == chunks[1].text.split()[:3]
    assert chunks[-1].text.split()[-1] == "w24"
    assert [chunk.index for chunk in chunks] == [0, 1, 2, 3]


def test_chunks_keep_pages_and_join_page_parts_with_a_newline() -> None:
    pages = [PageText(1, _words(6, "a")), PageText(2, _words(6, "b")), PageText(3, "c0 c1")]
    chunks = chunk_pages(pages, size=8, overlap=2)
    assert (chunks[0].page, chunks[0].page_end) == (1, 2)
    assert chunks[0].text == "a0 a1 a2 a3 a4 a5\nb0 b1"
    assert (chunks[1].page, chunks[1].page_end) == (2, 3)
    assert chunks[1].text == "b0 b1 b2 b3 b4 b5\nc0 c1"


def test_original_spacing_inside_a_page_survives() -> None:
    [chunk] = chunk_pages([PageText(None, "Title\n\n  Body   text.\tEnd")], size=10, overlap=0)
    assert chunk.text == "Title\n\n  Body   text.\tEnd"


def test_empty_text_has_no_chunks() -> None:
    assert chunk_pages([PageText(1, "   \n"), PageText(2, "")]) == []


def test_invalid_window() -> None:
    with pytest.raises(ValueError):
        chunk_pages([PageText(None, "x")], size=4, overlap=4)


@given(
    st.integers(min_value=1, max_value=300),
    st.integers(min_value=1, max_value=40),
    st.data(),
)
def test_every_token_is_in_some_chunk_in_order(count: int, size: int, data: st.DataObject) -> None:
    overlap = data.draw(st.integers(min_value=0, max_value=size - 1))
    chunks = chunk_pages([PageText(None, _words(count))], size=size, overlap=overlap)
    seen: list[str] = []
    for chunk in chunks:
        tokens = chunk.text.split()
        assert len(tokens) <= size
        fresh = tokens[overlap:] if seen else tokens
        seen.extend(fresh)
    assert seen == _words(count).split()


def test_fusion_rewards_agreement_between_rankings() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["d", "b", "c"]])
    order = [item for item, _score in fused]
    assert order == ["b", "c", "a", "d"]  # found by both lists beats first in one
    scores = dict(fused)
    assert scores["b"] == pytest.approx(2 / 62)
    assert scores["c"] == pytest.approx(2 / 63)
    assert scores["a"] == pytest.approx(1 / 61)


def test_fusion_of_one_ranking_keeps_its_order() -> None:
    assert [item for item, _ in reciprocal_rank_fusion([["x", "y", "z"]])] == ["x", "y", "z"]


def test_fusion_ties_keep_the_better_single_rank() -> None:
    fused = reciprocal_rank_fusion([["a", "b"], ["b", "a"]])
    assert fused[0][1] == fused[1][1]
    assert [item for item, _ in fused] == ["a", "b"]
