"""Phone numbers: parsed with libphonenumber, stored as E.164."""

from __future__ import annotations

import re
from dataclasses import dataclass

import phonenumbers
from phonenumbers import phonenumberutil as _util

from app.kit.errors import InvalidInput

MAX_PHONE_LENGTH = 50
INVALID_PHONE_MESSAGE = "Invalid phone number format or length"


def to_e164(raw: str, field: str = "phone_number", region: str | None = None) -> str:
    """E.164 form of an international number ('+' and country code); InvalidInput otherwise.

    Possible-number rules (length per country) rather than strict validity: carriers'
    reserved test ranges such as +1 500 555 xxxx must stay usable. `region` (ISO 3166
    alpha-2) reads a national number as that country's; without it a number needs its `+`.
    """
    candidate = raw.strip()
    if not candidate or len(raw) > MAX_PHONE_LENGTH:
        raise InvalidInput(INVALID_PHONE_MESSAGE, field=field)
    fast = e164_fast_path(candidate)
    if fast is not None:
        return fast
    try:
        parsed = phonenumbers.parse(candidate, region)
    except phonenumbers.NumberParseException as exc:
        raise InvalidInput(INVALID_PHONE_MESSAGE, field=field) from exc
    if parsed.extension:
        # E.164 has no extensions: storing the number without it would dial someone else.
        raise InvalidInput(f"{INVALID_PHONE_MESSAGE}: extensions are not supported", field=field)
    if not phonenumbers.is_possible_number(parsed):
        raise InvalidInput(INVALID_PHONE_MESSAGE, field=field)
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


# The fast path: a number already written as E.164 ('+' and ASCII digits only), the form of
# nearly every row of an exported contact list, judged without building a PhoneNumber.
# It answers only what libphonenumber's own path (parse, is_possible_number, E.164 format)
# would answer, from the same metadata: the country code by prefix as `parse` finds it, then
# the region's possible lengths (computed once per country code by libphonenumber's own
# length test, which looks at nothing but the length). Whatever it is not certain of — a
# national prefix the region's parsing rule could strip, a length that is not possible, a
# code no region has — goes to the full path, which gives the verdict. Proven equal by
# tests/kit/test_phone_fast_path.py (hypothesis, against phonenumbers).


@dataclass(frozen=True, slots=True)
class _CountryRule:
    lengths: frozenset[int]
    # The region's national-prefix rule for parsing: a number it matches may be rewritten
    # by `parse`, so those take the full path.
    national_prefix: re.Pattern[str] | None


_RULES: dict[str, _CountryRule | None] = {}
_MAX_COUNTRY_CODE = 3
_COUNTRY_CODES = frozenset(str(code) for code in phonenumbers.COUNTRY_CODE_TO_REGION_CODE)


def _rule(code: str) -> _CountryRule | None:
    if code in _RULES:
        return _RULES[code]
    country_code = int(code)
    region = phonenumbers.region_code_for_country_code(country_code)
    metadata = phonenumbers.PhoneMetadata.metadata_for_region_or_calling_code(country_code, region)
    rule = None
    if metadata is not None:
        lengths = frozenset(
            length
            for length in range(_util._MIN_LENGTH_FOR_NSN, _util._MAX_LENGTH_FOR_NSN + 1)
            if _util._test_number_length("9" * length, metadata)
            in (
                _util.ValidationResult.IS_POSSIBLE,
                _util.ValidationResult.IS_POSSIBLE_LOCAL_ONLY,
            )
        )
        prefix = metadata.national_prefix_for_parsing
        rule = _CountryRule(lengths, re.compile(prefix) if prefix else None)
    _RULES[code] = rule
    return rule


def e164_fast_path(candidate: str) -> str | None:
    """`candidate` itself when it is an E.164 number libphonenumber's path accepts as it
    stands; None when only that path can tell (which includes every refusal)."""
    digits = candidate[1:]
    if candidate[:1] != "+" or not digits.isdigit() or not digits.isascii():
        return None
    if len(digits) <= _util._MIN_LENGTH_FOR_NSN or digits[0] == "0":
        return None
    # As `parse` reads it: the shortest prefix that is a country calling code.
    for size in range(1, _MAX_COUNTRY_CODE + 1):
        code = digits[:size]
        if code in _COUNTRY_CODES:
            break
    else:
        return None
    rule = _rule(code)
    national = digits[size:]
    if rule is None or len(national) not in rule.lengths:
        return None
    if rule.national_prefix is not None and rule.national_prefix.match(national):
        return None
    return candidate
