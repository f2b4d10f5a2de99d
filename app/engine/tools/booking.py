"""Booking tools on the organization's calendar: `check_availability` (`start`, `end`) and
`book_appointment` (`start`, `name`, `email?`, `notes?`), when the agent's
`booking_config.booking_enabled`.

Two calendars, chosen by `booking_config.provider`, each on the organization's credential for
it (app/provider_credentials/):

- `cal_com`: Cal.com API v2. Slots: `GET /v2/slots?eventTypeId&start&end&timeZone`
  (`cal-api-version: 2024-09-04`) answers `{"data": {"<date>": [{"start": …}]}}`; bookings:
  `POST /v2/bookings` (`cal-api-version: 2024-08-13`) with `eventTypeId`, `start` (UTC) and
  the `attendee`. The credential's `event_type_id` names what is booked.
- `google_calendar`: Calendar API v3. `POST /calendar/v3/freeBusy` gives the busy intervals
  of `calendar_id` (default `primary`), split here into free slots of `slot_minutes`; booking
  inserts an event (`POST /calendar/v3/calendars/{id}/events`). The key is an OAuth access
  token; with the OAuth fields, a 401 refreshes it once at `token_url`.

Times without an offset are read in the agent's `timezone`; answers are given in it. Every
request goes through the guarded HTTP caller (app/engine/tools/http.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import orjson

from app.engine.tools.http import Exchange, ToolCaller
from app.engine.types import ToolOutcome, ToolSpec
from app.provider_credentials.service import StoredCredential

CAL_COM_URL = "https://api.cal.com"
GOOGLE_URL = "https://www.googleapis.com"
GOOGLE_TOKEN_URL = "https://oauth2.googleapis.com/token"
SLOTS_API_VERSION = "2024-09-04"
BOOKINGS_API_VERSION = "2024-08-13"
DEFAULT_SLOT_MINUTES = 30
MAX_RANGE = timedelta(days=14)
MAX_SLOTS = 20

CHECK_AVAILABILITY = ToolSpec(
    name="check_availability",
    description="Find free appointment times between two moments (ISO 8601; dates or times "
    "without an offset are in the business's time zone).",
    parameters={
        "type": "object",
        "properties": {
            "start": {"type": "string", "description": "Earliest time, ISO 8601"},
            "end": {"type": "string", "description": "Latest time, ISO 8601"},
        },
        "required": ["start", "end"],
    },
    kind="booking",
)
BOOK_APPOINTMENT = ToolSpec(
    name="book_appointment",
    description="Book an appointment at a free start time found with check_availability.",
    parameters={
        "type": "object",
        "properties": {
            "start": {"type": "string", "description": "Start time, ISO 8601"},
            "name": {"type": "string", "description": "The customer's name"},
            "email": {"type": "string", "description": "The customer's e-mail address"},
            "notes": {"type": "string", "description": "Anything the business should know"},
        },
        "required": ["start", "name"],
    },
    kind="booking",
)
BOOKING_TOOLS = (CHECK_AVAILABILITY, BOOK_APPOINTMENT)


class BookingRefused(Exception):
    """Arguments the calendar cannot take (a bad time, a missing e-mail): told to the model."""


def _failure(message: str, exchange: Exchange | None = None) -> ToolOutcome:
    status = exchange.status_code if exchange is not None else None
    error = message if exchange is None else (exchange.error or f"HTTP {status}")
    return ToolOutcome(
        success=False, content=message, excerpt=message, status_code=status, error=error
    )


def _success(text: str, data: Any, status: int | None) -> ToolOutcome:
    return ToolOutcome(
        success=True,
        content=text,
        excerpt=text[:500],
        data={"success": True, "answer": text[:500], "result": data},
        status_code=status,
    )


def parse_moment(value: Any, zone: ZoneInfo, *, end_of_day: bool = False) -> datetime:
    """An aware datetime from ISO 8601 text; a date alone is its start (or end) of day."""
    if not isinstance(value, str) or not value.strip():
        raise BookingRefused("a time is required (ISO 8601, e.g. 2026-03-02T10:00)")
    text = value.strip().replace("Z", "+00:00")
    try:
        if len(text) == 10:  # a date alone (fromisoformat would read it as midnight)
            day = date.fromisoformat(text)
            moment = datetime.combine(day, time.max if end_of_day else time.min)
        else:
            moment = datetime.fromisoformat(text)
    except ValueError:
        raise BookingRefused(f"'{value}' is not an ISO 8601 date or time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=zone)


def _range(arguments: dict[str, Any], zone: ZoneInfo) -> tuple[datetime, datetime]:
    start = parse_moment(arguments.get("start"), zone)
    end = parse_moment(arguments.get("end"), zone, end_of_day=True)
    if end <= start:
        raise BookingRefused("end must be after start")
    if end - start > MAX_RANGE:
        raise BookingRefused("ask for at most 14 days at a time")
    return start, end


def _slot_text(starts: list[datetime], zone: ZoneInfo) -> str:
    if not starts:
        return "No free times in that range."
    shown = ", ".join(moment.astimezone(zone).isoformat() for moment in starts[:MAX_SLOTS])
    return f"Free start times ({zone.key}): {shown}"


@dataclass
class Calendar:
    """One organization's calendar for one turn."""

    caller: ToolCaller
    credential: StoredCredential
    zone: ZoneInfo
    # Google access tokens refreshed in this process, by credential version.
    refreshed_tokens: dict[tuple[str, str], str]
    organization_id: str

    async def run(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        try:
            if self.credential.provider == "cal_com":
                if name == "check_availability":
                    return await self._cal_slots(arguments)
                return await self._cal_book(arguments)
            if name == "check_availability":
                return await self._google_free(arguments)
            return await self._google_book(arguments)
        except BookingRefused as exc:
            return _failure(str(exc))

    # Cal.com API v2

    def _cal_headers(self, version: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.credential.api_key}", "cal-api-version": version}

    def _cal_url(self, path: str) -> str:
        return (self.credential.base_url or CAL_COM_URL).rstrip("/") + path

    def _event_type_id(self) -> int:
        event_type_id = self.credential.options.get("event_type_id")
        if event_type_id is None:
            raise BookingRefused("the calendar is not set up for booking (no event type)")
        return int(event_type_id)

    async def _cal_slots(self, arguments: dict[str, Any]) -> ToolOutcome:
        start, end = _range(arguments, self.zone)
        params = {
            "eventTypeId": str(self._event_type_id()),
            "start": start.astimezone(self.zone).isoformat(),
            "end": end.astimezone(self.zone).isoformat(),
            "timeZone": self.zone.key,
        }
        exchange = await self.caller.exchange(
            "GET",
            self._cal_url("/v2/slots"),
            params=params,
            headers=self._cal_headers(SLOTS_API_VERSION),
        )
        if not exchange.ok:
            return _failure("The calendar could not be read.", exchange)
        data = _json(exchange.body).get("data") or {}
        starts: list[datetime] = []
        for slots in data.values() if isinstance(data, dict) else ():
            for slot in slots if isinstance(slots, list) else ():
                value = slot.get("start") if isinstance(slot, dict) else slot
                try:
                    starts.append(parse_moment(value, self.zone))
                except BookingRefused:
                    continue
        starts.sort()
        return _success(
            _slot_text(starts, self.zone),
            [s.isoformat() for s in starts[:MAX_SLOTS]],
            exchange.status_code,
        )

    async def _cal_book(self, arguments: dict[str, Any]) -> ToolOutcome:
        start = parse_moment(arguments.get("start"), self.zone)
        name = str(arguments.get("name") or "").strip()
        email = str(arguments.get("email") or "").strip()
        if not name:
            raise BookingRefused("the customer's name is required")
        if not email:
            raise BookingRefused("an e-mail address is required to book this calendar")
        body: dict[str, Any] = {
            "start": start.astimezone(ZoneInfo("UTC")).isoformat().replace("+00:00", "Z"),
            "eventTypeId": self._event_type_id(),
            "attendee": {"name": name, "email": email, "timeZone": self.zone.key},
        }
        if arguments.get("notes"):
            body["bookingFieldsResponses"] = {"notes": str(arguments["notes"])[:1000]}
        exchange = await self.caller.exchange(
            "POST",
            self._cal_url("/v2/bookings"),
            json=body,
            headers=self._cal_headers(BOOKINGS_API_VERSION),
        )
        if not exchange.ok:
            return _failure("The booking was refused by the calendar.", exchange)
        booking = _json(exchange.body).get("data") or {}
        when = start.astimezone(self.zone).isoformat()
        reference = booking.get("uid") or booking.get("id")
        return _success(
            f"Booked for {when} ({self.zone.key}), reference {reference}.",
            {
                "uid": booking.get("uid"),
                "id": booking.get("id"),
                "start": booking.get("start") or when,
            },
            exchange.status_code,
        )

    # Google Calendar API v3

    def _google_url(self, path: str) -> str:
        return (self.credential.base_url or GOOGLE_URL).rstrip("/") + path

    def _calendar_id(self) -> str:
        return str(self.credential.options.get("calendar_id") or "primary")

    def _token_key(self) -> tuple[str, str]:
        return (self.organization_id, self.credential.version)

    async def _google(self, method: str, path: str, body: Any) -> Exchange:
        token = self.refreshed_tokens.get(self._token_key(), self.credential.api_key)
        exchange = await self.caller.exchange(
            method, self._google_url(path), json=body, headers={"Authorization": f"Bearer {token}"}
        )
        if exchange.status_code == 401 and await self._refresh():
            token = self.refreshed_tokens[self._token_key()]
            exchange = await self.caller.exchange(
                method,
                self._google_url(path),
                json=body,
                headers={"Authorization": f"Bearer {token}"},
            )
        return exchange

    async def _refresh(self) -> bool:
        options = self.credential.options
        if not all(options.get(name) for name in ("client_id", "client_secret", "refresh_token")):
            return False
        exchange = await self.caller.exchange(
            "POST",
            str(options.get("token_url") or GOOGLE_TOKEN_URL),
            data={
                "grant_type": "refresh_token",
                "client_id": str(options["client_id"]),
                "client_secret": str(options["client_secret"]),
                "refresh_token": str(options["refresh_token"]),
            },
        )
        token = _json(exchange.body).get("access_token") if exchange.ok else None
        if not isinstance(token, str) or not token:
            return False
        if len(self.refreshed_tokens) > 10_000:
            self.refreshed_tokens.clear()
        self.refreshed_tokens[self._token_key()] = token
        return True

    def _slot_length(self) -> timedelta:
        return timedelta(
            minutes=int(self.credential.options.get("slot_minutes") or DEFAULT_SLOT_MINUTES)
        )

    async def _google_free(self, arguments: dict[str, Any]) -> ToolOutcome:
        start, end = _range(arguments, self.zone)
        calendar_id = self._calendar_id()
        exchange = await self._google(
            "POST",
            "/calendar/v3/freeBusy",
            {
                "timeMin": start.isoformat(),
                "timeMax": end.isoformat(),
                "timeZone": self.zone.key,
                "items": [{"id": calendar_id}],
            },
        )
        if not exchange.ok:
            return _failure("The calendar could not be read.", exchange)
        calendars = _json(exchange.body).get("calendars") or {}
        busy = []
        for interval in (calendars.get(calendar_id) or {}).get("busy") or []:
            try:
                busy.append(
                    (
                        parse_moment(interval["start"], self.zone),
                        parse_moment(interval["end"], self.zone),
                    )
                )
            except (BookingRefused, KeyError, TypeError):
                continue
        starts = free_slots(start, end, busy, self._slot_length())
        return _success(
            _slot_text(starts, self.zone), [s.isoformat() for s in starts], exchange.status_code
        )

    async def _google_book(self, arguments: dict[str, Any]) -> ToolOutcome:
        start = parse_moment(arguments.get("start"), self.zone)
        name = str(arguments.get("name") or "").strip()
        if not name:
            raise BookingRefused("the customer's name is required")
        end = start + self._slot_length()
        event: dict[str, Any] = {
            "summary": f"Appointment with {name}"[:200],
            "start": {"dateTime": start.isoformat(), "timeZone": self.zone.key},
            "end": {"dateTime": end.isoformat(), "timeZone": self.zone.key},
        }
        if arguments.get("notes"):
            event["description"] = str(arguments["notes"])[:1000]
        if arguments.get("email"):
            event["attendees"] = [{"email": str(arguments["email"]), "displayName": name}]
        path = f"/calendar/v3/calendars/{quote(self._calendar_id(), safe='')}/events"
        exchange = await self._google("POST", path, event)
        if not exchange.ok:
            return _failure("The booking was refused by the calendar.", exchange)
        created = _json(exchange.body)
        when = start.astimezone(self.zone).isoformat()
        return _success(
            f"Booked for {when} ({self.zone.key}), reference {created.get('id')}.",
            {"id": created.get("id"), "start": when, "link": created.get("htmlLink")},
            exchange.status_code,
        )


def free_slots(
    start: datetime, end: datetime, busy: list[tuple[datetime, datetime]], length: timedelta
) -> list[datetime]:
    """Starts of `length`-long slots from `start` (stepping by `length`) that end by `end`
    and overlap no busy interval; at most MAX_SLOTS."""
    found: list[datetime] = []
    moment = start
    while moment + length <= end and len(found) < MAX_SLOTS:
        finish = moment + length
        if not any(b_start < finish and moment < b_end for b_start, b_end in busy):
            found.append(moment)
        moment = finish
    return found


def _json(body: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
