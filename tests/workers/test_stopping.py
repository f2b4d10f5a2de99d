"""How a worker process's stop signals are taken (workers/stopping.py); the same behaviour on
real `switchboard worker` processes is in tests/workers/test_redis_engine.py."""

from __future__ import annotations

import threading
from types import FrameType

from workers.stopping import DUPLICATE_SECONDS, KILLED_EXIT_CODE, StopHandling


class Recorder:
    def __init__(self) -> None:
        self.graceful: list[int] = []
        self.exits: list[int] = []
        self.exited = threading.Event()
        self.now = 100.0

    def on_graceful(self, signum: int, _frame: FrameType | None) -> None:
        self.graceful.append(signum)

    def exit_now(self, code: int) -> None:
        self.exits.append(code)
        self.exited.set()

    def clock(self) -> float:
        return self.now


def handling(recorder: Recorder, deadline: float = 3600.0) -> StopHandling:
    return StopHandling(
        recorder.on_graceful, deadline, exit_now=recorder.exit_now, clock=recorder.clock
    )


def test_a_repeat_within_the_window_is_the_same_stop() -> None:
    recorder = Recorder()
    stop = handling(recorder)
    stop(15, None)
    recorder.now += DUPLICATE_SECONDS / 2
    stop(15, None)  # the group's signal and the main process's forwarded one
    assert recorder.graceful == [15]  # Dramatiq's handler ran once: no sys.exit mid-stop
    assert recorder.exits == []


def test_a_later_signal_ends_the_process_at_once() -> None:
    recorder = Recorder()
    stop = handling(recorder)
    stop(15, None)
    recorder.now += DUPLICATE_SECONDS + 1
    stop(15, None)
    assert recorder.graceful == [15]
    assert recorder.exits == [KILLED_EXIT_CODE]


def test_the_deadline_ends_a_stop_that_never_finishes() -> None:
    recorder = Recorder()
    stop = handling(recorder, deadline=0.05)
    stop(15, None)
    assert recorder.exited.wait(5)
    assert recorder.exits == [KILLED_EXIT_CODE]


def test_no_deadline_runs_before_a_signal() -> None:
    recorder = Recorder()
    handling(recorder, deadline=0.01)
    assert not recorder.exited.wait(0.1)
