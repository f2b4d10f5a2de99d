"""The real carrier: a client of a Twilio-compatible REST API (2010-04-01 Calls and
IncomingPhoneNumbers resources).

Requests are form-encoded with HTTP basic auth (account SID, auth token); answers are JSON,
errors `{code, message, more_info, status}`. The carrier reports each call's progress to the
StatusCallback URL given when the call is placed (POST /webhooks/telephony/status).
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlencode, urlsplit
from xml.sax.saxutils import escape

import httpx

from app.core.tls import client_tls_context
from app.integrations.telephony.base import (
    CallDetails,
    CallPlacement,
    CarrierError,
    ListedCall,
    PlacedCall,
)

API_VERSION = "2010-04-01"
# A placement lookup reads at most this many pages of the call list.
LOOKUP_PAGES = 5
LOOKUP_PAGE_SIZE = 50
# Every progress step is reported, so a call shows as under way as soon as it rings.
STATUS_CALLBACK_EVENTS = ("initiated", "ringing", "answered", "completed")


def stream_url(public_url: str, path: str) -> str:
    """The media stream's websocket URL on the public URL's host: `wss://` for an https
    public URL, `ws://` for http (the carrier forbids a query string on it)."""
    parts = urlsplit(public_url)
    scheme = "ws" if parts.scheme == "http" else "wss"
    return f"{scheme}://{parts.netloc}{path}"


def stream_twiml(url: str, token: str) -> str:
    """An answered call connects a bidirectional media stream to the agent; the token rides
    as a stream parameter, which the carrier hands back in the stream's `start` message."""
    return (
        f'<Response><Connect><Stream url="{_attribute(url)}">'
        f'<Parameter name="token" value="{_attribute(token)}"/>'
        "</Stream></Connect></Response>"
    )


def _attribute(value: str) -> str:
    return escape(value, {'"': "&quot;"})


def dial_twiml(number: str) -> str:
    """A cold transfer: the carrier leaves the stream and dials the number."""
    return f"<Response><Dial>{escape(number)}</Dial></Response>"


