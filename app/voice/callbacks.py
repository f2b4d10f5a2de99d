"""The carrier's media streams connect here (a websocket outside /api/v1)."""

from __future__ import annotations

from starlette.routing import WebSocketRoute

from app.calls.telephony import MEDIA_STREAM_PATH
from app.voice.stream import media_stream

ROUTES = [WebSocketRoute(MEDIA_STREAM_PATH, media_stream)]
