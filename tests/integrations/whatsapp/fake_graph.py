"""A local stand-in for Meta's Graph API v19.0, on a real loopback port.

It speaks the platform's wire format: bearer-token auth answered with error 190, the error
envelope `{"error": {message, type, code, error_subcode, fbtrace_id}}`, cursor paging with
`paging.cursors` and a full `paging.next` URL, the template library's filters, the messages
endpoint's answer, and signed webhook callbacks. Faults are scripted per path.

`FastMessages` is the messages endpoint alone, on aiohttp, for load: run it in its own
process (`python tests/integrations/whatsapp/fake_graph.py --port 0 --token …`) so it never
shares the sender's CPU. It records every send's recipient per phone number id (so duplicates
can be counted) and answers `GET /_stats`.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import itertools
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.integrations.whatsapp import library, payloads
from app.integrations.whatsapp.errors import error_body
from app.integrations.whatsapp.types import LibraryFilters

VERSION = "/v19.0"
VERSIONED = re.compile(r"^/v[0-9]+\.[0-9]+(?=/)")


@dataclass
class Fault:
    """Answer the next `times` requests whose path contains `path` with this instead."""

    path: str
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    times: int = 1
    method: str | None = None


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    json: Any


@dataclass
class PhoneNumberNode:
    """A business phone number and the access token of the account that owns it."""

    token: str
    display_phone_number: str
    verified_name: str


class FakeGraph:
    def __init__(self, token: str, page_size: int = 2) -> None:
        self.token = token
        self.page_size = page_size
        self.phone_numbers: dict[str, PhoneNumberNode] = {}
        self.templates: dict[str, list[dict[str, Any]]] = {}
        self.messages: list[dict[str, Any]] = []
        # time.monotonic() of each entry of `messages`, in the same order.
        self.message_times: list[float] = []
        self.faults: list[Fault] = []
        self.requests: list[Seen] = []
        self.base_url = ""
        self._ids = itertools.count(1_000_000_000_000_001)
        self._lock = threading.Lock()

    # --- scripting ---------------------------------------------------------------------

    def fail(self, path: str, status: int, body: Any = None, **options: Any) -> None:
        self.faults.append(Fault(path, status, body, **options))

    def fail_with(self, path: str, status: int, code: int, message: str, **options: Any) -> None:
        self.fail(path, status, error_body(code, message), **options)

    def add_phone_number(
        self,
        phone_number_id: str,
        display_phone_number: str = "+1 415-555-0142",
        *,
        token: str | None = None,
        verified_name: str = "Acme Support",
    ) -> None:
        """A number of the business account whose access token is `token` (default: the
        fake's own); only that token may read it."""
        owner = token or self.token
        self.phone_numbers[phone_number_id] = PhoneNumberNode(
            owner, display_phone_number, verified_name
        )

    def reset(self) -> None:
        """Forget everything a test scripted or caused."""
        self.phone_numbers.clear()
        self.templates.clear()
        self.messages.clear()
        self.message_times.clear()
        self.faults.clear()
        self.requests.clear()

    def _known_token(self, authorization: str | None) -> bool:
        tokens = {self.token, *(node.token for node in self.phone_numbers.values())}
        return authorization in {f"Bearer {token}" for token in tokens}

    def seen(self, path_part: str) -> list[Seen]:
        return [seen for seen in self.requests if path_part in seen.path]

    def _fault_for(self, request: Request) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.path in request.url.path and fault.method in (None, request.method):
                    fault.times -= 1
                    if fault.times <= 0:
                        self.faults.remove(fault)
                    return fault
        return None

    # --- the app -----------------------------------------------------------------------

    def app(self) -> Starlette:
        async def handle(request: Request) -> Response:
            raw = await request.body()
            self.requests.append(
                Seen(
                    request.method,
                    request.url.path,
                    dict(request.query_params),
                    {key.lower(): value for key, value in request.headers.items()},
                    _json_or_none(raw),
                )
            )
            fault = self._fault_for(request)
            if fault is not None:
                if fault.delay:
                    await asyncio.sleep(fault.delay)
                if fault.body is None:
                    return Response("<html>Bad gateway</html>", fault.status, fault.headers)
                return JSONResponse(fault.body, fault.status, fault.headers)
            if not self._known_token(request.headers.get("authorization")):
                return JSONResponse(
                    error_body(190, "Invalid OAuth access token - Cannot parse access token"), 401
                )
            # Any Graph API version is served (SWITCHBOARD_GRAPH_API_VERSION chooses one).
            path = VERSIONED.sub("", request.url.path).strip("/").split("/")
            try:
                return self._route(request, path, _json_or_none(raw))
            except KeyError as exc:
                return JSONResponse(
                    error_body(100, f"(#100) The parameter {exc.args[0]} is required"), 400
                )

        return Starlette(routes=[Route("/{path:path}", handle, methods=["GET", "POST", "DELETE"])])

    def _route(self, request: Request, path: list[str], body: Any) -> Response:
        if path == ["message_template_library"] and request.method == "GET":
            return self._library(request)
        if len(path) == 1 and request.method == "GET":
            return self._phone_number(request, path[0])
        if len(path) == 2 and path[1] == "message_templates":
            waba = path[0]
            if request.method == "POST":
                return self._create_template(waba, body or {})
            if request.method == "GET":
                return self._list_templates(request, waba)
            if request.method == "DELETE":
                return self._delete_template(request, waba)
        if len(path) == 2 and path[1] == "messages" and request.method == "POST":
            return self._send(body or {})
        return JSONResponse(
            error_body(100, "Unsupported request - method type or path unknown", subcode=33), 400
        )

    def _phone_number(self, request: Request, node_id: str) -> Response:
        """`GET /{phone_number_id}?fields=…`: the node, for the token of its account only."""
        node = self.phone_numbers.get(node_id)
        if node is None or request.headers.get("authorization") != f"Bearer {node.token}":
            return JSONResponse(
                error_body(
                    100,
                    f"Unsupported get request. Object with ID '{node_id}' does not exist, "
                    "cannot be loaded due to missing permissions, or does not support this "
                    "operation. Please read the Graph API documentation at "
                    "https://developers.facebook.com/docs/graph-api",
                    subcode=33,
                    error_type="GraphMethodException",
                ),
                400,
            )
        fields = request.query_params.get("fields", "id").split(",")
        values = {
            "id": node_id,
            "display_phone_number": node.display_phone_number,
            "verified_name": node.verified_name,
            "quality_rating": "GREEN",
            "code_verification_status": "VERIFIED",
        }
        return JSONResponse({key: values[key] for key in ["id", *fields] if key in values})

    def _create_template(self, waba: str, body: dict[str, Any]) -> Response:
        for key in ("name", "language", "category"):
            body[key]
        templates = self.templates.setdefault(waba, [])
        if any(t["name"] == body["name"] and t["language"] == body["language"] for t in templates):
            return JSONResponse(
                error_body(
                    100,
                    "Invalid parameter",
                    subcode=2388024,
                    details=f'Message template "{body["name"]}" already exists in this language',
                ),
                400,
            )
        template = {
            "id": str(next(self._ids)),
            "name": body["name"],
            "language": body["language"],
            "category": body["category"],
            "components": body.get("components", []),
            "status": "PENDING",
            "quality_score": {"score": "UNKNOWN", "date": int(time.time())},
        }
        templates.append(template)
        return JSONResponse(
            {"id": template["id"], "status": "PENDING", "category": template["category"]}
        )

    def _list_templates(self, request: Request, waba: str) -> Response:
        templates = self.templates.get(waba, [])
        limit = min(int(request.query_params.get("limit", "25")), self.page_size)
        after = request.query_params.get("after")
        start = int(base64.b64decode(after).decode()) if after else 0
        page = templates[start : start + limit]
        body: dict[str, Any] = {"data": page}
        end = start + len(page)
        if page:
            body["paging"] = {
                "cursors": {
                    "before": base64.b64encode(str(start).encode()).decode(),
                    "after": base64.b64encode(str(end).encode()).decode(),
                }
            }
            if end < len(templates):
                cursor = body["paging"]["cursors"]["after"]
                body["paging"]["next"] = (
                    f"{self.base_url}{VERSION}/{waba}/message_templates?limit={limit}&after={cursor}"
                )
        return JSONResponse(body)

    def _delete_template(self, request: Request, waba: str) -> Response:
        name = request.query_params["name"]
        hsm_id = request.query_params.get("hsm_id")
        templates = self.templates.get(waba, [])
        keep = [t for t in templates if not (t["name"] == name and hsm_id in (None, t["id"]))]
        if len(keep) == len(templates):
            return JSONResponse(
                error_body(
                    100,
                    "Invalid parameter",
                    subcode=2593002,
                    details=f"Message template {name} was not found",
                ),
                400,
            )
        self.templates[waba] = keep
        return JSONResponse({"success": True})

    def _library(self, request: Request) -> Response:
        query = request.query_params
        filters = LibraryFilters(
            search=query.get("search"),
            topic=query.get("topic"),
            usecase=query.get("usecase"),
            industry=query.get("industry"),
            language=query.get("language"),
            name=query.get("name"),
        )
        return JSONResponse({"data": library.search(filters)})

    def _send(self, body: dict[str, Any]) -> Response:
        if body.get("messaging_product") != "whatsapp":
            return JSONResponse(error_body(100, "(#100) Invalid parameter messaging_product"), 400)
        # `to` (a phone number) wins over `recipient` (a business-scoped user id), as on Meta.
        to = body.get("to")
        user_id = body.get("recipient")
        if not to and not user_id:
            raise KeyError("to")
        message_id = f"wamid.HBgL{next(self._ids)}"
        self.messages.append({**body, "id": message_id})
        self.message_times.append(time.monotonic())
        contact = (
            {"input": str(to), "wa_id": str(to).lstrip("+")}
            if to
            else {"input": str(user_id), "user_id": str(user_id)}
        )
        return JSONResponse(
            {
                "messaging_product": "whatsapp",
                "contacts": [contact],
                "messages": [{"id": message_id}],
            }
        )

    # --- callbacks ---------------------------------------------------------------------

    @staticmethod
    def post_callback(url: str, app_secret: str, payload: dict[str, Any]) -> httpx.Response:
        """Post a webhook as the platform does: JSON body, signed with the app secret."""
        body = httpx.Request("POST", url, json=payload).content
        return httpx.post(
            url,
            content=body,
            headers={
                "Content-Type": "application/json",
                payloads.SIGNATURE_HEADER: payloads.sign(app_secret, body),
            },
        )


def _json_or_none(raw: bytes) -> Any:
    import json

    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


@contextmanager
def running_fake_graph(token: str, page_size: int = 2) -> Iterator[FakeGraph]:
    """The fake on an ephemeral loopback port, in a thread with its own event loop."""
    graph = FakeGraph(token, page_size)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    host, port = sock.getsockname()[:2]
    graph.base_url = f"http://{host}:{port}"
    server = uvicorn.Server(
        uvicorn.Config(graph.app(), log_level="warning", access_log=False, lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("fake Graph API did not start")
        time.sleep(0.01)
    try:
        yield graph
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


class FastMessages:
    """`POST /v19.0/{phone_number_id}/messages` with the platform's answer (and error 190 for
    a wrong token), minimal work per request. `GET /_stats` answers the counts: sends, unique
    recipients, duplicates, per phone number id, and the wall-clock time of the first and last
    send (`?since=<unix time>`: also the count, first and last time of the sends after it)."""

    def __init__(self, token: str) -> None:
        self.authorization = f"Bearer {token}"
        self.seen: dict[tuple[str, str], int] = {}
        self.per_number: dict[str, int] = {}
        self.sends = 0
        self.duplicates = 0
        self.first = 0.0
        self.last = 0.0
        self.times: list[float] = []
        self._ids = itertools.count(1)

    def app(self) -> Any:
        from aiohttp import web

        async def send(request: web.Request) -> web.Response:
            import orjson

            if request.headers.get("Authorization") != self.authorization:
                return web.Response(
                    body=orjson.dumps(error_body(190, "Invalid OAuth access token")),
                    status=401,
                    content_type="application/json",
                )
            body = orjson.loads(await request.read())
            if body.get("messaging_product") != "whatsapp":
                return web.Response(
                    body=orjson.dumps(error_body(100, "(#100) Invalid parameter")),
                    status=400,
                    content_type="application/json",
                )
            now = time.time()
            number = request.match_info["number"]
            to = str(body["to"])
            key = (number, to)
            count = self.seen.get(key, 0)
            self.seen[key] = count + 1
            if count:
                self.duplicates += 1
            self.per_number[number] = self.per_number.get(number, 0) + 1
            self.sends += 1
            self.first = self.first or now
            self.last = now
            self.times.append(now)
            message_id = f"wamid.HBgL{next(self._ids)}"
            return web.Response(
                body=orjson.dumps(
                    {
                        "messaging_product": "whatsapp",
                        "contacts": [{"input": to, "wa_id": to.lstrip("+")}],
                        "messages": [{"id": message_id}],
                    }
                ),
                content_type="application/json",
            )

        async def stats(request: web.Request) -> web.Response:
            since = float(request.query.get("since", "0") or 0)
            start = bisect.bisect_right(self.times, since)
            after = len(self.times) - start
            return web.json_response(
                {
                    "sends": self.sends,
                    "unique": len(self.seen),
                    "duplicates": self.duplicates,
                    "per_number": self.per_number,
                    "first": self.first,
                    "last": self.last,
                    "sends_since": after,
                    "first_since": self.times[start] if after else 0.0,
                    "last_since": self.times[-1] if after else 0.0,
                }
            )

        app = web.Application()
        app.router.add_post(f"{VERSION}/{{number}}/messages", send)
        app.router.add_get("/_stats", stats)
        return app


def main() -> None:
    import argparse

    from aiohttp import web

    parser = argparse.ArgumentParser(description="The fake messages endpoint, for load")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    print(f"listening http://{args.host}:{sock.getsockname()[1]}", flush=True)
    web.run_app(
        FastMessages(args.token).app(), sock=sock, print=None, access_log=None, backlog=1024
    )


if __name__ == "__main__":
    main()
