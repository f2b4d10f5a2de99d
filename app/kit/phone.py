"""Phone numbers: parsed with libphonenumber, stored as E.164."""

from __future__ import annotations

import phonenumbers

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
