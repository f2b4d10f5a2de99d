"""The platform for test-mode channels: behaves as docs/api.md's Test mode says, same interface.

It keeps the business account's templates in its own table (as the platform keeps them),
reviews each submission with Meta's content rules, and reports outcomes the way the platform
does: as signed webhook callbacks (`X-Hub-Signature-256` with the app secret) handed to a
`CallbackSink`, which posts them to the same inbound handler the platform calls. Messages to
the magic numbers of docs/api.md fail or stop short of `read`; any other number goes sent →
delivered → read within a few seconds.
"""

from __future__ import annotations

import secrets
from typing import Any, Protocol

import orjson
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.integrations.whatsapp import library, payloads
from app.integrations.whatsapp.errors import InvalidParameter, Undeliverable
from app.integrations.whatsapp.simulator_models import SimulatedTemplate
from app.integrations.whatsapp.types import (
    CreatedTemplate,
    LibraryFilters,
    PlatformTemplate,
    SentMessage,
    TemplateMessage,
    TemplateSpec,
)
from app.integrations.whatsapp.validator import rejected_reason, validate_template

INVALID_NUMBER = "+15005550001"
NOT_ON_WHATSAPP = "+15005550009"
NEVER_READ = "+15005550010"
# Seconds after the send at which each status callback is due.
SENT_AFTER, DELIVERED_AFTER, READ_AFTER = 0.0, 1.0, 2.0


class CallbackSink(Protocol):
    """Where the simulator's webhook callbacks go: signed raw body, due after `delay`."""

    def post(self, body: bytes, signature: str, delay: float) -> None: ...


