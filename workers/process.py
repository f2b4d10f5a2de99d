"""The module `switchboard worker` gives Dramatiq: imported once in every worker process.

It reads the settings from the environment and installs the job engine on Redis; Dramatiq
then boots the worker, which opens the job runtime (workers/runtime.py).

With a metrics port (SWITCHBOARD_WORKER_METRICS_PORT), every process of this worker writes its
Prometheus figures to one directory and one of them serves their sum (workers/metrics.py).
prometheus_client chooses where figures live when it is first imported, so this module points
it at the directory before it imports anything that reaches prometheus_client.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from app.config import get_settings

METRICS_DIRNAME = "worker-metrics"  # under SWITCHBOARD_VAR_DIR


def _run_name(pid: int) -> str | None:
    """One run of process `pid`: its pid and, where /proc tells it, its start time (so a reused
    pid, as in a restarted container, names another run). None when no such process exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return str(pid)
    return f"{pid}-{stat.rsplit(')', 1)[1].split()[19]}"  # field 22: start time


def metrics_directory(root: Path) -> Path:
    """The directory of this run of `switchboard worker` under `root`, named after its main
    process (the parent of every worker process); directories of runs that ended are removed."""
    name = _run_name(os.getppid()) or str(os.getppid())
    if root.is_dir():
        for stale in root.iterdir():
            pid = stale.name.split("-", 1)[0]
            if stale.name != name and pid.isdigit() and _run_name(int(pid)) != stale.name:
                shutil.rmtree(stale, ignore_errors=True)
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    return directory


settings = get_settings()
if not settings.redis_url:
    raise SystemExit(
        "switchboard worker needs REDIS_URL (without it, `switchboard serve` runs jobs)"
    )
metrics_dir: Path | None = None
metrics_error: OSError | None = None
if settings.worker_metrics_port:
    try:
        metrics_dir = metrics_directory(settings.var_dir / METRICS_DIRNAME)
    except OSError as exc:
        metrics_error = exc
    else:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)

import structlog  # noqa: E402  (after PROMETHEUS_MULTIPROC_DIR, see above)

from app.kit.collector import tune_for_serving  # noqa: E402
from app.observability import configure_logging  # noqa: E402
from workers import metrics  # noqa: E402
from workers.broker import install_job_engine  # noqa: E402
from workers.stopping import install_stop_handling  # noqa: E402

configure_logging(settings.log_level)
# This module is imported by each worker process's main thread, after Dramatiq set its signal
# handlers: stopping is bounded from here on (workers/stopping.py).
install_stop_handling(settings.worker_stop_deadline_seconds)
broker, runtime = install_job_engine(settings)
tune_for_serving()  # every module this process keeps is loaded by now
if metrics_error is not None:
    structlog.get_logger("switchboard.worker").error(
        "worker metrics not served", error=f"{type(metrics_error).__name__}: {metrics_error}"
    )
if metrics_dir is not None:
    if not metrics.writes_to_files():
        raise RuntimeError(
            "prometheus_client was imported before workers.process set PROMETHEUS_MULTIPROC_DIR:"
            " worker metrics would count one process only"
        )
    broker.add_middleware(metrics.MetricsExporter(metrics_dir, settings.worker_metrics_port))
