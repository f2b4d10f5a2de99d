"""Envelopes A and B (page-numbered) and the inputs that drive them."""

from __future__ import annotations

import pytest

from app.kit.errors import InvalidInput
from app.kit.pagination import NumberedPage, PageParams, envelope_a, envelope_b


def test_envelope_a_reports_more_pages() -> None:
    params = PageParams(page=2, size=10)
    page = NumberedPage(items=[{"id": str(i)} for i in range(10)], total=25, params=params)
    body = envelope_a(list(page.items), page)  # type: ignore[arg-type]
    assert body == {
        "has_more": True,
        "total": 25,
        "page": 2,
        "limit": 10,
        "items": [{"id": str(i)} for i in range(10)],
    }
    last = NumberedPage(items=[{"id": "x"}] * 5, total=25, params=PageParams(page=3, size=10))
    assert envelope_a(list(last.items), last)["has_more"] is False  # type: ignore[arg-type]


def test_envelope_b_shape() -> None:
    page = NumberedPage(items=[], total=0, params=PageParams(page=1, size=20))
    assert envelope_b([], page) == {"total": 0, "page": 1, "page_size": 20, "items": []}


@pytest.mark.parametrize(("page", "size"), [(0, 10), (-1, 10), (1, 0), (1, 101)])
def test_page_params_bounds(page: int, size: int) -> None:
    with pytest.raises(InvalidInput):
        PageParams(page=page, size=size)
