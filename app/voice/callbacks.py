"""Where calls' audio connects (websockets outside /api/v1): the carrier's media streams and
browser sessions, with the page a browser talks to an agent from. Every path is under
`/voice/`, which a deployment routes to its voice processes (app/voice/server.py)."""

from __future__ import annotations

from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from app.calls.telephony import MEDIA_STREAM_PATH
from app.calls.web import BROWSER_STREAM_PATH
from app.voice.browser import STATIC_DIR, STATIC_URL_PREFIX, browser_page, browser_stream
from app.voice.stream import media_stream

ROUTES = [
    WebSocketRoute(MEDIA_STREAM_PATH, media_stream),
    WebSocketRoute(BROWSER_STREAM_PATH, browser_stream),
    Route(BROWSER_STREAM_PATH, browser_page, methods=["GET"]),
    Mount(STATIC_URL_PREFIX, StaticFiles(directory=STATIC_DIR), name="voice-static"),
]
