"""Service functions called by name at call time from the kit's generated handlers."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

FunctionT = TypeVar("FunctionT", bound=Callable[..., Any])


def late_bound(function: FunctionT) -> FunctionT:
    """`function`, looked up in its module on every call, as a hand-written handler that
    says `service.get_contact(...)` does: replacing the module's function (a test's
    monkeypatch) reaches the generated handlers too. Lambdas and closures are kept as given."""
    module = sys.modules.get(function.__module__)
    name = function.__name__
    if module is None or getattr(module, name, None) is not function:
        return function

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(module, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return cast(FunctionT, call)
