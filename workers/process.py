"""The module `switchboard worker` gives Dramatiq: imported once in every worker process.

It reads the settings from the environment and installs the job engine on Redis; Dramatiq
then boots the worker, which opens the job runtime (workers/runtime.py).
"""

from __future__ import annotations

import dramatiq.worker

from app.config import get_settings
from app.observability import configure_logging
from workers.broker import install_job_engine

settings = get_settings()
if not settings.redis_url:
    raise SystemExit(
        "switchboard worker needs REDIS_URL (without it, `switchboard serve` runs jobs)"
    )
configure_logging(settings.log_level)
# Dramatiq reads its prefetch from the environment when first imported, before settings exist;
# the Worker reads this module global when it is built, after this module ran.
dramatiq.worker.QUEUE_PREFETCH = settings.worker_prefetch
broker, runtime = install_job_engine(settings)
