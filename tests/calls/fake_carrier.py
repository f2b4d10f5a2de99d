"""A local carrier speaking the Twilio 2010-04-01 REST wire format, on a real socket.

Calls.json takes form-encoded calls behind basic auth and answers 201 JSON; errors are
Twilio's `{code, message, more_info, status}` bodies. Every request is kept, so tests can
also prove that nothing reached it. `send_status` posts a status callback signed as the
carrier signs it.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.integrations.telephony.signature import SIGNATURE_HEADER, compute_signature

ACCOUNT_SID = "AC" + "0" * 32
AUTH_TOKEN = "fake-carrier-auth-token-0123456789"
INVALID_NUMBER = "+15005550001"  # the carrier refuses it (error 21211)
OUTAGE_NUMBER = "+15005550500"  # the carrier answers 503


def _error(status: int, code: int, message: str) -> JSONResponse:
    return JSONResponse(
        {
            "code": code,
            "message": message,
            "more_info": f"https://www.twilio.com/docs/errors/{code}",
            "status": status,
        },
        status_code=status,
    )


@dataclass
class FakeCarrier:
    requests: list[tuple[str, str, list[tuple[str, str]]]] = field(default_factory=list)
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The account's numbers (E.164), as IncomingPhoneNumbers lists them.
    incoming_numbers: list[str] = field(default_factory=list)
    # Calls/{Sid}.json updates (hang-ups, transfers): (sid, form), and who is told of each.
    updates: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    update_hooks: list[Any] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Placement faults, for the next `delayed_answers` requests: the call is created, then
    # the answer takes `answer_delay` seconds (longer than the client waits: a timeout after
    # the carrier accepted); or, with `create_on_delay` false, the request is dropped after
    # that long without a call.
    delayed_answers: int = 0
    answer_delay: float = 0.0
    create_on_delay: bool = True
    # The call list (Calls.json GET) answers 503 while this is set.
    list_outage: bool = False
    # Seconds a call update's answer takes after the carrier acted on it (the media stream
    # is already stopping): the stream's `stop` arrives before the REST answer.
    update_delay: float = 0.0

    def _authorized(self, request: Request) -> bool:
        expected = base64.b64encode(f"{ACCOUNT_SID}:{AUTH_TOKEN}".encode()).decode()
        return request.headers.get("authorization") == f"Basic {expected}"

    async def create_call(self, request: Request) -> Response:
        form = [(k, str(v)) for k, v in (await request.form()).multi_items()]
        with self.lock:
            self.requests.append(("POST", request.url.path, form))
        if not self._authorized(request) or request.path_params["account"] != ACCOUNT_SID:
            return _error(401, 20003, "Authenticate")
        values = dict(form)
        if values.get("To") == INVALID_NUMBER or not values.get("To", "").startswith("+"):
            return _error(
                400, 21211, f"The 'To' number {values.get('To')} is not a valid phone number."
            )
        if values.get("To") == OUTAGE_NUMBER:
            return _error(503, 20503, "Service unavailable")
        if "StatusCallback" not in values:
            return _error(400, 21205, "StatusCallback is required by this fake")
        with self.lock:
            delayed = self.delayed_answers > 0
            self.delayed_answers -= int(delayed)
        if delayed and not self.create_on_delay:
            await asyncio.sleep(self.answer_delay)
            return _error(503, 20503, "Service unavailable")
        sid = "CA" + secrets.token_hex(16)
        call = {
            "sid": sid,
            "account_sid": ACCOUNT_SID,
            "date_created": format_datetime(datetime.now(UTC), usegmt=True),
            "start_time": None,
            "to": values["To"],
            "from": values["From"],
            "direction": "outbound-api",
            "status": "queued",
            "duration": None,
            "price": None,
            "price_unit": "USD",
            "status_callback": values["StatusCallback"],
            "status_callback_events": [v for k, v in form if k == "StatusCallbackEvent"],
            "twiml": values.get("Twiml"),
            "recordings": [],
        }
        with self.lock:
            self.calls[sid] = call
        public = {k: v for k, v in call.items() if k not in ("recordings", "twiml")}
        if delayed:
            await asyncio.sleep(self.answer_delay)  # accepted, but the answer comes too late
        return JSONResponse(public, status_code=201)

    def start(self, sid: str) -> None:
        """The carrier dials the call: it has a start time from now on."""
        with self.lock:
            call = self.calls[sid]
            call.update(status="ringing", start_time=format_datetime(datetime.now(UTC), True))

    async def list_calls(self, request: Request) -> Response:
        """Calls.json GET: `To`, `From`, `Status` and `StartTime>` (calls started on or after
        that day, UTC; calls not dialed yet have no start time and never match it)."""
        query = [(k, v) for k, v in request.query_params.multi_items()]
        with self.lock:
            self.requests.append(("GET", request.url.path, query))
        if not self._authorized(request) or request.path_params["account"] != ACCOUNT_SID:
            return _error(401, 20003, "Authenticate")
        if self.list_outage:
            return _error(503, 20503, "Service unavailable")
        wanted = dict(query)
        since = wanted.get("StartTime>")
        with self.lock:
            listed = []
            for call in self.calls.values():
                if "To" in wanted and call["to"] != wanted["To"]:
                    continue
                if "From" in wanted and call["from"] != wanted["From"]:
                    continue
                if "Status" in wanted and call["status"] != wanted["Status"]:
                    continue
                if since is not None:
                    started = call.get("start_time")
                    if started is None:
                        continue
                    day = datetime.strptime(started, "%a, %d %b %Y %H:%M:%S GMT").date()
                    if day.isoformat() < since:
                        continue
                listed.append({k: v for k, v in call.items() if k not in ("recordings", "twiml")})
        listed.sort(key=lambda call: call.get("date_created") or "", reverse=True)
        uri = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return JSONResponse(
            {
                "calls": listed,
                "end": max(len(listed) - 1, 0),
                "first_page_uri": uri,
                "next_page_uri": None,
                "page": 0,
                "page_size": int(wanted.get("PageSize", "50")),
                "previous_page_uri": None,
                "start": 0,
                "uri": uri,
            }
        )

    def placement_requests(self) -> list[list[tuple[str, str]]]:
        """The forms of every Calls.json POST (each one a call asked for)."""
        with self.lock:
            return [
                form
                for method, path, form in self.requests
                if method == "POST" and path.endswith("/Calls.json")
            ]

    async def fetch_call(self, request: Request) -> Response:
        with self.lock:
            self.requests.append(("GET", request.url.path, []))
        call = self.calls.get(request.path_params["sid"])
        if not self._authorized(request):
            return _error(401, 20003, "Authenticate")
        if call is None:
            return _error(404, 20404, "The requested resource was not found")
        return JSONResponse({k: v for k, v in call.items() if k not in ("recordings", "twiml")})

    def add_call(self, sid: str, to: str, from_: str) -> None:
        """A call the carrier holds without Calls.json (an inbound one)."""
        with self.lock:
            self.calls[sid] = {
                "sid": sid,
                "account_sid": ACCOUNT_SID,
                "to": to,
                "from": from_,
                "status": "in-progress",
                "duration": None,
                "price": None,
                "price_unit": "USD",
                "recordings": [],
            }

    async def update_call(self, request: Request) -> Response:
        """Calls/{Sid}.json POST: `Status=completed` hangs up, `Twiml` replaces what runs
        (the media stream stops either way); 404 (20404) for an unknown call."""
        form = [(k, str(v)) for k, v in (await request.form()).multi_items()]
        sid = request.path_params["sid"]
        with self.lock:
            self.requests.append(("POST", request.url.path, form))
        if not self._authorized(request):
            return _error(401, 20003, "Authenticate")
        with self.lock:
            call = self.calls.get(sid)
            if call is None:
                return _error(404, 20404, "The requested resource was not found")
            values = dict(form)
            self.updates.append((sid, values))
            if values.get("Status") == "completed":
                call["status"] = "completed"
            hooks = list(self.update_hooks)
        for hook in hooks:
            hook(sid, values)
        if self.update_delay:
            await asyncio.sleep(self.update_delay)
        return JSONResponse({k: v for k, v in call.items() if k not in ("recordings", "twiml")})

    async def list_recordings(self, request: Request) -> Response:
        with self.lock:
            self.requests.append(("GET", request.url.path, []))
        if not self._authorized(request):
            return _error(401, 20003, "Authenticate")
        call = self.calls.get(request.path_params["sid"])
        return JSONResponse({"recordings": call["recordings"] if call else []})

    async def list_incoming_numbers(self, request: Request) -> Response:
        """IncomingPhoneNumbers.json: the account's numbers; `PhoneNumber` matches all or
        part of a number, as Twilio's filter does."""
        query = [(k, v) for k, v in request.query_params.multi_items()]
        with self.lock:
            self.requests.append(("GET", request.url.path, query))
        if not self._authorized(request) or request.path_params["account"] != ACCOUNT_SID:
            return _error(401, 20003, "Authenticate")
        wanted = request.query_params.get("PhoneNumber", "")
        page = [
            {
                "sid": f"PN{index:032x}",
                "account_sid": ACCOUNT_SID,
                "phone_number": number,
                "friendly_name": number,
                "capabilities": {"voice": True, "sms": True, "mms": False, "fax": False},
                "voice_url": "https://switchboard.example.com/webhooks/telephony/incoming",
                "status": "in-use",
            }
            for index, number in enumerate(self.incoming_numbers)
            if wanted in number
        ]
        uri = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return JSONResponse(
            {
                "incoming_phone_numbers": page,
                "end": max(len(page) - 1, 0),
                "first_page_uri": uri,
                "next_page_uri": None,
                "page": 0,
                "page_size": 50,
                "previous_page_uri": None,
                "start": 0,
                "uri": uri,
            }
        )

    def finish(self, sid: str, *, duration: int, price: str, recording_sid: str) -> None:
        """What the carrier knows once the call ended."""
        with self.lock:
            call = self.calls[sid]
            call.update(status="completed", duration=str(duration), price=price)
            call["recordings"] = [{"sid": recording_sid, "call_sid": sid}]

    def app(self) -> Starlette:
        prefix = "/2010-04-01/Accounts/{account}"
        return Starlette(
            routes=[
                Route(f"{prefix}/Calls.json", self.create_call, methods=["POST"]),
                Route(f"{prefix}/Calls.json", self.list_calls, methods=["GET"]),
                Route(f"{prefix}/Calls/{{sid}}.json", self.fetch_call, methods=["GET"]),
                Route(f"{prefix}/Calls/{{sid}}.json", self.update_call, methods=["POST"]),
                Route(
                    f"{prefix}/Calls/{{sid}}/Recordings.json",
                    self.list_recordings,
                    methods=["GET"],
                ),
                Route(
                    f"{prefix}/IncomingPhoneNumbers.json",
                    self.list_incoming_numbers,
                    methods=["GET"],
                ),
            ]
        )


def signed_status(
    url: str, params: dict[str, str], token: str = AUTH_TOKEN
) -> tuple[dict[str, str], dict[str, str]]:
    """The form and headers of a status callback to `url`, signed as the carrier does."""
    signature = compute_signature(token, url, params.items())
    return params, {SIGNATURE_HEADER: signature}


class ServedApp:
    """An ASGI app served by uvicorn in a thread, on a free loopback port."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", access_log=False
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = ""

    def start(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("local server did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class RunningCarrier:
    """The fake carrier on a real socket."""

    def __init__(self) -> None:
        self.carrier = FakeCarrier()
        self._served = ServedApp(self.carrier.app())
        self.url = ""

    def __enter__(self) -> RunningCarrier:
        self.url = self._served.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._served.stop()
