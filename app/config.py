"""Settings: the one place that reads the environment (and an optional `.env`)."""

from __future__ import annotations

import contextlib
import os
import secrets
from functools import cached_property, lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.kit.ratelimit import RateLimit

VAR_DIR = Path("./var")
MIN_SECRET_LENGTH = 32


def _create_secret_file(path: Path, key: str) -> None:
    """Write the key to a private temp file, then link it into place.

    The link either creates `path` whole (mode 0600 from the first byte) or fails because
    another process got there first, whose complete key then wins: nobody ever reads a
    partly written or world-readable key.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(key)
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # another process's key won
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


class Settings(BaseSettings):
    """Every knob of the service; names match the documented environment variables."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    database_url: str = Field(
        default="sqlite+aiosqlite:///./var/switchboard.db",
        validation_alias=AliasChoices("DATABASE_URL", "database_url"),
    )
    redis_url: str | None = Field(
        default=None, validation_alias=AliasChoices("REDIS_URL", "redis_url")
    )
    secret_key: str | None = Field(
        default=None, validation_alias=AliasChoices("SWITCHBOARD_SECRET_KEY", "secret_key")
    )
    storage_url: str = Field(
        default="file://./var/objects",
        validation_alias=AliasChoices("SWITCHBOARD_STORAGE_URL", "storage_url"),
    )
    allow_private_webhook_urls: bool = Field(
        default=False,
        validation_alias=AliasChoices(
            "SWITCHBOARD_ALLOW_PRIVATE_WEBHOOK_URLS", "allow_private_webhook_urls"
        ),
    )
    graph_api_url: str = Field(
        default="https://graph.facebook.com",
        validation_alias=AliasChoices("SWITCHBOARD_GRAPH_API_URL", "graph_api_url"),
    )
    rate_limit_per_key: str = Field(
        default="100/s",
        validation_alias=AliasChoices("SWITCHBOARD_RATE_LIMIT_PER_KEY", "rate_limit_per_key"),
    )
    rate_limit_per_org: str = Field(
        default="300/s",
        validation_alias=AliasChoices("SWITCHBOARD_RATE_LIMIT_PER_ORG", "rate_limit_per_org"),
    )
    jwt_ttl_seconds: int = Field(
        default=3600,
        ge=60,
        validation_alias=AliasChoices("SWITCHBOARD_JWT_TTL_SECONDS", "jwt_ttl_seconds"),
    )
    idempotency_ttl_seconds: int = Field(
        default=24 * 3600,
        ge=60,
        validation_alias=AliasChoices(
            "SWITCHBOARD_IDEMPOTENCY_TTL_SECONDS", "idempotency_ttl_seconds"
        ),
    )
    db_pool_size: int = Field(
        default=20, ge=1, validation_alias=AliasChoices("SWITCHBOARD_DB_POOL_SIZE", "db_pool_size")
    )
    log_level: str = Field(
        default="info", validation_alias=AliasChoices("SWITCHBOARD_LOG_LEVEL", "log_level")
    )
    access_log: bool = Field(
        default=True, validation_alias=AliasChoices("SWITCHBOARD_ACCESS_LOG", "access_log")
    )
    var_dir: Path = Field(
        default=VAR_DIR, validation_alias=AliasChoices("SWITCHBOARD_VAR_DIR", "var_dir")
    )
    # The job engine (app/kit/outbox.py, workers/). Seconds unless named otherwise.
    outbox_sweep_seconds: float = Field(
        default=1.0,
        gt=0,
        validation_alias=AliasChoices("SWITCHBOARD_OUTBOX_SWEEP_SECONDS", "outbox_sweep_seconds"),
    )
    outbox_redispatch_seconds: float = Field(
        default=30.0,
        gt=0,
        validation_alias=AliasChoices(
            "SWITCHBOARD_OUTBOX_REDISPATCH_SECONDS", "outbox_redispatch_seconds"
        ),
    )
    job_lease_seconds: float = Field(
        default=60.0,
        gt=0,
        validation_alias=AliasChoices("SWITCHBOARD_JOB_LEASE_SECONDS", "job_lease_seconds"),
    )
    job_max_starts: int = Field(
        default=5,
        ge=1,
        validation_alias=AliasChoices("SWITCHBOARD_JOB_MAX_STARTS", "job_max_starts"),
    )
    # Multiplies every webhook retry delay (1.0 = the Standard Webhooks schedule); tests shrink it.
    webhook_retry_scale: float = Field(
        default=1.0,
        gt=0,
        validation_alias=AliasChoices("SWITCHBOARD_WEBHOOK_RETRY_SCALE", "webhook_retry_scale"),
    )
    webhook_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        validation_alias=AliasChoices(
            "SWITCHBOARD_WEBHOOK_TIMEOUT_SECONDS", "webhook_timeout_seconds"
        ),
    )
    # Messages a worker process holds ahead: Dramatiq's default (2 per thread) leaves the Redis
    # consumer idling between fetches.
    worker_prefetch: int = Field(
        default=64,
        ge=1,
        validation_alias=AliasChoices("SWITCHBOARD_WORKER_PREFETCH", "worker_prefetch"),
    )
    worker_threads: int = Field(
        default=4,
        ge=1,
        validation_alias=AliasChoices("SWITCHBOARD_WORKER_THREADS", "worker_threads"),
    )
    # Jobs a worker process runs straight away on its own event loop when it created them
    # itself (a fan-out's deliveries), instead of a round trip through the broker; beyond this
    # many in flight they go through the broker. 0: always through the broker.
    worker_local_jobs: int = Field(
        default=64,
        ge=0,
        validation_alias=AliasChoices("SWITCHBOARD_WORKER_LOCAL_JOBS", "worker_local_jobs"),
    )
    # Where a `switchboard worker` serves the Prometheus figures of all its processes; 0: off.
    worker_metrics_port: int = Field(
        default=9191,
        ge=0,
        le=65535,
        validation_alias=AliasChoices("SWITCHBOARD_WORKER_METRICS_PORT", "worker_metrics_port"),
    )

    @field_validator("rate_limit_per_key", "rate_limit_per_org")
    @classmethod
    def _valid_rate(cls, value: str) -> str:
        RateLimit.parse(value)
        return value

    @field_validator("redis_url", "secret_key", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    def resolved_secret_key(self) -> str:
        """The configured key, or one generated once into `var/secret.key` and reused after."""
        if self.secret_key:
            return self.secret_key
        path = self.var_dir / "secret.key"
        if not path.exists():
            _create_secret_file(path, secrets.token_urlsafe(48))
        key = path.read_text().strip()
        if len(key) < MIN_SECRET_LENGTH:
            raise RuntimeError(
                f"{path} holds no usable secret (under {MIN_SECRET_LENGTH} characters); "
                "remove it or set SWITCHBOARD_SECRET_KEY"
            )
        return key

    @cached_property
    def key_rate_limit(self) -> RateLimit:
        return RateLimit.parse(self.rate_limit_per_key)

    @cached_property
    def org_rate_limit(self) -> RateLimit:
        return RateLimit.parse(self.rate_limit_per_org)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
