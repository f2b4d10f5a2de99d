"""What the messaging platform takes and answers, independent of the implementation."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

# The default of `SWITCHBOARD_GRAPH_API_VERSION`; every URL is built by `graph_root`.
GRAPH_API_VERSION = "v19.0"


def graph_root(base_url: str, version: str = GRAPH_API_VERSION) -> str:
    """`https://graph.facebook.com/v19.0`: the prefix of every Graph API URL."""
    return f"{base_url.rstrip('/')}/{version}"


# A business-scoped user id (BSUID): ISO country code, a dot, up to 128 alphanumerics; a
# parent BSUID has `ENT.` after the country (`US.13491208655302741918`, `US.ENT.1181…`).
USER_ID = re.compile(r"[A-Z]{2}\.(?:ENT\.)?[A-Za-z0-9]{1,128}")


def is_user_id(value: object) -> bool:
    return isinstance(value, str) and USER_ID.fullmatch(value) is not None


def recipient_fields(address: str) -> dict[str, str]:
    """How the messages endpoint names a recipient: `to` for a phone number, `recipient` for
    a business-scoped user id (Meta takes `to` first when both are given; one is sent)."""
    return {"recipient": address} if is_user_id(address) else {"to": address}


@dataclass(frozen=True, slots=True)
class TemplateSpec:
    """A message template as submitted to the platform."""

    name: str
    language: str
    category: str
    components: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class CreatedTemplate:
    id: str
    status: str
    category: str


@dataclass(frozen=True, slots=True)
class PlatformTemplate:
    """A template as the platform lists it."""

    id: str
    name: str
    language: str
    category: str
    status: str
    components: list[dict[str, Any]]
    # GREEN / YELLOW / RED, or "" while the platform has no rating (UNKNOWN).
    quality_score: str
    rejected_reason: str | None = None


@dataclass(frozen=True, slots=True)
class LibraryFilters:
    search: str | None = None
    topic: str | None = None
    usecase: str | None = None
    industry: str | None = None
    language: str | None = None
    name: str | None = None

    def as_query(self) -> dict[str, str]:
        return {key: value for key, value in self.items() if value}

    def items(self) -> list[tuple[str, str | None]]:
        return [
            ("search", self.search),
            ("topic", self.topic),
            ("usecase", self.usecase),
            ("industry", self.industry),
            ("language", self.language),
            ("name", self.name),
        ]


@dataclass(frozen=True, slots=True)
class SentMessage:
    """The platform accepted a message: its id (`wamid.…`) and the recipient's WhatsApp id."""

    message_id: str
    wa_id: str


@dataclass(frozen=True, slots=True)
class PhoneNumber:
    """A business phone number as the platform shows it to a token that may read it."""

    id: str
    display_phone_number: str
    verified_name: str | None = None


@dataclass(frozen=True, slots=True)
class TemplateMessage:
    name: str
    language: str
    # Positional body parameters, `{{1}}..{{n}}` in order.
    body_parameters: list[str] = field(default_factory=list)


class WhatsAppPlatform(Protocol):
    """One business account and its phone numbers, as one channel's access token sees them.

    Implemented by the Graph API client (live channels) and the simulator (test mode).
    """

    async def create_template(
        self, business_account_id: str, spec: TemplateSpec
    ) -> CreatedTemplate:
        """Submit a template for review."""
        ...

    async def list_templates(self, business_account_id: str) -> list[PlatformTemplate]:
        """Every template of the business account (all pages)."""
        ...

    async def delete_template(
        self, business_account_id: str, name: str, platform_template_id: str | None
    ) -> None:
        """Delete one template (by id when known, else every language of the name)."""
        ...

    async def browse_library(self, filters: LibraryFilters) -> list[dict[str, Any]]:
        """Entries of Meta's template library matching every given filter."""
        ...

    async def send_text(self, phone_number_id: str, to: str, body: str) -> SentMessage: ...

    async def send_template(
        self, phone_number_id: str, to: str, template: TemplateMessage
    ) -> SentMessage: ...
