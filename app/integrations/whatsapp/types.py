"""What the messaging platform takes and answers, independent of the implementation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

GRAPH_API_VERSION = "v19.0"


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
