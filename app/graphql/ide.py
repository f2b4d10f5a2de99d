"""Self-hosted GraphiQL IDE page.

The React, ReactDOM and GraphiQL bundles ship inside the package under
``static/graphiql`` so the IDE works without any CDN or network access.
Mount :data:`STATIC_DIR` at :data:`STATIC_URL_PREFIX` with Starlette's
``StaticFiles`` and serve :func:`graphiql_html` as the IDE page.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Final

from app.kit.html import js_string

__all__ = ["ASSETS", "STATIC_DIR", "STATIC_URL_PREFIX", "graphiql_html"]

STATIC_DIR: Final[Path] = Path(__file__).resolve().parent / "static" / "graphiql"
"""Folder holding the vendored GraphiQL assets (react@18, react-dom@18, graphiql@3)."""

STATIC_URL_PREFIX: Final[str] = "/static/graphiql"
"""URL path where the app mounts :data:`STATIC_DIR` (Starlette ``StaticFiles``)."""

ASSETS: Final[tuple[str, ...]] = (
    "graphiql.min.css",
    "react.production.min.js",
    "react-dom.production.min.js",
    "graphiql.min.js",
)
"""Asset file names the page loads, in load order (scripts: React before GraphiQL)."""

_PAGE_TEMPLATE: Final[str] = """<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <meta name="robots" content="noindex" />
    <title>Switchboard GraphiQL</title>
    <style>
      html, body, #graphiql { height: 100%; margin: 0; }
      #graphiql-loading { display: flex; align-items: center; justify-content: center;
        height: 100%; font-family: system-ui, sans-serif; color: #666; }
    </style>
    <link rel="stylesheet" href="__PREFIX__/graphiql.min.css" />
  </head>
  <body>
    <div id="graphiql"><div id="graphiql-loading">Loading GraphiQL&hellip;</div></div>
    <noscript>GraphiQL needs JavaScript.</noscript>
    <script src="__PREFIX__/react.production.min.js"></script>
    <script src="__PREFIX__/react-dom.production.min.js"></script>
    <script src="__PREFIX__/graphiql.min.js"></script>
    <script>
      (function () {
        var endpoint = __ENDPOINT__;
        var httpUrl = new URL(endpoint, window.location.href);
        var wsUrl = new URL(httpUrl.href);
        wsUrl.protocol = httpUrl.protocol === "https:" ? "wss:" : "ws:";
        var fetcher = GraphiQL.createFetcher({
          url: httpUrl.href,
          subscriptionUrl: wsUrl.href
        });
        var root = ReactDOM.createRoot(document.getElementById("graphiql"));
        root.render(
          React.createElement(GraphiQL, {
            fetcher: fetcher,
            // Headers editor (e.g. {"Authorization": "Bearer <token>"}); the
            // headers also go into the websocket connection_init payload.
            isHeadersEditorEnabled: true,
            // Tabs and headers (the pasted key) live in this tab's sessionStorage:
            // gone when the tab closes, never shared with other tabs or kept on disk.
            storage: window.sessionStorage,
            shouldPersistHeaders: true,
            defaultEditorToolsVisibility: "headers"
          })
        );
      })();
    </script>
  </body>
</html>
"""


@functools.lru_cache(maxsize=8)
def graphiql_html(endpoint: str = "/graphql") -> str:
    """The GraphiQL page for ``endpoint``; assets load only from :data:`STATIC_URL_PREFIX`.

    ``endpoint`` is resolved against the page URL in the browser; subscriptions use
    the same path on the same host over ``ws://`` (or ``wss://`` under HTTPS).
    """
    return _PAGE_TEMPLATE.replace("__PREFIX__", STATIC_URL_PREFIX).replace(
        "__ENDPOINT__", js_string(endpoint)
    )
