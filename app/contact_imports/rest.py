"""/api/v1/contacts/imports: upload a CSV of contacts, follow its progress, download the
rows it refused (docs/api.md, "Contacts in and out")."""

from __future__ import annotations

from starlette.responses import Response, StreamingResponse

from app.access.scopes import Scope
from app.contact_imports import service
from app.contact_imports.schemas import (
    ContactImportResponse,
    ImportOptions,
    contact_import_to_public,
)
from app.kit.queries import CursorQuery
from rest_compat.endpoint import Operation, RequestContext, json_response
from rest_compat.resource import get_handler, list_handler

CSV_MEDIA_TYPE = "text/csv"


async def create_contact_import(ctx: RequestContext) -> Response:
    options = ctx.query(ImportOptions)
    # The credential's read ends before the body streams in; the service opens its own writes.
    await ctx.session.commit()
    headers = ctx.request.headers
    job = await service.create_import(
        ctx.resources,
        ctx.subject,
        options,
        ctx.request.stream(),
        headers.get("content-type"),
        headers.get("content-length"),
    )
    return json_response(contact_import_to_public(job), status_code=202)


list_contact_imports = list_handler(service.list_imports, contact_import_to_public)
get_contact_import = get_handler(service.get_import, "import_id", contact_import_to_public)


async def download_import_errors(ctx: RequestContext) -> Response:
    job = await service.get_import(ctx.session, ctx.subject, ctx.path_param("import_id"))
    resources = ctx.resources
    rows = service.error_report(lambda: resources.session(writes=False), job.id)
    return StreamingResponse(
        rows,
        headers={
            "Content-Type": CSV_MEDIA_TYPE + "; charset=utf-8",
            "Content-Disposition": f'attachment; filename="contact-import-{job.id}-errors.csv"',
            "X-Content-Type-Options": "nosniff",
        },
    )


_TAG = "contacts"
OPERATIONS = (
    Operation(
        "POST",
        "/contacts/imports",
        create_contact_import,
        Scope.FULL_ACCESS,
        "Import contacts from a CSV (multipart field `file`); runs as a job",
        _TAG,
        status_code=202,
        query_model=ImportOptions,
        response_model=ContactImportResponse,
        errors=(400, 413, 422),
        streams_body=True,
        upload_limit=service.upload_limit,
    ),
    Operation(
        "GET",
        "/contacts/imports",
        list_contact_imports,
        Scope.FULL_ACCESS,
        "List contact imports (newest first)",
        _TAG,
        query_model=CursorQuery,
        response_model=ContactImportResponse,
        envelope="C",
        errors=(400, 422),
    ),
    Operation(
        "GET",
        "/contacts/imports/{import_id}",
        get_contact_import,
        Scope.FULL_ACCESS,
        "Get a contact import and its progress",
        _TAG,
        response_model=ContactImportResponse,
        errors=(404,),
    ),
    Operation(
        "GET",
        "/contacts/imports/{import_id}/errors.csv",
        download_import_errors,
        Scope.FULL_ACCESS,
        "Download the rows an import refused, with the reason, as CSV",
        _TAG,
        errors=(404,),
        binary_response=(CSV_MEDIA_TYPE,),
    ),
)
