"""The serializers of public (REST and event) shapes, compiled from their entries.

A shape declaration (app/kit/shape.py) lists its REST fields in order, each the row's or
entity's attribute it reads and an optional conversion; `compile_serializer` makes the
function that builds the dict of a row from that list. Values stay Python objects (datetimes
included): app.core.jsonutil.dumps writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Serializer = Callable[[Any], dict[str, Any]]


# One entry of a serializer: (public name, attribute read, conversion). With an empty
# attribute the conversion receives the whole item (a value computed from several columns).
Entry = tuple[str, str, Callable[[Any], Any] | None]


def compile_serializer(shape: str, entries: Sequence[Entry]) -> Serializer:
    """A serializer building the dict of `entries` in their order (see `Entry`)."""
    if not all(
        name.isidentifier() and (not attr or attr.isidentifier()) for name, attr, _c in entries
    ):
        raise ValueError(f"{shape} has a field that is not an identifier")
    # Generated as one dict display, as a hand-written serializer would be (like dataclasses
    # generates __init__): three times faster per row than reading the fields in a loop, and
    # REST lists serialize every row. Only identifiers checked above reach the source.
    namespace: dict[str, Any] = {
        f"convert_{name}": function for name, _attr, function in entries if function is not None
    }
    items = []
    for name, attr, function in entries:
        value = f"item.{attr}" if attr else "item"
        items.append(f"{name!r}: convert_{name}({value})" if function else f"{name!r}: {value}")
    exec(f"def to_public(item):\n    return {{{', '.join(items)}}}\n", namespace)  # noqa: S102
    to_public: Serializer = namespace["to_public"]
    to_public.__doc__ = f"The public shape of {shape} (app/kit/serialize.py)."
    to_public.__qualname__ = f"to_public.<{shape}>"
    return to_public
