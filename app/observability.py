"""Structured JSON logs, request ids and Prometheus metrics, as pure ASGI middleware."""

from __future__ import annotations

import logging
import random
import re
import sys
import time
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID_HEADER = "x-request-id"
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

REQUESTS = Counter(
    "switchboard_http_requests_total", "HTTP requests", ["method", "route", "status"]
)
LATENCY = Histogram(
    "switchboard_http_request_duration_seconds",
    "HTTP request latency",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


def configure_logging(level: str = "info") -> None:
    """JSON lines on stdout, with the request id bound by the middleware below."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    logging.basicConfig(format="%(message)s", stream=sys.stdout, level=numeric, force=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(),
        cache_logger_on_first_use=True,
    )


# Children of the labelled metrics, looked up once: `labels()` costs more than the update.
# Keys are bounded (methods x route templates x statuses).
_request_counters: dict[tuple[str, str, int], Any] = {}
_latency_histograms: dict[tuple[str, str], Any] = {}


def _record(method: str, route: str, status: int, elapsed: float) -> None:
    counter = _request_counters.get((method, route, status))
    if counter is None:
        counter = _request_counters[(method, route, status)] = REQUESTS.labels(
            method, route, str(status)
        )
    histogram = _latency_histograms.get((method, route))
    if histogram is None:
        histogram = _latency_histograms[(method, route)] = LATENCY.labels(method, route)
    counter.inc()
    histogram.observe(elapsed)


def _route_label(scope: Scope) -> str:
    """The template of the route that answered (a wrong method included), else `unmatched`:
    REST operations set `sb.route`; Starlette's router leaves the route it matched, fully or
    by path only (a 405), in `route`."""
    label = scope.get("sb.route")
    if label:
        return str(label).split(" ", 1)[-1]
    path = getattr(scope.get("route"), "path", None)
    if isinstance(path, str) and path:
        return path
    return "unmatched"


class ObservabilityMiddleware:
    """Request id in and out, one access log line, and per-route counters and latency."""

    def __init__(self, app: ASGIApp, *, access_log: bool = True) -> None:
        self.app = app
        self.access_log = access_log
        self.logger = structlog.get_logger("switchboard.access")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = ""
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id":
                candidate = value.decode("latin-1")
                if _VALID_REQUEST_ID.match(candidate):
                    request_id = candidate
                break
        # Correlation ids need uniqueness, not secrecy: no urandom syscall per request.
        request_id = request_id or f"{random.getrandbits(128):032x}"
        scope.setdefault("state", {})["request_id"] = request_id
        structlog.contextvars.bind_contextvars(request_id=request_id)
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = message.get("headers")
                if isinstance(headers, list):  # Starlette responses: a fresh list per response
                    headers.append((b"x-request-id", request_id.encode()))
                else:
                    message = {
                        **message,
                        "headers": [*(headers or ()), (b"x-request-id", request_id.encode())],
                    }
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            method = scope.get("method", "")
            route = _route_label(scope)
            _record(method, route, status, elapsed)
            if self.access_log:
                self.logger.info(
                    "request",
                    method=method,
                    path=scope.get("path"),
                    route=route,
                    status=status,
                    duration_ms=round(elapsed * 1000, 2),
                )
            structlog.contextvars.unbind_contextvars("request_id")


async def metrics_endpoint(_request: Request) -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
