"""Prometheus figures of the job engine (same registry as the API's /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

WEBHOOK_DELIVERIES = Counter(
    "switchboard_webhook_delivery_attempts_total",
    "Webhook delivery attempts by outcome",
    ["outcome"],  # success | http_error | network_error | refused
)
WEBHOOK_LATENCY = Histogram(
    "switchboard_webhook_delivery_seconds",
    "Duration of one webhook delivery attempt",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
JOB_FAILURES = Counter(
    "switchboard_job_failures_total", "Job runs that raised, by actor", ["actor"]
)
OUTBOX_JOBS = Gauge(
    "switchboard_outbox_jobs", "Jobs in the outbox by status (pending = queue depth)", ["status"]
)


def record_outbox(counts: dict[str, int]) -> None:
    for status, count in counts.items():
        OUTBOX_JOBS.labels(status).set(count)
