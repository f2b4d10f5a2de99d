"""All of /api/v1 as one Starlette route: templates resolved by dictionary, not by scanning.

Starlette matches a request against each route's regular expression in turn and wraps every
endpoint in request/response adapters; on a 20-row list request that routing cost ~8% of the
server's CPU. Here a static path is one dict lookup and a templated one a short list of
compiled patterns, and the operation's response is sent directly. Unknown paths fall through
to the app's 404; a known path with another method answers 405 with `Allow`, as before.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Receive, Scope, Send

from app.kit.http_errors import json_response
from rest_compat.endpoint import Operation, run_operation

Endpoint = Callable[[Request], Awaitable[Response]]
_PARAMETER = re.compile(r"{([a-zA-Z_][a-zA-Z0-9_]*)}")
_SCOPE_KEY = "sb.rest"


class _PathHandlers:
    """What one path template answers: an Operation or a plain endpoint per method."""

    def __init__(self, template: str) -> None:
        self.template = template
        self.by_method: dict[str, Operation | Endpoint] = {}

    def add(self, method: str, handler: Operation | Endpoint) -> None:
        self.by_method[method] = handler
        if method == "GET":
            self.by_method.setdefault("HEAD", handler)

    @property
    def allow(self) -> str:
        return ", ".join(self.by_method)


def _compile(template: str) -> re.Pattern[str]:
    """`/contacts/{contact_id}` → a pattern with one named group per segment parameter."""
    parts = _PARAMETER.split(template)
    # split() alternates literal text and parameter names.
    pattern = "".join(
        re.escape(part) if index % 2 == 0 else f"(?P<{part}>[^/]+)"
        for index, part in enumerate(parts)
    )
    return re.compile(pattern)


class RestRoutes(BaseRoute):
    def __init__(
        self, prefix: str, operations: Sequence[Operation], endpoints: dict[str, Endpoint]
    ) -> None:
        self.prefix = prefix
        self._static: dict[str, _PathHandlers] = {}
        self._templated: list[tuple[re.Pattern[str], _PathHandlers]] = []
        templated: dict[str, _PathHandlers] = {}
        for path, endpoint in endpoints.items():
            self._handlers_for(path, templated).add("GET", endpoint)
        for operation in operations:
            self._handlers_for(operation.path, templated).add(operation.method, operation)
        for template, handlers in templated.items():
            self._templated.append((_compile(template), handlers))

    def _handlers_for(self, path: str, templated: dict[str, _PathHandlers]) -> _PathHandlers:
        table = templated if _PARAMETER.search(path) else self._static
        handlers = table.get(path)
        if handlers is None:
            handlers = table[path] = _PathHandlers(path)
        return handlers

    def _find(self, path: str) -> tuple[_PathHandlers, dict[str, str]] | None:
        handlers = self._static.get(path)
        if handlers is not None:
            return handlers, {}
        for pattern, candidates in self._templated:
            found = pattern.fullmatch(path)
            if found is not None:
                return candidates, found.groupdict()
        return None

    def operation(self, scope: Scope) -> Operation | None:
        """The operation that answers this request, if one does (for its body limit)."""
        path: str = scope["path"]
        if not path.startswith(self.prefix):
            return None
        found = self._find(path[len(self.prefix) :])
        if found is None:
            return None
        handler = found[0].by_method.get(scope["method"])
        return handler if isinstance(handler, Operation) else None

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http":
            return Match.NONE, {}
        path: str = scope["path"]
        if not path.startswith(self.prefix):
            return Match.NONE, {}
        found = self._find(path[len(self.prefix) :])
        if found is None:
            return Match.NONE, {}
        handlers, params = found
        child = {_SCOPE_KEY: handlers, "path_params": params}
        if scope["method"] in handlers.by_method:
            return Match.FULL, child
        return Match.PARTIAL, child

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        handlers: _PathHandlers = scope[_SCOPE_KEY]
        handler = handlers.by_method.get(scope["method"])
        if not isinstance(handler, Operation):  # operations label themselves (run_operation)
            scope["sb.route"] = f"{scope['method']} {handlers.template}"
        if handler is None:
            response = json_response(
                {"detail": "Method Not Allowed"}, 405, {"Allow": handlers.allow}
            )
        else:
            request = Request(scope, receive)
            if isinstance(handler, Operation):
                response = await run_operation(handler, request)
            else:
                response = await handler(request)
        await response(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        # REST routes have no names; let Starlette's url_for look at the other routes.
        raise NoMatchFound(name, path_params)
