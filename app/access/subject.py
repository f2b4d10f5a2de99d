"""Who is calling: the one object both surfaces pass to services."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from app.access.scopes import Scope


class PrincipalType(StrEnum):
    API_KEY = "api_key"
    USER = "user"


@dataclass(frozen=True, slots=True)
class Subject:
    organization_id: str
    principal_id: str
    principal_type: PrincipalType
    scopes: frozenset[Scope]
    livemode: bool

    def has_scope(self, scope: Scope) -> bool:
        return Scope.FULL_ACCESS in self.scopes or scope in self.scopes

    @property
    def user_id(self) -> str | None:
        return self.principal_id if self.principal_type is PrincipalType.USER else None
