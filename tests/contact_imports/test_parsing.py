"""Row validation of an import (app/contact_imports/parsing.py): each rule refuses its row
with its reason, and the quick forms of the name and tag rules answer as the full ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.contact_imports.parsing import (
    ParsedRow,
    RowParser,
    RowRefused,
    _tags,
    contact_name,
    parse_header,
)
from app.contacts.schemas import MAX_CUSTOM_FIELDS_BYTES
from app.kit.validation import display_name

HEADER = ["name", "phone_number", "tags", "notes", "cf.plan", "cf.note"]


def parse(cells: list[str], header: list[str] = HEADER) -> ParsedRow | RowRefused:
    return RowParser(parse_header(header), None)(2, cells)


def test_a_good_row_and_the_formula_escape_read_back() -> None:
    row = parse(["'=SUM(A1)", "+14155550100", " vip | b2b |vip|", "'@note", "pro", ""])
    assert isinstance(row, ParsedRow)
    assert (row.name, row.phone_number) == ("=SUM(A1)", "+14155550100")
    assert row.tags == ["vip", "b2b"]
    assert row.notes == "@note"
    assert row.custom_fields == {"plan": "pro"}
    quoted = parse(["'Ada", "+14155550100", "", "", "", ""])
    assert isinstance(quoted, ParsedRow)
    assert quoted.name == "'Ada"


@pytest.mark.parametrize(
    ("cells", "reason"),
    [
        (["Ada", "+14155550100", "", "a\x00b", "", ""], "contains a NUL character"),
        (["Ada", "+1415", "", "", "", ""], "invalid phone number"),
        (["\ufeff ", "+14155550100", "", "", "", ""], "name must not be only white space"),
        (["x" * 256, "+14155550100", "", "", "", ""], "name must be 1 to 255 characters"),
        (
            ["Ada", "+14155550100", "|".join(f"t{n}" for n in range(101)), "", "", ""],
            "at most 100 tags",
        ),
        (["Ada", "+14155550100", "", "n" * 10_001, "", ""], "notes have at most 10000 characters"),
        (
            ["Ada", "+14155550100", "", "", "p" * 9000, "q" * 8000],
            f"custom fields take at most {MAX_CUSTOM_FIELDS_BYTES} bytes as JSON",
        ),
        (
            ["Ada", "+14155550100", "", "", "\x01" * 3000, ""],  # 6 bytes each as JSON
            f"custom fields take at most {MAX_CUSTOM_FIELDS_BYTES} bytes as JSON",
        ),
    ],
)
def test_each_rule_refuses_its_row(cells: list[str], reason: str) -> None:
    row = parse(cells)
    assert isinstance(row, RowRefused)
    assert (row.line, row.reason) == (2, reason)


def test_custom_fields_just_under_the_limit_pass() -> None:
    row = parse(["Ada", "+14155550100", "", "", "p" * 8000, "q" * 8000])
    assert isinstance(row, ParsedRow)
    assert row.custom_fields is not None


def test_the_custom_fields_json_column_and_national_numbers() -> None:
    header = ["name", "phone_number", "custom_fields", "cf.plan"]
    parser = RowParser(parse_header(header), "US")
    row = parser(3, ["Ada", "(415) 555-0100", '{"a": 1}', "pro"])
    assert isinstance(row, ParsedRow)
    assert row.phone_number == "+14155550100"
    assert row.custom_fields == {"a": 1, "plan": "pro"}
    refused = parser(4, ["Ada", "+14155550100", "[1]", ""])
    assert isinstance(refused, RowRefused)
    assert refused.reason == "custom_fields must be a JSON object"


TEXT = st.text(
    alphabet=st.sampled_from(" \t\u00a0\u2003\ufeffab\u00e9\u200b\n"), max_size=8
) | st.text(max_size=300)


@settings(max_examples=600, deadline=None)
@given(TEXT)
def test_contact_name_answers_as_display_name(cell: str) -> None:
    try:
        expected: str | None = display_name(cell.strip())
    except ValueError:
        expected = None
    try:
        got: str | None = contact_name(cell)
    except ValueError:
        got = None
    assert got == expected


@settings(max_examples=600, deadline=None)
@given(st.text(alphabet=st.sampled_from(" |ab\t\u00a0c"), max_size=20))
def test_tags_answer_as_before(cell: str) -> None:
    before = list(dict.fromkeys(tag.strip() for tag in cell.split("|") if tag.strip()))
    assert _tags(cell) == before
