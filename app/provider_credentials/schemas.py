"""Provider credential inputs (REST and GraphQL) and the public shape.

The body is `api_key` and `base_url?` for every provider, plus fields of its own for the
providers that need more than a key: Cal.com's `event_type_id`; Google Calendar's
`calendar_id`, `slot_minutes` and OAuth refresh fields (`client_id`, `client_secret`,
`refresh_token`, `token_url`). A field that belongs to another provider is ignored, as every
field the service does not know is. docs/api.md, "Provider credentials", lists them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import strawberry
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.agents.config import HttpUrl
from app.kit.shape import Rest, Shape, column
from app.kit.validation import NOT_BLANK_PATTERN
from app.provider_credentials import models

Provider = Literal[
    "openai",
    "anthropic",
    "groq",
    "deepgram",
    "elevenlabs",
    "cartesia",
    "cal_com",
    "google_calendar",
]
PROVIDERS: tuple[str, ...] = Provider.__args__  # type: ignore[attr-defined]
LLM_PROVIDERS = ("openai", "anthropic", "groq")

# Fields a provider takes besides api_key and base_url, and which of them are secret.
PROVIDER_FIELDS: dict[str, tuple[str, ...]] = {
    "cal_com": ("event_type_id",),
    "google_calendar": (
        "calendar_id",
        "slot_minutes",
        "client_id",
        "client_secret",
        "refresh_token",
        "token_url",
    ),
}

Secret = Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=NOT_BLANK_PATTERN)]
ShortText = Annotated[
    str, StringConstraints(min_length=1, max_length=255, pattern=NOT_BLANK_PATTERN)
]


class ProviderCredentialPut(BaseModel):
    """PUT /api/v1/provider-credentials/{provider}: replaces the stored credential whole."""

    model_config = ConfigDict(extra="ignore")

    api_key: Secret = Field(
        description="The provider's API key (Google Calendar: an OAuth access token); "
        "stored encrypted, never returned"
    )
    base_url: HttpUrl | None = Field(
        default=None,
        description="Another endpoint for this provider (a proxy, a compatible server); "
        "passes the outbound URL guard",
    )
    event_type_id: int | None = Field(
        default=None, ge=1, description="cal_com: the event type booked and offered"
    )
    calendar_id: ShortText | None = Field(
        default=None, description="google_calendar: the calendar (default `primary`)"
    )
    slot_minutes: int | None = Field(
        default=None, ge=5, le=480, description="google_calendar: length of a slot (default 30)"
    )
    client_id: ShortText | None = Field(default=None, description="google_calendar: OAuth client")
    client_secret: Secret | None = Field(
        default=None, description="google_calendar: OAuth client secret (encrypted)"
    )
    refresh_token: Secret | None = Field(
        default=None, description="google_calendar: OAuth refresh token (encrypted)"
    )
    token_url: HttpUrl | None = Field(
        default=None,
        description="google_calendar: OAuth token endpoint (default Google's); passes the guard",
    )

    def options(self, provider: str) -> dict[str, Any]:
        """The fields of `provider` that were given; another provider's are ignored, as
        every unknown field is."""
        names = PROVIDER_FIELDS.get(provider, ())
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


@strawberry.type(description="An organization's key for one provider (never shown).")
class ProviderCredential:
    """The public shape, declared once (app/kit/shape.py)."""

    provider: str = column(models.ProviderCredential.provider, rest=Rest(annotation=Provider))
    base_url: str | None = column(models.ProviderCredential.base_url)
    api_key_last4: str = column(models.ProviderCredential.api_key_last4)
    updated_at: datetime = column(models.ProviderCredential.updated_at)


CREDENTIAL = Shape(
    ProviderCredential,
    rest_name="ProviderCredentialResponse",
    rest_doc="The public shape: the key is never shown, only its last four characters.",
)
ProviderCredentialResponse = CREDENTIAL.rest_model
credential_to_public = CREDENTIAL.to_public


class ProviderCredentialList(BaseModel):
    # The derived model is a value to mypy (app/kit/shape.py); pydantic reads it as a class.
    data: list[ProviderCredentialResponse]  # type: ignore[valid-type]
