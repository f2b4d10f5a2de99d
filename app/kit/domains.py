"""Collects each domain's surfaces from its package, so registering a domain is one line.

A domain package listed in `app.domains.DOMAINS` may hold any of these modules; the kit
imports the ones that exist and takes a named attribute from each:

| module     | attribute                        | collected by                         |
| ---------- | -------------------------------- | ------------------------------------ |
| models     | (the import registers its tables) | app/tables.py (Base.metadata)     |
| graphql    | Query, Mutation, Subscription    | app/graphql/schema.py (root types)   |
| rest       | OPERATIONS                       | rest_compat/app.py (/api/v1 routes)  |
| tasks      | TASKS                            | the job engine (workers/jobs.py)     |
| callbacks  | ROUTES (outside /api/v1)         | app/main.py (platform callbacks)     |

Modules are taken in the order of DOMAINS, which is also the order of the merged root fields
in schema.graphql and of the routes in the OpenAPI document.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from app.domains import DOMAINS


def surface_modules(surface: str, domains: Iterable[str] = DOMAINS) -> list[ModuleType]:
    """`<domain>.<surface>` of every domain that has that module, imported.

    A domain that is not a package fails loudly (a typo in DOMAINS must not drop a domain),
    and so does an error raised while importing a module that exists.
    """
    modules = []
    for package in domains:
        name = f"{package}.{surface}"
        if importlib.util.find_spec(name) is not None:
            modules.append(importlib.import_module(name))
    return modules


def collect(surface: str, attribute: str, domains: Iterable[str] = DOMAINS) -> list[Any]:
    """The `attribute` of every domain's `surface` module that defines it."""
    return [
        getattr(module, attribute)
        for module in surface_modules(surface, domains)
        if hasattr(module, attribute)
    ]
