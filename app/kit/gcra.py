"""GCRA, the one bucket every limit of Switchboard is made of: once in Python, once in Lua.

GCRA (generic cell rate algorithm) keeps one number per bucket, the theoretical arrival time
(TAT): when the bucket will be full again. A bucket of `burst / interval` tokens refilling one
token per `interval` costs one read and one write per step, with no timers and no lists.

The request rate limits (app/kit/ratelimit.py: allow or deny a cost) and the send governor
(app/kit/send_governor.py: grant up to what is wanted, and Meta's pair rate) are all steps of
this one function, in memory (`step`) and in Redis (`LUA`, prepended to their scripts), so the
two backends decide alike.

All arithmetic is in integer microseconds: floats would round a little on every step, and Lua
has doubles only; integers below 2**53 are exact in both.
"""

from __future__ import annotations

from typing import Final, NamedTuple

US_PER_S: Final = 1_000_000


class Step(NamedTuple):
    """One step's outcome. `tat` is the TAT to store when `allowed` (nothing is stored
    otherwise, so asking early costs nothing); `available` counts the whole tokens there were
    before this step (negative: the bucket is overdrawn by a floor or a push)."""

    allowed: bool
    granted: int
    available: int
    wait: int
    tat: int


def step(
    stored_tat: int, now: int, interval: int, burst: int, need: int, wanted: int, floor: int = 0
) -> Step:
    """Take `wanted` tokens, or as many as are there if at least `need` are (need 0: a peek
    that never takes one), else none and the wait until `need` are. `floor`: the TAT may not
    be earlier than this (a bucket restarting empty at `floor - burst`). `LUA` mirrors it."""
    tat = max(stored_tat, now, floor)
    available = (now + burst - tat) // interval
    if available >= need:
        granted = min(wanted, available)
        return Step(True, granted, available, 0, tat + granted * interval)
    return Step(False, 0, available, tat + need * interval - burst - now, tat)


# The same step as a Lua function, for scripts that begin with this text. Returns allowed
# (1/0), granted, available, wait, tat: `step`, line for line.
LUA: Final = """
local function gcra(stored, now, interval, burst, need, wanted, floor)
  local tat = math.max(stored, now, floor)
  local available = math.floor((now + burst - tat) / interval)
  if available >= need then
    local granted = math.min(wanted, available)
    return 1, granted, available, 0, tat + granted * interval
  end
  return 0, 0, available, tat + need * interval - burst - now, tat
end
"""
