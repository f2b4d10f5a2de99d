"""A real `switchboard worker` in a subprocess for tests: started, scraped, stopped or killed.

Dramatiq forks the worker processes, so the worker runs in its own session (process group) and
is always stopped through the group: nothing outlives the test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.core.tls import client_tls_context

SWITCHBOARD = Path(sys.executable).parent / "switchboard"
REPO_DIR = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class WorkerProcess:
    """One `switchboard worker` run; its output goes to `log`."""

    def __init__(
        self, env: dict[str, str], log: Path, *, processes: int = 1, threads: int = 1
    ) -> None:
        self.log = log
        self.metrics_port = int(env["SWITCHBOARD_WORKER_METRICS_PORT"])
        with log.open("ab") as output:
            self.process = subprocess.Popen(
                [
                    str(SWITCHBOARD),
                    "worker",
                    "--processes",
                    str(processes),
                    "--threads",
                    str(threads),
                ],
                env=env,
                cwd=REPO_DIR,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killpg reaches every fork
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def scrape(self) -> str:
        response = httpx.get(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2, verify=client_tls_context()
        )
        response.raise_for_status()
        return response.text

    def wait_ready(self, seconds: float = 90.0) -> None:
        """Until the metrics exporter answers: a worker process has booted (runtime open)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"worker exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                self.scrape()
                return
            time.sleep(0.1)
        raise AssertionError(f"worker not ready in {seconds} s:\n{self.log_tail()}")

    def children(self) -> list[int]:
        """The worker processes Dramatiq forked."""
        found = subprocess.run(
            ["pgrep", "-P", str(self.pid)], capture_output=True, text=True, check=False
        )
        return [int(pid) for pid in found.stdout.split()]

    def wait_handling(self, signum: signal.Signals, seconds: float = 90.0) -> None:
        """Until the main process catches `signum` and no longer blocks it (Dramatiq blocks
        the signals it forwards while it starts its worker processes): from then on a signal
        to the group reaches each worker process twice, directly and forwarded."""
        bit = 1 << (signum - 1)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            masks = {
                name: int(value, 16)
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines()
                for name, _, value in [line.partition(":\t")]
                if name in ("SigBlk", "SigCgt")
            }
            if masks["SigCgt"] & bit and not masks["SigBlk"] & bit:
                return
            time.sleep(0.05)
        raise AssertionError(f"the worker never handled {signum.name}:\n{self.log_tail()}")

    def signal_group(self, signum: signal.Signals) -> None:
        """`kill -<signum> -<pgid>`: every process of the worker at once."""
        self._signal_group(signum)

    def wait_gone(self, seconds: float) -> float:
        """Until the main process and every worker process have exited; how long it took."""
        started = time.monotonic()
        children = self.children()
        deadline = started + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None and not any(map(_alive, children)):
                return time.monotonic() - started
            time.sleep(0.05)
        alive = [pid for pid in children if _alive(pid)]
        raise AssertionError(
            f"still running after {seconds} s (main: {self.process.poll()}, workers: {alive})"
            f":\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to the main process, which stops its worker processes (they finish running
        jobs), then SIGKILL to whatever of the group is left."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._signal_group(signal.SIGKILL)  # any fork left behind

    def kill(self) -> None:
        """kill -9 of the main process and every worker process, at once."""
        self._signal_group(signal.SIGKILL)
        self.process.wait(timeout=10)

    def _signal_group(self, signum: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@contextlib.contextmanager
def running_worker(
    env: dict[str, str], log: Path, *, processes: int = 1, threads: int = 1
) -> Iterator[WorkerProcess]:
    worker = WorkerProcess(env, log, processes=processes, threads=threads)
    try:
        worker.wait_ready()
        yield worker
    finally:
        worker.stop()


def metric_value(text: str, name: str, labels: dict[str, str] | None = None) -> float | None:
    """The value of the one sample `name{labels}` in a scrape, None when absent."""
    found = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and (labels is None or sample.labels == labels)
    ]
    assert len(found) <= 1, f"{len(found)} samples of {name}{labels or ''}"
    return found[0] if found else None
