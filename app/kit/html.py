"""Small helpers for the HTML pages the service serves itself (GraphiQL, the REST reference)."""

from __future__ import annotations

import json


def js_string(value: str) -> str:
    """Encode ``value`` as a JS string literal that is safe inside ``<script>``."""
    encoded = json.dumps(value)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        encoded = encoded.replace(char, escape)
    return encoded.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