class TwilioCarrier:
    """Live calls. One instance per process; `aclose()` releases its connections."""

    def __init__(
        self,
        base_url: str,
        account_sid: str,
        auth_token: str,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.account_sid = account_sid
        self._base = base_url.rstrip("/")
        self._client = httpx.AsyncClient(
            auth=(account_sid, auth_token),
            timeout=timeout,
            transport=transport,
            verify=client_tls_context(),
        )

    def _url(self, path: str) -> str:
        return f"{self._base}/{API_VERSION}/Accounts/{self.account_sid}/{path}"

    async def aclose(self) -> None:
        await self._client.aclose()

    async def create_call(self, placement: CallPlacement) -> PlacedCall:
        form: list[tuple[str, str]] = [
            ("To", placement.to_number),
            ("From", placement.from_number),
            ("Twiml", placement.twiml),
            ("StatusCallback", placement.status_callback_url),
            ("StatusCallbackMethod", "POST"),
            *(("StatusCallbackEvent", event) for event in STATUS_CALLBACK_EVENTS),
            ("Record", "true" if placement.record else "false"),
        ]
        if placement.machine_detection_url:
            # Asynchronous answering-machine detection: the call connects at once and the
            # verdict (AnsweredBy) is posted to the URL once the greeting ends.
            form += [
                ("MachineDetection", "DetectMessageEnd"),
                ("AsyncAmd", "true"),
                ("AsyncAmdStatusCallback", placement.machine_detection_url),
                ("AsyncAmdStatusCallbackMethod", "POST"),
            ]
        body = await self._request(
            "POST",
            "Calls.json",
            content=urlencode(form),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        return PlacedCall(sid=str(body["sid"]), status=str(body.get("status") or "queued"))

    async def update_call(
        self, sid: str, *, twiml: str | None = None, status: str | None = None
    ) -> None:
        """Act on a call under way (`Calls/{Sid}.json`): new TwiML (a transfer) or a status
        (`completed` hangs up). A call that already ended answers 404 (code 20404) or 400
        (21220, not in progress): both mean there is nothing left to act on."""
        form = [(k, v) for k, v in (("Twiml", twiml), ("Status", status)) if v is not None]
        try:
            await self._request(
                "POST",
                f"Calls/{sid}.json",
                content=urlencode(form),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
        except CarrierError as exc:
            if exc.code not in (20404, 21220):
                raise

    async def fetch_call(self, sid: str) -> CallDetails:
        """The call's final figures: duration, price (negative in Twilio's answer: a charge),
        and its first recording's media URL."""
        body = await self._request("GET", f"Calls/{sid}.json")
        recordings = await self._request("GET", f"Calls/{sid}/Recordings.json")
        return CallDetails(
            sid=sid,
            status=str(body.get("status") or ""),
            duration_seconds=_int_or_none(body.get("duration")),
            cost=_cost(body.get("price")),
            recording_url=self._recording_url(recordings),
        )

    async def calls_between(
        self, to_number: str, from_number: str, since: date
    ) -> list[ListedCall]:
        """The account's calls from `from_number` to `to_number` created on or after the day
        `since` (UTC): those that started (`StartTime>=`), and those still `queued`, which
        have no start time yet. Raises CarrierError when the list cannot be read whole."""
        found: dict[str, ListedCall] = {}
        base = [("To", to_number), ("From", from_number), ("PageSize", str(LOOKUP_PAGE_SIZE))]
        for extra in (("StartTime>", since.isoformat()), ("Status", "queued")):
            for call in await self._list_calls([*base, extra]):
                found.setdefault(call.sid, call)
        return sorted(
            found.values(),
            key=lambda call: call.created_at or datetime.max.replace(tzinfo=UTC),
        )

    async def _list_calls(self, params: list[tuple[str, str]]) -> list[ListedCall]:
        calls: list[ListedCall] = []
        body = await self._request("GET", "Calls.json", params=params)
        for _page in range(LOOKUP_PAGES):
            for item in body.get("calls") or []:
                if isinstance(item, dict) and item.get("sid"):
                    calls.append(
                        ListedCall(
                            sid=str(item["sid"]),
                            status=str(item.get("status") or ""),
                            to_number=str(item.get("to") or ""),
                            from_number=str(item.get("from") or ""),
                            created_at=_rfc2822(item.get("date_created")),
                        )
                    )
            next_page = body.get("next_page_uri")
            if not next_page:
                return calls
            body = await self._absolute("GET", str(next_page))
        raise CarrierError("the carrier's call list is longer than a lookup reads")

    async def owns_number(self, phone_number: str) -> bool:
        """Whether `phone_number` (E.164) is one of the account's incoming numbers. The
        listing's `PhoneNumber` filter also matches parts of numbers: only an exact entry
        counts."""
        body = await self._request(
            "GET", "IncomingPhoneNumbers.json", params={"PhoneNumber": phone_number}
        )
        listed = body.get("incoming_phone_numbers")
        return isinstance(listed, list) and any(
            isinstance(item, dict) and item.get("phone_number") == phone_number for item in listed
        )

    def _recording_url(self, listing: dict[str, Any]) -> str | None:
        items = listing.get("recordings") or []
        if not items:
            return None
        return f"{self._url('Recordings')}/{items[0]['sid']}.mp3"

    async def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        return await self._send(method, self._url(path), **kwargs)

    async def _absolute(self, method: str, uri: str) -> dict[str, Any]:
        """A page URI the carrier gave (`/2010-04-01/Accounts/…`), on the API's host."""
        if not uri.startswith(f"/{API_VERSION}/Accounts/{self.account_sid}/"):
            raise CarrierError("the carrier gave a page URI outside the account", status=502)
        return await self._send(method, f"{self._base}{uri}")

    async def _send(self, method: str, url: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = await self._client.request(method, url, **kwargs)
        except httpx.TimeoutException as exc:
            raise CarrierError("the carrier did not answer in time") from exc
        except httpx.TransportError as exc:
            raise CarrierError(f"the carrier could not be reached: {type(exc).__name__}") from exc
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.is_success and isinstance(body, dict):
            return body
        if isinstance(body, dict) and "message" in body:
            code = body.get("code")
            raise CarrierError(
                f"carrier error {code}: {body['message']}",
                status=response.status_code,
                code=code if isinstance(code, int) else None,
            )
        raise CarrierError(
            f"the carrier answered {response.status_code} without an error body",
            status=response.status_code if not response.is_success else 502,
        )


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _rfc2822(value: Any) -> datetime | None:
    """Twilio's dates: "Tue, 31 Aug 2010 20:36:28 +0000"."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _cost(price: Any) -> float | None:
    """Twilio reports what a call cost as a negative decimal string ("-0.01300")."""
    try:
        return None if price is None else abs(float(price))
    except (TypeError, ValueError):
        return None
