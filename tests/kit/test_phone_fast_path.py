"""The E.164 fast path of `to_e164` (app/kit/phone.py) answers exactly as libphonenumber's
path does: whenever it answers, the full path accepts the same number with the same E.164
form; and it does answer for ordinary numbers of every country (or it would be no path)."""

from __future__ import annotations

import phonenumbers
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.kit.errors import InvalidInput
from app.kit.phone import e164_fast_path, to_e164


def full_path(candidate: str) -> str | None:
    """libphonenumber's verdict, as `to_e164` reached it before the fast path existed."""
    try:
        parsed = phonenumbers.parse(candidate, None)
    except phonenumbers.NumberParseException:
        return None
    if parsed.extension or not phonenumbers.is_possible_number(parsed):
        return None
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


def agrees(candidate: str) -> bool:
    fast = e164_fast_path(candidate)
    return fast is None or fast == full_path(candidate)


COUNTRY_CODES = sorted(phonenumbers.COUNTRY_CODE_TO_REGION_CODE)
TYPES = (
    phonenumbers.PhoneNumberType.FIXED_LINE,
    phonenumbers.PhoneNumberType.MOBILE,
    phonenumbers.PhoneNumberType.TOLL_FREE,
    phonenumbers.PhoneNumberType.VOIP,
)


def example_numbers() -> list[str]:
    found = []
    for region in sorted(phonenumbers.SUPPORTED_REGIONS):
        for kind in TYPES:
            example = phonenumbers.example_number_for_type(region, kind)
            if example is not None:
                found.append(
                    phonenumbers.format_number(example, phonenumbers.PhoneNumberFormat.E164)
                )
    for code in phonenumbers.COUNTRY_CODES_FOR_NON_GEO_REGIONS:
        example = phonenumbers.example_number_for_non_geo_entity(code)
        if example is not None:
            found.append(phonenumbers.format_number(example, phonenumbers.PhoneNumberFormat.E164))
    return found


EXAMPLES = example_numbers()


def test_every_country_code_and_length_agrees() -> None:
    """Exhaustive over country codes, lengths and leading digits (national prefixes such
    as 0, 1 or 8 included)."""
    for code in COUNTRY_CODES:
        for length in range(0, 19):
            for lead in "0123456789":
                for tail in ("5", "0", "9"):
                    number = f"+{code}{(lead + tail * length)[:length]}"
                    assert agrees(number), number


def test_real_numbers_of_every_region_take_the_fast_path_and_agree() -> None:
    assert len(EXAMPLES) > 500
    answered = [number for number in EXAMPLES if e164_fast_path(number) is not None]
    for number in EXAMPLES:
        assert agrees(number), number
    # Most real numbers never reach the full path (those that do: a national prefix the
    # region's rule could strip, e.g. Russia's 8).
    assert len(answered) / len(EXAMPLES) > 0.9
    assert e164_fast_path("+14155550100") == "+14155550100"
    assert e164_fast_path("+390612345678") == "+390612345678"  # Italy's leading zero
    assert e164_fast_path("+15005550001") == "+15005550001"  # test ranges stay possible


@settings(max_examples=800, deadline=None)
@given(st.text(alphabet="0123456789", min_size=0, max_size=20))
def test_random_digit_strings_agree(digits: str) -> None:
    assert agrees("+" + digits)


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(EXAMPLES),
    st.integers(min_value=-4, max_value=4),
    st.text(alphabet="0123456789", max_size=4),
)
def test_real_looking_numbers_agree(example: str, cut: int, extra: str) -> None:
    """Real numbers with digits cut off, added, or a national prefix put in after the code."""
    number = example[:cut] if cut < 0 else example + extra[:cut]
    assert agrees(number)
    code_size = next(
        size
        for size in (1, 2, 3)
        if int(example[1 : 1 + size]) in phonenumbers.COUNTRY_CODE_TO_REGION_CODE
    )
    assert agrees(example[: 1 + code_size] + extra + example[1 + code_size :])


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="+0123456789 ()-.x#*\u0660\u0661\uff11", max_size=24))
def test_other_text_never_takes_the_fast_path_unless_it_agrees(text: str) -> None:
    assert agrees(text)


@pytest.mark.parametrize(
    ("raw", "region", "expected"),
    [
        ("+1 415 555 0100", None, "+14155550100"),
        ("4155550100", "US", "+14155550100"),
        (" +14155550100 ", None, "+14155550100"),
        ("+442079460958", None, "+442079460958"),
        ("+4402079460958", None, "+442079460958"),  # the UK's national 0, stripped by parse
    ],
)
def test_to_e164_answers_as_before(raw: str, region: str | None, expected: str) -> None:
    assert to_e164(raw, region=region) == expected


@pytest.mark.parametrize("raw", ["+1", "+12", "+0123456789", "+999123456", "not-a-number", ""])
def test_to_e164_refuses_as_before(raw: str) -> None:
    with pytest.raises(InvalidInput):
        to_e164(raw)
