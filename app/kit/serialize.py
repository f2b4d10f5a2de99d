"""Public (REST and event) shapes derived from the response schemas that document them.

A response model lists the fields of the shape in order; most are the row's or entity's
attribute of the same name, and `public_shape` makes the serializer from that list, so a
field added to the model is served without a second list to keep in step. Values stay
Python objects (datetimes included): app.core.jsonutil.dumps writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

Serializer = Callable[[Any], dict[str, Any]]


# One entry of a serializer: (public name, attribute read, conversion). With an empty
# attribute the conversion receives the whole item (a value computed from several columns).
Entry = tuple[str, str, Callable[[Any], Any] | None]


def public_shape(response: type[BaseModel], **convert: Callable[[Any], Any]) -> Serializer:
    """The serializer of `response`'s shape: each field is the attribute of the same name,
    passed through `convert[name]` where one is given (`tags=lambda tags: tags or []`)."""
    names = tuple(response.model_fields)
    unknown = set(convert) - set(names)
    if unknown:
        raise ValueError(f"{response.__name__} has no field {sorted(unknown)}")
    return compile_serializer(
        response.__name__, [(name, name, convert.get(name)) for name in names]
    )


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
    to_public.__qualname__ = f"public_shape.<{shape}>"
    return to_public
