"""How a `switchboard worker` process stops: within a bounded time, on one SIGTERM or more.

Dramatiq's worker process stops gracefully on its first SIGTERM (no new jobs; running ones
finish, for at most `--worker-shutdown-timeout`) and calls `sys.exit` on the second, wherever
its main thread happens to be. A SIGTERM sent to the process group (what docs/operations.md
recommends) reaches each worker process twice at once, from the group and from the main
process that forwards it; the `sys.exit` then interrupted the graceful stop half-way, the
process waited forever for the event loop thread it never stopped (not a daemon), and its
consumers went on taking jobs.

`install_stop_handling` wraps Dramatiq's handler in the worker process: a second signal within
`DUPLICATE_SECONDS` of the first is the same stop, delivered twice, and is ignored; a later one
means "stop now" and ends the process at once. From the first signal, a watchdog ends the
process when `deadline_seconds` have passed, whatever it waits for. Ending at once loses
nothing: every job is an outbox row under a lease (it runs again once the lease expires), and
Redis gives the messages a dead consumer held to another one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import structlog

logger = structlog.get_logger("switchboard.worker")

# The two deliveries of one group signal arrive within milliseconds of each other.
DUPLICATE_SECONDS = 2.0
# Dramatiq's exit code for a worker process ended by a second signal.
KILLED_EXIT_CODE = 1
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)

Handler = Callable[[int, FrameType | None], Any]


class StopHandling:
    def __init__(
        self,
        graceful: Handler,
        deadline_seconds: float,
        *,
        exit_now: Callable[[int], None] = os._exit,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._graceful = graceful
        self.deadline_seconds = deadline_seconds
        self._exit_now = exit_now
        self._clock = clock
        self._first: float | None = None
        self._lock = threading.Lock()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        now = self._clock()
        with self._lock:
            first = self._first
            if first is None:
                self._first = now
        if first is None:
            threading.Thread(
                target=self._watch, name="switchboard-stop-deadline", daemon=True
            ).start()
            self._graceful(signum, frame)  # Dramatiq: stop taking jobs, finish running ones
        elif now - first < DUPLICATE_SECONDS:
            return  # the same stop, delivered twice (the group's signal and the forwarded one)
        else:
            self._end("stopping at once on a second signal")

    def _watch(self) -> None:
        time.sleep(self.deadline_seconds)
        self._end(f"still stopping after {self.deadline_seconds:g} s; ending the process")

    def _end(self, why: str) -> None:
        logger.warning(why, pid=os.getpid())
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        self._exit_now(KILLED_EXIT_CODE)


def install_stop_handling(deadline_seconds: float) -> StopHandling | None:
    """In a Dramatiq worker process (its main thread, after Dramatiq set its handlers)."""
    graceful = signal.getsignal(signal.SIGTERM)
    if not callable(graceful):
        return None  # not under Dramatiq's worker process: nothing to wrap
    handling = StopHandling(graceful, deadline_seconds)
    for signum in STOP_SIGNALS:
        signal.signal(signum, handling)
    return handling
