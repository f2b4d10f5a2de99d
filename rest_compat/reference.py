"""The REST reference at /api/v1/docs: Swagger UI rendering /api/v1/openapi.json.

Swagger UI's built bundle (swagger-ui-dist 5.35.0 from the npm registry, Apache-2.0; only the
bundle, its stylesheet and licences are kept) ships inside the package under
``static/swagger-ui``: the page loads nothing from any other host. The validator badge (which
would call validator.swagger.io) is off. "Authorize" takes an API key; Swagger UI keeps it in
the page's memory only (`persistAuthorization` off), so a reload forgets it.
"""

from __future__ import annotations

import functools
import html
from pathlib import Path
from typing import Final

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from app.kit.html import js_string

STATIC_DIR: Final[Path] = Path(__file__).resolve().parent / "static" / "swagger-ui"
STATIC_URL_PREFIX: Final[str] = "/static/swagger-ui"
ASSETS: Final[tuple[str, ...]] = ("swagger-ui.css", "swagger-ui-bundle.js")

_PAGE_TEMPLATE: Final[str] = """<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <meta name="robots" content="noindex" />
    <title>Switchboard REST API reference</title>
    <link rel="stylesheet" href="__PREFIX__/swagger-ui.css" />
    <style>body { margin: 0; } .swagger-ui .info { margin: 24px 0; }</style>
  </head>
  <body>
    <div id="swagger-ui"></div>
    <noscript>The reference needs JavaScript; the document is at __DOCUMENT_TEXT__.</noscript>
    <script src="__PREFIX__/swagger-ui-bundle.js"></script>
    <script>
      window.ui = SwaggerUIBundle({
        url: __DOCUMENT__,
        dom_id: "#swagger-ui",
        presets: [SwaggerUIBundle.presets.apis],
        layout: "BaseLayout",
        deepLinking: true,
        // No validator badge: it would send the document to validator.swagger.io.
        validatorUrl: null,
        persistAuthorization: false,
        displayRequestDuration: true
      });
    </script>
  </body>
</html>
"""


@functools.lru_cache(maxsize=8)
def reference_html(document: str = "/api/v1/openapi.json") -> str:
    """The page for the OpenAPI document at `document` (a path on this host)."""
    return (
        _PAGE_TEMPLATE.replace("__PREFIX__", STATIC_URL_PREFIX)
        .replace("__DOCUMENT__", js_string(document))
        .replace("__DOCUMENT_TEXT__", html.escape(document))
    )


async def reference_page(request: Request) -> Response:
    root = request.scope.get("root_path", "")
    return HTMLResponse(reference_html(root + "/api/v1/openapi.json"))