class Simulator:
    def __init__(
        self,
        session: AsyncSession,
        sink: CallbackSink,
        app_secret: str,
        *,
        business_account_id: str,
        display_phone_number: str = "",
    ) -> None:
        self._session = session
        self._sink = sink
        self._app_secret = app_secret
        self._business_account_id = business_account_id
        self._display = display_phone_number

    def _callback(self, payload: dict[str, Any], delay: float = 0.0) -> None:
        body = orjson.dumps(payload)
        self._sink.post(body, payloads.sign(self._app_secret, body), delay)

    # --- templates ---------------------------------------------------------------------

    async def create_template(
        self, business_account_id: str, spec: TemplateSpec
    ) -> CreatedTemplate:
        existing = await self._session.scalar(
            select(SimulatedTemplate.id).where(
                SimulatedTemplate.business_account_id == business_account_id,
                SimulatedTemplate.name == spec.name,
                SimulatedTemplate.language == spec.language,
            )
        )
        if existing is not None:
            raise InvalidParameter(
                "Invalid parameter",
                code=100,
                subcode=2388024,
                http_status=400,
                details=f'Message template "{spec.name}" already exists in this language',
            )
        violations = validate_template(spec.category, spec.components)
        status = "REJECTED" if violations else "APPROVED"
        template = SimulatedTemplate(
            id=str(secrets.randbelow(9 * 10**15) + 10**15),
            business_account_id=business_account_id,
            name=spec.name,
            language=spec.language,
            category=spec.category,
            components=spec.components,
            status=status,
            quality_score="" if violations else "GREEN",
            rejected_reason=rejected_reason(violations) if violations else None,
        )
        self._session.add(template)
        await self._session.flush()
        # The review finishes at once; the platform reports it by webhook.
        self._callback(
            payloads.template_status_update(
                business_account_id,
                template.id,
                spec.name,
                spec.language,
                status,
                template.rejected_reason,
            )
        )
        if not violations:
            self._callback(
                payloads.template_quality_update(
                    business_account_id, template.id, spec.name, spec.language, "UNKNOWN", "GREEN"
                )
            )
        return CreatedTemplate(template.id, "PENDING", spec.category)

    async def list_templates(self, business_account_id: str) -> list[PlatformTemplate]:
        rows = await self._session.scalars(
            select(SimulatedTemplate)
            .where(SimulatedTemplate.business_account_id == business_account_id)
            .order_by(SimulatedTemplate.created_at, SimulatedTemplate.id)
        )
        return [
            PlatformTemplate(
                id=row.id,
                name=row.name,
                language=row.language,
                category=row.category,
                status=row.status,
                components=list(row.components),
                quality_score=row.quality_score,
                rejected_reason=row.rejected_reason,
            )
            for row in rows
        ]

    async def delete_template(
        self, business_account_id: str, name: str, platform_template_id: str | None
    ) -> None:
        statement = delete(SimulatedTemplate).where(
            SimulatedTemplate.business_account_id == business_account_id,
            SimulatedTemplate.name == name,
        )
        if platform_template_id:
            statement = statement.where(SimulatedTemplate.id == platform_template_id)
        result = await self._session.execute(statement)
        if not getattr(result, "rowcount", 0):
            raise InvalidParameter(
                "Invalid parameter",
                code=100,
                subcode=2593002,
                http_status=400,
                details=f"Message template {name} was not found",
            )

    async def browse_library(self, filters: LibraryFilters) -> list[dict[str, Any]]:
        return library.search(filters)

    # --- messages ----------------------------------------------------------------------

    def _accept(self, phone_number_id: str, to: str, category: str = "service") -> SentMessage:
        if to == INVALID_NUMBER:
            raise InvalidParameter(
                "(#131009) Parameter value is not valid",
                code=131009,
                http_status=400,
                details=f"{to} is not a valid phone number",
            )
        message_id = f"wamid.{secrets.token_urlsafe(24)}"
        if to == NOT_ON_WHATSAPP:
            error = Undeliverable("Message undeliverable", code=131026)
            self._status(phone_number_id, message_id, to, "failed", SENT_AFTER, error)
        else:
            # Meta prices a message on its statuses (sent and delivered carry `pricing`).
            pricing = {
                "billable": category != "service",
                "pricing_model": "PMP",
                "category": category,
            }
            self._status(phone_number_id, message_id, to, "sent", SENT_AFTER, pricing=pricing)
            self._status(
                phone_number_id, message_id, to, "delivered", DELIVERED_AFTER, pricing=pricing
            )
            if to != NEVER_READ:
                self._status(phone_number_id, message_id, to, "read", READ_AFTER)
        return SentMessage(message_id, to.lstrip("+"))

    def _status(
        self,
        phone_number_id: str,
        message_id: str,
        to: str,
        status: str,
        delay: float,
        error: Undeliverable | None = None,
        pricing: dict[str, Any] | None = None,
    ) -> None:
        errors = None
        if error is not None:
            errors = [
                {
                    "code": error.code,
                    "title": error.message,
                    "message": error.message,
                    "error_data": {"details": "The recipient is not a WhatsApp user"},
                }
            ]
        self._callback(
            payloads.message_status(
                self._business_account_id,
                phone_number_id,
                self._display,
                message_id,
                to,
                status,
                errors=errors,
                pricing=pricing,
            ),
            delay,
        )

    async def send_text(self, phone_number_id: str, to: str, body: str) -> SentMessage:
        if not body:
            raise InvalidParameter("(#100) The parameter text['body'] is required", code=100)
        return self._accept(phone_number_id, to)

    async def send_template(
        self, phone_number_id: str, to: str, template: TemplateMessage
    ) -> SentMessage:
        found = (
            await self._session.execute(
                select(SimulatedTemplate.status, SimulatedTemplate.category).where(
                    SimulatedTemplate.business_account_id == self._business_account_id,
                    SimulatedTemplate.name == template.name,
                    SimulatedTemplate.language == template.language,
                )
            )
        ).first()
        if found is None or found[0] != "APPROVED":
            raise InvalidParameter(
                "(#132001) Template name does not exist in the translation",
                code=132001,
                details=f"template name ({template.name}) does not exist in {template.language}",
            )
        return self._accept(phone_number_id, to, str(found[1]).lower())
