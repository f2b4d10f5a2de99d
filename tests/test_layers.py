"""The import layers (docs/architecture.md, "Layers"): no arrow runs from a shared layer up into a
domain folder, and no two top-level folders import each other, directly or round a loop.

Every `import` of app/, rest_compat/ and workers/ counts, wherever it stands: at module level,
inside a function, or under `if TYPE_CHECKING:` (a type names its module as surely as a call).
A unit is a top-level folder (app/<name>/, rest_compat/, workers/) or a top-level module of
app/ (app/<name>.py); app/db/migrations, an entry point, is a unit of its own.

There is no allow-list: a GraphQL type that links a dependent domain's type (a contact's recent
calls) gets that field from the dependent domain (`@extends`, app/graphql/links.py).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "rest_compat", "workers")

# Below the domains: anything may import these; they import no domain.
SHARED = frozenset(
    {
        "app/core",  # the clock, ids and the JSON codec: below db and the kit
        "app/kit",  # generic machinery: errors, pagination, rate limits, the event stream
        "app/db",  # engines, the base model, statement runners
        "app/config.py",
        "app/access",  # the credential kernel: subject, scopes, key cache, gate
        "app/idempotency",  # Idempotency-Key records of the REST surface (not a domain)
        "app/resources.py",  # the process's resources
        "app/jobs.py",  # what a job body receives (the worker implements it)
        "app/health.py",
        "app/observability.py",
        "app/cors.py",
        "app/domains.py",  # the domains' names, as data
        "app/tables.py",  # every table (domain models are imported by name, at run time)
        "app/graphql",  # the generic GraphQL endpoint and its helpers
        "rest_compat",  # the generic REST surface
        "workers",
    }
)
# Above everything: the processes' entry points.
# (Alembic's environment is one: it loads every table to compare them with the migrations.)
ROOTS = frozenset({"app/main.py", "app/cli.py", "app/__init__.py", "app/db/migrations"})


def unit_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] not in PACKAGES:
        return None
    if parts[0] != "app":
        return parts[0]
    if len(parts) == 1:
        return "app/__init__.py"
    if parts[1:3] == ["db", "migrations"]:
        return "app/db/migrations"
    if (ROOT / "app" / parts[1]).is_dir():
        return f"app/{parts[1]}"
    return f"app/{parts[1]}.py"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> Iterator[tuple[str, int]]:
    """Every module `path` imports, absolute, with its line."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield module, node.lineno
            # `from app import auth` imports the package app.auth.
            for alias in node.names:
                yield f"{module}.{alias.name}", node.lineno


def import_graph() -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) -> where, for every arrow between two units."""
    arrows: dict[tuple[str, str], list[str]] = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if ".venv" in path.parts or "static" in path.parts:
                continue
            source = unit_of(module_name(path))
            for module, line in imported_modules(path):
                target = unit_of(module)
                if source is None or target is None or target == source:
                    continue
                if target.endswith(".py") and not (ROOT / target).exists():
                    continue  # `from app import x` named an attribute, not a module
                where = f"{path.relative_to(ROOT)}:{line}"
                if where not in arrows[(source, target)]:
                    arrows[(source, target)].append(where)
    return arrows


def is_domain(unit: str) -> bool:
    return unit not in SHARED and unit not in ROOTS


def loops(arrows: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The strongly connected groups of units (more than one unit: a loop), by Tarjan."""
    edges: dict[str, set[str]] = defaultdict(set)
    for source, target in arrows:
        edges[source].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(unit: str) -> None:
        index[unit] = low[unit] = len(index)
        stack.append(unit)
        on_stack.add(unit)
        for target in sorted(edges[unit]):
            if target not in index:
                visit(target)
                low[unit] = min(low[unit], low[target])
            elif target in on_stack:
                low[unit] = min(low[unit], index[target])
        if low[unit] == index[unit]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == unit:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for unit in sorted({unit for arrow in arrows for unit in arrow}):
        if unit not in index:
            visit(unit)
    return found


def test_every_unit_is_classified_and_every_listed_unit_exists() -> None:
    units = {unit for arrow in import_graph() for unit in arrow}
    for unit in SHARED | ROOTS:
        assert (ROOT / unit).exists(), f"{unit} is listed but does not exist"
    for domain in ("app/auth", "app/events", "app/organizations"):
        assert domain in units
        assert is_domain(domain)


def upward(arrows: dict[tuple[str, str], list[str]]) -> list[str]:
    """The arrows from a shared layer into a domain, with where they are."""
    return [
        f"{source} -> {target} ({', '.join(where)})"
        for (source, target), where in sorted(arrows.items())
        if source in SHARED and is_domain(target)
    ]


def test_no_shared_layer_imports_a_domain() -> None:
    upward_arrows = upward(import_graph())
    assert not upward_arrows, "a shared layer imports a domain:\n" + "\n".join(upward_arrows)


def test_no_two_folders_import_each_other() -> None:
    arrows = import_graph()
    found = []
    for group in loops(arrows):
        inside = [
            f"  {source} -> {target} ({', '.join(where)})"
            for (source, target), where in sorted(arrows.items())
            if source in group and target in group
        ]
        found.append(" <-> ".join(group) + "\n" + "\n".join(inside))
    assert not found, "import loops between folders:\n" + "\n".join(found)


def test_the_check_sees_an_upward_arrow_and_a_loop() -> None:
    """The rules themselves: a made-up upward arrow and a made-up loop are both caught."""
    arrows = {
        ("app/kit", "app/contacts"): ["x.py:1"],
        ("app/agents", "app/quick_replies"): ["y.py:1"],
        ("app/quick_replies", "app/agents"): ["z.py:1"],
    }
    assert loops(arrows) == [["app/agents", "app/quick_replies"]]
    assert upward(arrows) == ["app/kit -> app/contacts (x.py:1)"]
