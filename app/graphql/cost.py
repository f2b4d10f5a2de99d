"""What a document would cost to execute, measured in one pass before it is validated.

Fragment spreads make a document's executed size exponential in its length: fragment G0
spreading G1 twice, G1 spreading G2 twice, and so on, is 1.3 KB at 30 levels and asks for
2^30 selections. Walking the spreads again at every use (as per-rule limiters do) costs as
much as executing them. Here every fragment is measured once and its totals are reused at each
spread (multiplied, never re-walked), so measuring is linear in the document's length whatever
it expands to. Depth, aliases and selections are all counted after expansion, per operation.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
)

__all__ = ["CostLimits", "DocumentCost", "cost_errors", "measure"]


@dataclass(frozen=True, slots=True)
class DocumentCost:
    """Totals of one selection set with every fragment spread expanded."""

    depth: int  # nested levels of fields with sub-selections (introspection fields: 0)
    aliases: int
    selections: int  # fields, counted once per place they would be executed

    def __add__(self, other: DocumentCost) -> DocumentCost:
        return DocumentCost(
            max(self.depth, other.depth),
            self.aliases + other.aliases,
            self.selections + other.selections,
        )


_NOTHING = DocumentCost(0, 0, 0)


@dataclass(frozen=True, slots=True)
class CostLimits:
    max_depth: int
    max_aliases: int
    max_selections: int


class _Measure:
    def __init__(self, document: DocumentNode) -> None:
        self.fragments = {
            definition.name.value: definition
            for definition in document.definitions
            if isinstance(definition, FragmentDefinitionNode)
        }
        self.memo: dict[str, DocumentCost] = {}
        self.in_progress: set[str] = set()

    def selection_set(self, selection_set: SelectionSetNode | None) -> DocumentCost:
        total = _NOTHING
        if selection_set is None:
            return total
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                total = total + self.field(selection)
            elif isinstance(selection, InlineFragmentNode):
                total = total + self.selection_set(selection.selection_set)
            elif isinstance(selection, FragmentSpreadNode):
                total = total + self.fragment(selection.name.value)
        return total

    def field(self, node: FieldNode) -> DocumentCost:
        below = self.selection_set(node.selection_set)
        # Introspection is bounded by graphql-core's MaxIntrospectionDepthRule instead.
        counts_depth = node.selection_set is not None and not node.name.value.startswith("__")
        return DocumentCost(
            below.depth + 1 if counts_depth else 0,
            below.aliases + (1 if node.alias is not None else 0),
            below.selections + 1,
        )

    def fragment(self, name: str) -> DocumentCost:
        found = self.memo.get(name)
        if found is not None:
            return found
        definition = self.fragments.get(name)
        # Unknown and cyclic fragments are reported by the specified validation rules.
        if definition is None or name in self.in_progress:
            return _NOTHING
        self.in_progress.add(name)
        cost = self.selection_set(definition.selection_set)
        self.in_progress.discard(name)
        self.memo[name] = cost
        return cost


def measure(document: DocumentNode) -> dict[OperationDefinitionNode, DocumentCost]:
    """The expanded cost of each operation of the document, fragments measured once each."""
    measuring = _Measure(document)
    return {
        definition: measuring.selection_set(definition.selection_set)
        for definition in document.definitions
        if isinstance(definition, OperationDefinitionNode)
    }


def cost_errors(document: DocumentNode, limits: CostLimits) -> list[GraphQLError]:
    """One error per limit an operation exceeds; empty when the document may be validated."""
    try:
        costs = measure(document)
    except RecursionError:
        return [
            GraphQLError(
                "The document is nested too deeply", extensions={"code": "query_too_complex"}
            )
        ]
    errors: list[GraphQLError] = []
    for operation, cost in costs.items():
        name = operation.name.value if operation.name else "anonymous"
        if cost.depth > limits.max_depth:
            errors.append(
                GraphQLError(
                    f"'{name}' exceeds maximum operation depth of {limits.max_depth}",
                    operation,
                    extensions={"code": "query_too_complex"},
                )
            )
        if cost.aliases > limits.max_aliases:
            errors.append(
                GraphQLError(
                    f"{cost.aliases} aliases found. Allowed: {limits.max_aliases}",
                    operation,
                    extensions={"code": "query_too_complex"},
                )
            )
        if cost.selections > limits.max_selections:
            errors.append(
                GraphQLError(
                    f"'{name}' selects {cost.selections} fields once fragments are expanded."
                    f" Allowed: {limits.max_selections}",
                    operation,
                    extensions={"code": "query_too_complex"},
                )
            )
    return errors


def select_operation(
    document: DocumentNode, operation_name: str | None
) -> OperationDefinitionNode | None:
    """The operation a request runs: the named one, or the only one (GraphQL spec,
    GetOperation()); None when there is no such operation or the choice is ambiguous."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if operation_name is None:
        return operations[0] if len(operations) == 1 else None
    for operation in operations:
        if operation.name is not None and operation.name.value == operation_name:
            return operation
    return None


def root_field_calls(
    document: DocumentNode, operation: OperationDefinitionNode, field_name: str
) -> int:
    """How many times execution would call root field `field_name`: once per response key,
    as fields are merged by key and each fragment is spread once per selection set."""
    fragments = {
        definition.name.value: definition
        for definition in document.definitions
        if isinstance(definition, FragmentDefinitionNode)
    }
    keys: set[str] = set()
    visited: set[str] = set()
    pending = [operation.selection_set]
    while pending:
        for selection in pending.pop().selections:
            if isinstance(selection, FieldNode):
                if selection.name.value == field_name:
                    keys.add(selection.alias.value if selection.alias else field_name)
            elif isinstance(selection, InlineFragmentNode):
                pending.append(selection.selection_set)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                if name not in visited and name in fragments:
                    visited.add(name)
                    pending.append(fragments[name].selection_set)
    return len(keys)
