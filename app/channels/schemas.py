"""Channel inputs shared by REST and GraphQL, and the public (REST) shape."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.kit.phone import MAX_PHONE_LENGTH
from app.kit.serialize import public_shape
from app.kit.validation import NO_BLANKS_PATTERN

MAX_UPSTREAM_ID_LENGTH = 64
MAX_ACCESS_TOKEN_LENGTH = 4096

# Upstream ids go into the upstream platform's URL paths: URL-safe characters only.
UpstreamId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_UPSTREAM_ID_LENGTH, pattern=r"^[A-Za-z0-9_-]+$"),
]


class ChannelCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    # Format (and a length past 50) is checked by the service: 400, as for contacts' numbers.
    display_phone_number: str = Field(json_schema_extra={"maxLength": MAX_PHONE_LENGTH})
    phone_number_id: UpstreamId
    business_account_id: UpstreamId
    # No white space anywhere: a token pasted with a stray space would only fail upstream.
    access_token: str = Field(
        min_length=1, max_length=MAX_ACCESS_TOKEN_LENGTH, pattern=NO_BLANKS_PATTERN, repr=False
    )
    name: str | None = Field(default=None, min_length=1, max_length=255)


class ChannelResponse(BaseModel):
    """The REST shape; documents the OpenAPI schema. Runtime uses `channel_to_public`."""

    id: str
    organization_id: str
    display_phone_number: str
    phone_number_id: str
    business_account_id: str
    name: str | None
    livemode: bool
    created_at: str
    updated_at: str


# The REST shape of a channel row or entity; the access token is not part of it, ever.
channel_to_public = public_shape(ChannelResponse)
