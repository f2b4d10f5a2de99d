"""/api/v1/provider-credentials: routes → provider credentials service → the public shape."""

from __future__ import annotations

from starlette.responses import Response

from app.access.scopes import Scope
from app.kit.http_errors import json_response
from app.provider_credentials import service
from app.provider_credentials.cache import credential_cache
from app.provider_credentials.schemas import (
    ProviderCredentialList,
    ProviderCredentialPut,
    ProviderCredentialResponse,
    credential_to_public,
)
from rest_compat.endpoint import Operation, RequestContext


async def put_credential(ctx: RequestContext) -> Response:
    provider = service.known_provider(ctx.path_param("provider"))  # 404 before the body
    credential = await service.put_credential(
        ctx.session,
        ctx.subject,
        provider,
        ctx.body(ProviderCredentialPut),
        service.credential_box(ctx.resources.secret_key),
        allow_private=ctx.allow_private_urls,
        cache=credential_cache(ctx.resources.redis),
    )
    return json_response(credential_to_public(credential))


async def list_credentials(ctx: RequestContext) -> Response:
    rows = await service.list_credentials(ctx.session, ctx.subject)
    return json_response({"data": [credential_to_public(row) for row in rows]})


async def delete_credential(ctx: RequestContext) -> Response:
    await service.delete_credential(
        ctx.session,
        ctx.subject,
        ctx.path_param("provider"),
        cache=credential_cache(ctx.resources.redis),
    )
    return Response(status_code=204)


_TAG = "provider-credentials"
OPERATIONS = (
    Operation(
        "PUT",
        "/provider-credentials/{provider}",
        put_credential,
        Scope.FULL_ACCESS,
        "Set the organization's key for a provider (stored encrypted, never shown)",
        _TAG,
        request_model=ProviderCredentialPut,
        response_model=ProviderCredentialResponse,
        errors=(400, 404, 409, 422),
    ),
    Operation(
        "GET",
        "/provider-credentials",
        list_credentials,
        Scope.FULL_ACCESS,
        "List the organization's provider credentials (keys shown by their last four characters)",
        _TAG,
        response_model=ProviderCredentialList,
    ),
    Operation(
        "DELETE",
        "/provider-credentials/{provider}",
        delete_credential,
        Scope.FULL_ACCESS,
        "Remove the organization's credential for a provider",
        _TAG,
        status_code=204,
        errors=(404,),
    ),
)
