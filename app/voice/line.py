"""What a call's session asks of the line it runs on: hang up, transfer.

`CarrierLine` acts through the carrier's REST API (`Calls/{Sid}.json`): `Status=completed`
hangs up, new TwiML with `<Dial>` transfers; the carrier then ends the media stream itself.
A browser session's line (another transport) closes its websocket instead and cannot
transfer. Both are idempotent: acting on a call that already ended changes nothing.
"""

from __future__ import annotations

from typing import Protocol

import structlog

from app.integrations.telephony.base import CarrierError
from app.integrations.telephony.twilio import TwilioCarrier, dial_twiml

logger = structlog.get_logger("switchboard.voice")


class CallLine(Protocol):
    async def hang_up(self) -> bool:
        """End the call; False when the line could not be reached."""
        ...

    async def transfer(self, number: str) -> bool:
        """Hand the caller to `number`; False when this line cannot (the session then
        hangs up)."""
        ...


class CarrierLine:
    def __init__(self, carrier: TwilioCarrier | None, call_sid: str) -> None:
        self.carrier = carrier
        self.call_sid = call_sid

    async def hang_up(self) -> bool:
        if self.carrier is None:
            return False
        try:
            await self.carrier.update_call(self.call_sid, status="completed")
        except CarrierError as exc:
            logger.warning("carrier hang-up failed", call_sid=self.call_sid, error=exc.message)
            return False
        return True

    async def transfer(self, number: str) -> bool:
        if self.carrier is None:
            return False
        try:
            await self.carrier.update_call(self.call_sid, twiml=dial_twiml(number))
        except CarrierError as exc:
            logger.warning("carrier transfer failed", call_sid=self.call_sid, error=exc.message)
            return False
        return True
