"""Chunks of a document's text: windows of tokens that overlap, each knowing its pages.

A token is a run of non-space characters (a word with its punctuation), about 1.3 model
tokens of a BERT-style embedder; the default window of 160 stays under all-MiniLM-L6-v2's
256-token input. A chunk's text is the original text from its first token to its last, so
spacing and line breaks inside a page survive; a chunk crossing a page boundary joins its page
parts with a newline and records the first and the last page.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from app.knowledge.extraction import PageText

_TOKEN = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class Chunk:
    index: int
    text: str
    page: int | None
    page_end: int | None
    token_count: int


@dataclass(frozen=True, slots=True)
class _Token:
    part: int  # index into the pages
    start: int
    end: int


def chunk_pages(pages: Sequence[PageText], size: int = 160, overlap: int = 32) -> list[Chunk]:
    """Windows of `size` tokens, each starting `size - overlap` tokens after the previous."""
    if size < 1 or not 0 <= overlap < size:
        raise ValueError("chunk size must be positive and the overlap smaller than it")
    tokens = [
        _Token(part, match.start(), match.end())
        for part, page in enumerate(pages)
        for match in _TOKEN.finditer(page.text)
    ]
    chunks: list[Chunk] = []
    start = 0
    while start < len(tokens):
        window = tokens[start : start + size]
        chunks.append(_chunk(len(chunks), pages, window))
        if start + size >= len(tokens):
            break
        start += size - overlap
    return chunks


def _chunk(index: int, pages: Sequence[PageText], window: Sequence[_Token]) -> Chunk:
    parts: list[str] = []
    run_start = 0
    for position in range(1, len(window) + 1):
        if position == len(window) or window[position].part != window[run_start].part:
            first, last = window[run_start], window[position - 1]
            parts.append(pages[first.part].text[first.start : last.end])
            run_start = position
    return Chunk(
        index=index,
        text="\n".join(parts),
        page=pages[window[0].part].page,
        page_end=pages[window[-1].part].page,
        token_count=len(window),
    )
