"""Meta's content rules for message templates, checked before anything goes upstream.

A template that breaks one of these would be rejected by the platform after review; checking
them first answers at once, names the rule, and spends no upstream call. The simulator applies
the same rules, as the platform's review would.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_BODY_LENGTH = 1024
MAX_HEADER_TEXT_LENGTH = 60
MAX_FOOTER_LENGTH = 60
MAX_HEADER_VARIABLES = 1
MAX_BUTTONS = 10
MAX_URL_BUTTONS = 2
MAX_PHONE_BUTTONS = 1
MAX_BUTTON_TEXT_LENGTH = 25
MEDIA_FORMATS = frozenset({"IMAGE", "VIDEO", "DOCUMENT"})
COMPONENT_TYPES = ("HEADER", "BODY", "FOOTER", "BUTTONS")
# `{{1}}`, `{{ 2 }}`; anything else between double braces is not a positional variable.
VARIABLE = re.compile(r"{{\s*([^{}]*?)\s*}}")
URL_IN_TEXT = re.compile(r"https?://", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Violation:
    rule: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "message": self.message}


def rejected_reason(violations: Sequence[Violation]) -> str:
    """What a template refused before submission says about why: every rule, by name."""
    return "; ".join(f"{violation.rule}: {violation.message}" for violation in violations)


def _variables(text: str) -> list[str]:
    return [match.group(1) for match in VARIABLE.finditer(text)]


def _check_numbering(where: str, names: list[str]) -> list[Violation]:
    """Positional variables are `{{1}}..{{n}}`, first appearances in order, none skipped."""
    if not names:
        return []
    if not all(name.isdigit() for name in names):
        bad = next(name for name in names if not name.isdigit())
        return [
            Violation(
                "variable_format",
                f"{where} variables must be positional numbers like {{{{1}}}}; found {{{{{bad}}}}}",
            )
        ]
    first_seen: list[int] = []
    for name in names:
        number = int(name)
        if number not in first_seen:
            first_seen.append(number)
    expected = list(range(1, len(first_seen) + 1))
    if first_seen != expected:
        found = ", ".join(f"{{{{{number}}}}}" for number in first_seen)
        return [
            Violation(
                "variables_out_of_order",
                f"{where} variables must be numbered {{{{1}}}} to {{{{{len(first_seen)}}}}} "
                f"in order; found {found}",
            )
        ]
    return []


def _example_values(component: Mapping[str, Any], key: str) -> list[Any]:
    example = component.get("example")
    if not isinstance(example, Mapping):
        return []
    values = example.get(key)
    if key == "body_text" and isinstance(values, list) and values and isinstance(values[0], list):
        values = values[0]  # Meta nests body examples one level deeper
    return list(values) if isinstance(values, list) else []


def _check_examples(where: str, count: int, values: list[Any]) -> list[Violation]:
    if count and (len(values) < count or not all(isinstance(v, str) and v for v in values[:count])):
        return [
            Violation(
                "variable_examples_missing",
                f"{where} has {count} variable(s); give one example value for each",
            )
        ]
    return []


def _distinct(names: Iterable[str]) -> int:
    return len(set(names))


def validate_template(category: str, components: Sequence[Any]) -> list[Violation]:
    """Every Meta rule the template breaks (empty: it may be submitted)."""
    violations: list[Violation] = []
    by_type: dict[str, Mapping[str, Any]] = {}
    for component in components:
        if not isinstance(component, Mapping):
            violations.append(Violation("component_shape", "Each component must be an object"))
            continue
        kind = str(component.get("type", "")).upper()
        if kind not in COMPONENT_TYPES:
            violations.append(
                Violation("component_type", f"Unknown component type {kind or '(missing)'}")
            )
            continue
        if kind in by_type:
            violations.append(Violation("component_repeated", f"Only one {kind} component allowed"))
            continue
        by_type[kind] = component

    body = by_type.get("BODY")
    body_text = body.get("text") if body is not None else None
    if not isinstance(body_text, str) or not body_text.strip():
        violations.append(Violation("body_required", "A BODY component with text is required"))
        body_text = ""
    elif len(body_text) > MAX_BODY_LENGTH:
        violations.append(
            Violation(
                "body_too_long",
                f"Body text is {len(body_text)} characters; at most {MAX_BODY_LENGTH} allowed",
            )
        )
    body_variables = _variables(body_text)
    violations += _check_numbering("Body", body_variables)
    if body is not None and body_variables:
        violations += _check_examples(
            "Body", _distinct(body_variables), _example_values(body, "body_text")
        )

    header = by_type.get("HEADER")
    if header is not None:
        violations += _check_header(header)

    footer = by_type.get("FOOTER")
    if footer is not None:
        text = footer.get("text")
        if not isinstance(text, str) or not text:
            violations.append(Violation("footer_text_required", "A FOOTER needs text"))
        elif len(text) > MAX_FOOTER_LENGTH:
            violations.append(
                Violation(
                    "footer_too_long",
                    f"Footer text is {len(text)} characters; at most {MAX_FOOTER_LENGTH} allowed",
                )
            )
        elif _variables(text):
            violations.append(Violation("footer_variables", "Footer text cannot hold variables"))

    buttons_component = by_type.get("BUTTONS")
    buttons: list[Any] = []
    if buttons_component is not None:
        raw = buttons_component.get("buttons")
        buttons = list(raw) if isinstance(raw, list) else []
        violations += _check_buttons(buttons)

    if category == "AUTHENTICATION":
        violations += _check_authentication(header, body_text, body_variables, buttons)
    return violations


def _check_header(header: Mapping[str, Any]) -> list[Violation]:
    violations: list[Violation] = []
    header_format = str(header.get("format", "TEXT")).upper()
    if header_format == "TEXT":
        text = header.get("text")
        if not isinstance(text, str) or not text:
            return [Violation("header_text_required", "A TEXT header needs text")]
        if len(text) > MAX_HEADER_TEXT_LENGTH:
            violations.append(
                Violation(
                    "header_too_long",
                    f"Header text is {len(text)} characters; at most "
                    f"{MAX_HEADER_TEXT_LENGTH} allowed",
                )
            )
        names = _variables(text)
        if _distinct(names) > MAX_HEADER_VARIABLES:
            violations.append(
                Violation("header_variables", "A header can hold at most one variable")
            )
        else:
            violations += _check_numbering("Header", names)
            violations += _check_examples(
                "Header", _distinct(names), _example_values(header, "header_text")
            )
    elif header_format not in MEDIA_FORMATS:
        violations.append(
            Violation(
                "header_format",
                f"Header format {header_format} is not one of TEXT, IMAGE, VIDEO, DOCUMENT",
            )
        )
    return violations


def _check_buttons(buttons: list[Any]) -> list[Violation]:
    violations: list[Violation] = []
    if not buttons:
        return [Violation("buttons_empty", "A BUTTONS component needs at least one button")]
    if len(buttons) > MAX_BUTTONS:
        violations.append(
            Violation("too_many_buttons", f"{len(buttons)} buttons; at most {MAX_BUTTONS} allowed")
        )
    kinds = [str(b.get("type", "")).upper() if isinstance(b, Mapping) else "" for b in buttons]
    if kinds.count("URL") > MAX_URL_BUTTONS:
        violations.append(
            Violation("too_many_url_buttons", f"At most {MAX_URL_BUTTONS} URL buttons allowed")
        )
    if kinds.count("PHONE_NUMBER") > MAX_PHONE_BUTTONS:
        violations.append(
            Violation(
                "too_many_phone_buttons", f"At most {MAX_PHONE_BUTTONS} PHONE_NUMBER button allowed"
            )
        )
    # Quick replies form one group: no other button between two of them.
    quick = [index for index, kind in enumerate(kinds) if kind == "QUICK_REPLY"]
    if quick and quick[-1] - quick[0] + 1 != len(quick):
        violations.append(
            Violation(
                "quick_replies_not_grouped",
                "QUICK_REPLY buttons must be grouped together, not mixed with other buttons",
            )
        )
    for index, button in enumerate(buttons):
        if not isinstance(button, Mapping):
            violations.append(Violation("button_shape", f"Button {index + 1} must be an object"))
            continue
        text = button.get("text")
        if not isinstance(text, str) or not text:
            violations.append(Violation("button_text_required", f"Button {index + 1} needs text"))
        elif len(text) > MAX_BUTTON_TEXT_LENGTH:
            violations.append(
                Violation(
                    "button_text_too_long",
                    f"Button {index + 1} text is over {MAX_BUTTON_TEXT_LENGTH} characters",
                )
            )
        if kinds[index] == "URL" and not (
            isinstance(button.get("url"), str) and URL_IN_TEXT.match(button["url"])
        ):
            violations.append(
                Violation("button_url_required", f"URL button {index + 1} needs an http(s) url")
            )
        if kinds[index] == "PHONE_NUMBER" and not button.get("phone_number"):
            violations.append(
                Violation(
                    "button_phone_required", f"PHONE_NUMBER button {index + 1} needs phone_number"
                )
            )
    return violations


def _check_authentication(
    header: Mapping[str, Any] | None,
    body_text: str,
    body_variables: list[str],
    buttons: list[Any],
) -> list[Violation]:
    """Authentication templates carry a one-time code and nothing a phisher could use."""
    violations: list[Violation] = []
    if header is not None and str(header.get("format", "TEXT")).upper() in MEDIA_FORMATS:
        violations.append(
            Violation("authentication_media", "AUTHENTICATION templates cannot have a media header")
        )
    if _distinct(body_variables) != 1:
        violations.append(
            Violation(
                "authentication_code_variable",
                "AUTHENTICATION body must hold exactly one variable, the code",
            )
        )
    if URL_IN_TEXT.search(body_text):
        violations.append(
            Violation("authentication_urls", "AUTHENTICATION body cannot contain URLs")
        )
    for button in buttons:
        kind = str(button.get("type", "")).upper() if isinstance(button, Mapping) else ""
        if kind in ("URL", "PHONE_NUMBER"):
            violations.append(
                Violation(
                    "authentication_buttons",
                    "AUTHENTICATION templates allow only OTP and QUICK_REPLY buttons",
                )
            )
            break
    return violations
