"""Public (REST and event) shapes derived from the response schemas that document them.

A response model lists the fields of the shape in order; most are the row's or entity's
attribute of the same name, and `public_shape` makes the serializer from that list, so a
field added to the model is served without a second list to keep in step. Values stay
Python objects (datetimes included): app.kit.jsonutil.dumps writes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

Serializer = Callable[[Any], dict[str, Any]]


def public_shape(response: type[BaseModel], **convert: Callable[[Any], Any]) -> Serializer:
    """The serializer of `response`'s shape: each field is the attribute of the same name,
    passed through `convert[name]` where one is given (`tags=lambda tags: tags or []`)."""
    names = tuple(response.model_fields)
    unknown = set(convert) - set(names)
    if unknown:
        raise ValueError(f"{response.__name__} has no field {sorted(unknown)}")
    if not all(name.isidentifier() for name in names):
        raise ValueError(f"{response.__name__} has a field that is not an identifier")
    # Generated as one dict display, as a hand-written serializer would be (like dataclasses
    # generates __init__): three times faster per row than reading the fields in a loop, and
    # REST lists serialize every row. Only identifiers checked above reach the source.
    namespace: dict[str, Any] = {f"convert_{name}": function for name, function in convert.items()}
    items = ", ".join(
        f"{name!r}: convert_{name}(item.{name})" if name in convert else f"{name!r}: item.{name}"
        for name in names
    )
    exec(f"def to_public(item):\n    return {{{items}}}\n", namespace)  # noqa: S102
    to_public: Serializer = namespace["to_public"]
    to_public.__doc__ = f"The public shape of {response.__name__} (app/kit/serialize.py)."
    to_public.__qualname__ = f"public_shape.<{response.__name__}>"
    return to_public
