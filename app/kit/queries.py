"""Query-string inputs shared by list endpoints (validated like bodies: 422 on bad input)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.kit.pagination import MAX_LIMIT, CursorParams


class CursorQuery(BaseModel):
    """Envelope C inputs: `limit`, `starting_after`, `ending_before`."""

    # Frozen: parsed query strings are shared between requests (see RequestContext.query).
    model_config = ConfigDict(extra="ignore", frozen=True)

    limit: int = Field(default=20, ge=1, le=MAX_LIMIT)
    starting_after: str | None = Field(default=None, max_length=64)
    ending_before: str | None = Field(default=None, max_length=64)

    def cursor(self) -> CursorParams:
        return CursorParams(self.limit, self.starting_after, self.ending_before)
