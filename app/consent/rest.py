"""/api/v1/consent/settings: the organization's consent keywords and confirmation replies."""

from __future__ import annotations

from starlette.responses import Response

from app.access.scopes import Scope
from app.consent import service
from app.consent.schemas import (
    ConsentSettingsResponse,
    ConsentSettingsUpdate,
    consent_settings_to_public,
)
from rest_compat.endpoint import Operation, RequestContext, json_response


async def get_consent_settings(ctx: RequestContext) -> Response:
    found = await service.get_consent_settings(ctx.session, ctx.subject)
    return json_response(consent_settings_to_public(found))


async def update_consent_settings(ctx: RequestContext) -> Response:
    stored = await service.update_consent_settings(
        ctx.session, ctx.subject, ctx.body(ConsentSettingsUpdate)
    )
    return json_response(consent_settings_to_public(stored))


_TAG = "consent"
OPERATIONS = (
    Operation(
        "GET",
        "/consent/settings",
        get_consent_settings,
        Scope.FULL_ACCESS,
        "Get the consent keywords and confirmation replies",
        _TAG,
        response_model=ConsentSettingsResponse,
    ),
    Operation(
        "PUT",
        "/consent/settings",
        update_consent_settings,
        Scope.FULL_ACCESS,
        "Change the consent keywords and confirmation replies (fields present replace)",
        _TAG,
        request_model=ConsentSettingsUpdate,
        response_model=ConsentSettingsResponse,
        errors=(400, 422),
    ),
)
