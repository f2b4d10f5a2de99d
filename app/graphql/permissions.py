"""Scope checks declared on fields, never inside resolver bodies."""

from __future__ import annotations

from typing import Any

from strawberry.extensions import FieldExtension
from strawberry.permission import BasePermission, PermissionExtension
from strawberry.types import Info

from app.access.scopes import Scope
from app.graphql.errors import Forbidden, Unauthenticated


class HasScope(BasePermission):
    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def has_permission(self, source: Any, info: Info, **kwargs: Any) -> bool:
        subject = info.context.subject
        if subject is None:
            raise Unauthenticated()
        if not subject.has_scope(self.scope):
            raise Forbidden(f"This credential does not have the required scope: {self.scope}")
        return True


def requires(scope: Scope) -> list[FieldExtension]:
    """`extensions=requires(Scope.X)` on a field: the same scope as the matching REST route."""
    return [PermissionExtension(permissions=[HasScope(scope)], use_directives=False)]
