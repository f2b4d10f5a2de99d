"""Settings: the one place that reads the environment (and an optional `.env`)."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import secrets
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
)

from app.kit.prices import parse_prices, parse_speech_prices
from app.kit.ratelimit import RateLimit

VAR_DIR = Path("./var")
MIN_SECRET_LENGTH = 32
# What a job run needs beyond its longest attempt: its statements before and after it.
JOB_LEASE_MARGIN_SECONDS = 2.0
# What a stopping worker process may take beyond its jobs' grace and the webhook timeout.
WORKER_STOP_MARGIN = 15.0
# The event loop kinds a worker process can run its jobs on (workers/broker.py).
EventLoopKind = Literal["uvloop", "asyncio"]


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


_ORIGIN = re.compile(r"https?://[^/\s,]+")


def _split(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


class Settings(BaseSettings):
    """Every knob of the service; names match the documented environment variables."""

    # Each field is read from SWITCHBOARD_<FIELD NAME> (any case), or the same line in `.env`.
    model_config = SettingsConfigDict(env_prefix="SWITCHBOARD_", env_file=".env", extra="ignore")

    # The two connection URLs keep their conventional names, without the prefix (the second
    # choice lets code pass them by field name).
    database_url: str = Field(
        default="sqlite+aiosqlite:///./var/switchboard.db",
        validation_alias=AliasChoices("DATABASE_URL", "database_url"),
    )
    redis_url: str | None = Field(
        default=None, validation_alias=AliasChoices("REDIS_URL", "redis_url")
    )
    secret_key: str | None = None
    # A directory of files, one per setting, each named like its variable in lower case
    # (`switchboard_secret_key`, `database_url`) and holding its value: how container secrets
    # (/run/secrets) reach the process without being environment variables. Variables win.
    secrets_dir: Path | None = None
    storage_url: str = "file://./var/objects"
    allow_private_webhook_urls: bool = False
    # Browser origins allowed to call /graphql and /api/v1, comma-separated (app/cors.py).
    cors_origins: str | None = None
    graph_api_url: str = "https://graph.facebook.com"
    # The Graph API version every platform URL is built with (`{graph_api_url}/{version}/…`).
    graph_api_version: str = Field(default="v19.0", pattern=r"^v[0-9]{1,3}\.[0-9]{1,2}$")
    # Meta's limits and ratings (docs/api.md "Meta's limits and ratings"): a campaign
    # recipient refused for Meta's per-user marketing limit (131049) is tried again after
    # this long, at most this many times, then failed.
    campaign_deferral_seconds: float = Field(default=24 * 3600.0, gt=0)
    campaign_deferral_max_retries: int = Field(default=3, ge=0, le=100)
    # A campaign's send rate on a channel rated YELLOW, as a share of the channel's budget.
    yellow_rate_factor: float = Field(default=0.5, gt=0, le=1)
    # What a message costs, by Meta's pricing category and recipient country (JSON; see
    # app/campaigns/costs.py). Unset: no rates, costs are 0.
    message_rate_card: str | None = None
    # A message sent outside a campaign (a reply) waits at most this long for its channel's
    # send budget, a 130429 hold or its recipient's pair rate; then it is stored failed.
    send_max_wait_seconds: float = Field(default=10.0, gt=0)
    # WhatsApp inbound webhooks (GET/POST /webhooks/whatsapp). The app secret verifies
    # X-Hub-Signature-256 (unset: one derived from the secret key, which the simulator also
    # signs with; set it to the Meta app's secret for live traffic). No verify token: the
    # subscription handshake is refused.
    whatsapp_app_secret: str | None = Field(default=None, repr=False)
    whatsapp_verify_token: str | None = Field(default=None, repr=False)
    # A campaign recipient claimed this long ago and still unsettled belongs to a dispatch run
    # that died mid-send: reconciled (failed as unconfirmed, never blindly resent).
    campaign_claim_stale_seconds: float = Field(default=300.0, gt=0)
    rate_limit_per_key: str = "100/s"
    rate_limit_per_org: str = "300/s"
    # Requests without a credential (introspection, login) have no key to count against.
    rate_limit_per_address: str = "60/m"
    # Login attempts from one client address, whatever e-mails they name (password spraying).
    login_rate_limit_per_address: str = "30/10m"
    # Failed credential checks (bad, expired or revoked keys and tokens) from one client address;
    # past it the address gets 429 whatever it sends, until the bucket has room (key spraying).
    auth_failure_rate_limit_per_address: str = "30/m"
    # The fast paths, each of which leans on private APIs of a pinned dependency (docs/
    # architecture.md, "Upgrading Strawberry, graphql-core or SQLAlchemy"); off: the plain path.
    # Compiled plans for repeated queries (app/graphql/planned.py); off: Strawberry runs all.
    graphql_planning: bool = True
    # Objects of plain fields completed without resolver calls (app/graphql/execution.py);
    # off: graphql-core completes every field.
    graphql_fast_executor: bool = True
    # Prepared statements sent on the driver (app/db/prepared.py): on PostgreSQL the read pool
    # and the workers' job statements on asyncpg, on a SQLite file the read-only sessions'
    # reads on their own connections (app/db/sqlite_reads.py); off: through SQLAlchemy sessions.
    prepared_on_driver: bool = True
    jwt_ttl_seconds: int = Field(default=3600, ge=60)
    idempotency_ttl_seconds: int = Field(default=24 * 3600, ge=60)
    db_pool_size: int = Field(default=20, ge=1)
    log_level: str = "info"
    access_log: bool = True
    var_dir: Path = VAR_DIR
    # Largest request body read, in bytes (JSON on REST and /graphql); an Operation may declare
    # its own (uploads). Counted while the body streams in; over it: 413.
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    # The job engine (app/kit/outbox.py, workers/). Seconds unless named otherwise.
    outbox_sweep_seconds: float = Field(default=1.0, gt=0)
    outbox_redispatch_seconds: float = Field(default=30.0, gt=0)
    job_lease_seconds: float = Field(default=60.0, gt=0)
    job_max_starts: int = Field(default=5, ge=1)
    # Multiplies every webhook retry delay (1.0 = the Standard Webhooks schedule); tests shrink it.
    webhook_retry_scale: float = Field(default=1.0, gt=0)
    webhook_timeout_seconds: float = Field(default=10.0, gt=0)
    # Messages a worker process holds ahead: Dramatiq's default (2 per thread) leaves the Redis
    # consumer idling between fetches.
    worker_prefetch: int = Field(default=64, ge=1)
    worker_threads: int = Field(default=4, ge=1)
    # The event loop a worker process runs its jobs on: uvloop's (libuv, its transports in C:
    # 9 % fewer instructions per AI reply, docs/benchmarks.md) or asyncio's own.
    worker_event_loop: EventLoopKind = "uvloop"
    # A stopping `switchboard worker` process waits this long for its running jobs (Dramatiq's
    # --worker-shutdown-timeout), then closes; whatever happens it ends within
    # `worker_stop_deadline_seconds` of the signal (workers/stopping.py).
    worker_shutdown_seconds: float = Field(default=30.0, gt=0)
    # Jobs a worker process runs at once on its own event loop: detached jobs (webhook
    # attempts and AI replies, which hold no worker thread) and the deliveries a fan-out of
    # this process created (started straight away, no broker round trip; beyond the room,
    # through the broker). A worker thread that takes a detached job waits while the room is
    # full.
    worker_local_jobs: int = Field(default=64, ge=1)
    # Fair delivery (app/webhooks/sender.py EndpointGate): attempts in flight per endpoint and
    # worker process; failures in a row that open an endpoint's circuit, and for how long.
    webhook_endpoint_concurrency: int = Field(default=8, ge=1)
    webhook_breaker_failures: int = Field(default=5, ge=1)
    webhook_breaker_seconds: float = Field(default=30.0, gt=0)
    # The API process's Redis client (rate limits, caches, event publishing): connecting, and
    # then each reply, may take this long before the caller falls back (app/kit/redis_clients.py).
    redis_connect_timeout_seconds: float = Field(default=1.0, gt=0)
    redis_timeout_seconds: float = Field(default=0.5, gt=0)
    # Socket timeouts of the job broker's Redis client: a Redis that stops answering costs a
    # relay this long, then the outbox sweep sends the job later.
    broker_timeout_seconds: float = Field(default=2.0, gt=0)
    # Where a `switchboard worker` serves the Prometheus figures of all its processes; 0: off.
    worker_metrics_port: int = Field(default=9191, ge=0, le=65535)
    # Voice calls of live keys go to a Twilio-compatible carrier REST API
    # (app/integrations/telephony/); test keys never leave the built-in simulator.
    telephony_api_url: str = "https://api.twilio.com"
    telephony_account_sid: str | None = None
    telephony_auth_token: str | None = None
    # This service's public base URL as the carrier reaches it: status callbacks are built on
    # it and their signatures are checked against it (behind a proxy the request URL differs).
    telephony_public_url: str | None = None
    telephony_timeout_seconds: float = Field(default=10.0, gt=0)
    # No carrier request places an outbound call this long after it was dispatched; a call
    # the carrier has not confirmed by then (plus two request timeouts) is ended `failed`
    # by the placement sweep (app/calls/placement.py).
    telephony_placement_deadline_seconds: float = Field(default=120.0, gt=0)
    # A simulated custom-tool or LLM request of an agent call gives up after this long.
    agent_tool_timeout_seconds: float = Field(default=5.0, gt=0)
    # The conversation engine (app/engine/): every turn of every agent, whatever the channel.
    # A turn (model rounds and tool calls together) ends by this deadline.
    engine_turn_deadline_seconds: float = Field(default=30.0, gt=0)
    # Model calls of one turn that may ask for tools before the model must answer in words.
    engine_max_tool_rounds: int = Field(default=4, ge=0, le=20)
    # What the model sees of a conversation: the last N messages within a token budget.
    engine_history_messages: int = Field(default=20, ge=1, le=500)
    engine_history_tokens: int = Field(default=4000, ge=100)
    # Characters of one tool answer (custom, MCP, booking, knowledge) handed to the model.
    engine_tool_result_chars: int = Field(default=4000, ge=100, le=100_000)
    # Tools an MCP server lists are kept this long per agent version (refreshed on failure).
    engine_mcp_cache_seconds: float = Field(default=300.0, ge=0)
    # Model requests: each attempt's timeout, retries on 429/5xx/timeouts and their first
    # backoff (doubling, with jitter; a provider's Retry-After wins when longer).
    llm_request_timeout_seconds: float = Field(default=20.0, gt=0)
    llm_max_retries: int = Field(default=2, ge=0, le=10)
    llm_retry_backoff_seconds: float = Field(default=0.5, ge=0)
    llm_max_output_tokens: int = Field(default=512, ge=1, le=32_000)
    # Streamed responses (SSE); false asks providers for one whole response instead.
    llm_streaming: bool = True
    # USD per million tokens, `{"provider/model": [input, output]}`, over the built-in table.
    llm_prices: str | None = None
    # Per organization: conversations an agent holds at once (calls, tests, chats) and replies.
    ai_max_concurrent_conversations: int = Field(default=50, ge=1)
    ai_replies_per_minute: str = "600/m"
    # AI replies on messaging channels: messages of one conversation that arrive within this
    # many seconds of each other get one reply, sent at most `ai_reply_max_wait_seconds` after
    # the first of them (a customer who keeps typing is still answered).
    ai_reply_burst_seconds: float = Field(default=2.0, ge=0, le=60)
    ai_reply_max_wait_seconds: float = Field(default=10.0, ge=0, le=600)
    # Live voice (app/voice/, docs/operations.md "Live voice"). Whether this API process also
    # terminates carrier media streams (`switchboard serve`; false when `switchboard voice`
    # processes take them behind the same public URL).
    voice_serve_streams: bool = True
    # A stream token opens its call's media stream once, within this many seconds of the
    # TwiML that carries it (an outbound call may ring and queue before it is answered).
    voice_stream_token_seconds: float = Field(default=300.0, gt=0, le=3600)
    # Live calls an organization may have under way at once (outbound and inbound).
    voice_max_concurrent_calls: int = Field(default=10, ge=1)
    # Seconds of caller silence before the agent says goodbye and hangs up.
    voice_silence_timeout_seconds: float = Field(default=20.0, gt=0)
    # Longest live call; the agent says goodbye and hangs up at this point.
    voice_max_call_seconds: float = Field(default=1800.0, gt=0)
    # The holding process refreshes each call's heartbeat this often; a heartbeat older than
    # `voice_stale_after_seconds` means that process died, and the sweep ends the call failed.
    voice_heartbeat_seconds: float = Field(default=10.0, gt=0)
    voice_stale_after_seconds: float = Field(default=60.0, gt=0)
    # On SIGTERM a voice process takes no new streams and lets calls finish this long.
    voice_drain_seconds: float = Field(default=300.0, ge=0)
    # A media stream message larger than this ends the call (Twilio's are a few hundred bytes).
    voice_max_message_bytes: int = Field(default=64 * 1024, ge=1024)
    # USD prices of speech, over the built-in table (app/engine/pricing.py):
    # `{"deepgram": 0.0043, "elevenlabs": 0.18, "cartesia": 0.065, "telephony": 0.014}`
    # (speech to text per minute, speech per 1,000 characters, carrier per minute when the
    # carrier reports no price).
    voice_prices: str | None = None
    # campaignProgress re-reads a scheduled, sending or paused campaign's row this often
    # (status callbacks move counters without an event of their own).
    campaign_progress_poll_seconds: float = Field(default=0.5, gt=0, le=1.0)
    # GraphQL subscriptions (events, campaignProgress, callProgress) one organization may hold
    # open at once in one API process; the next is refused (too_many_subscriptions).
    subscriptions_per_organization: int = Field(default=100, ge=1)

    # Knowledge base (app/knowledge/): uploads, extraction limits, chunking, embeddings.
    storage_endpoint_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "SWITCHBOARD_STORAGE_ENDPOINT_URL", "AWS_ENDPOINT_URL", "storage_endpoint_url"
        ),
    )
    knowledge_max_upload_bytes: int = Field(default=25 * 1024 * 1024, ge=1)
    # The largest contact import CSV (docs/api.md, "Contacts in and out").
    contact_import_max_bytes: int = Field(default=256 * 1024 * 1024, ge=1)
    knowledge_upload_rate_limit: str = "30/m"  # per organization
    knowledge_max_documents: int = Field(default=1000, ge=1)
    knowledge_max_pages: int = Field(default=2000, ge=1)
    knowledge_max_characters: int = Field(default=5_000_000, ge=1)
    knowledge_max_zip_entries: int = Field(default=1000, ge=1)
    knowledge_max_zip_bytes: int = Field(default=200 * 1024 * 1024, ge=1)
    knowledge_extraction_seconds: float = Field(default=30.0, gt=0)
    knowledge_extraction_memory_bytes: int = Field(default=1024 * 1024 * 1024, ge=64 * 1024 * 1024)
    # Extractions a worker process runs at once, and how many of them one organization may
    # hold (app/knowledge/fairness.py); a document waiting for a slot stays `pending`.
    knowledge_extraction_concurrency: int = Field(default=2, ge=1)
    knowledge_extraction_per_organization: int = Field(default=1, ge=1)
    knowledge_chunk_tokens: int = Field(default=160, ge=8)
    knowledge_chunk_overlap: int = Field(default=32, ge=0)
    # Vectors kept in each process for exact cosine search (all organizations together).
    knowledge_vector_cache_bytes: int = Field(default=256 * 1024 * 1024, ge=0)
    embeddings_provider: Literal["none", "local", "openai"] = "none"
    embeddings_url: str | None = None
    embeddings_api_key: str | None = None
    embeddings_model: str = "text-embedding-3-small"
    embeddings_model_path: Path | None = None
    embeddings_allow_private_url: bool = False

    @field_validator("llm_prices")
    @classmethod
    def _valid_prices(cls, value: str | None) -> str | None:
        parse_prices(value)
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        directory = os.environ.get("SWITCHBOARD_SECRETS_DIR")
        if directory and Path(directory).is_dir():
            file_secret_settings = SecretsSettingsSource(settings_cls, secrets_dir=directory)
        return init_settings, env_settings, dotenv_settings, file_secret_settings

    @field_validator("message_rate_card")
    @classmethod
    def _valid_rate_card(cls, value: str | None) -> str | None:
        from app.kit.rate_card import parse_rate_card  # the card's one reader

        parse_rate_card(value)
        return value

    @field_validator("voice_prices")
    @classmethod
    def _valid_voice_prices(cls, value: str | None) -> str | None:
        parse_speech_prices(value)
        return value

    @model_validator(mode="after")
    def _lease_outlasts_an_attempt(self) -> Settings:
        # A run's lease must outlast its longest step (a webhook attempt, bounded by its
        # timeout; a document's extraction, bounded by its limit) plus its statements, or a
        # second run would start while the first still works: the fencing token refuses the
        # stale run's writes (app/kit/outbox.py), so a slow document would be extracted again
        # and again until parked, and stay `indexing`.
        steps = {
            "the webhook timeout": self.webhook_timeout_seconds,
            "the extraction limit": self.knowledge_extraction_seconds,
        }
        longest = max(steps, key=lambda name: steps[name])
        needed = steps[longest] + JOB_LEASE_MARGIN_SECONDS
        if self.job_lease_seconds < needed:
            raise ValueError(
                f"job_lease_seconds ({self.job_lease_seconds:g}) must be at least {longest}"
                f" plus {JOB_LEASE_MARGIN_SECONDS:g} s ({needed:g})"
            )
        return self

    @model_validator(mode="after")
    def _an_organization_leaves_room(self) -> Settings:
        if self.knowledge_extraction_per_organization > self.knowledge_extraction_concurrency:
            raise ValueError(
                "knowledge_extraction_per_organization"
                f" ({self.knowledge_extraction_per_organization}) cannot exceed"
                f" knowledge_extraction_concurrency ({self.knowledge_extraction_concurrency})"
            )
        return self

    @field_validator(
        "rate_limit_per_key",
        "rate_limit_per_org",
        "rate_limit_per_address",
        "login_rate_limit_per_address",
        "auth_failure_rate_limit_per_address",
        "knowledge_upload_rate_limit",
        "ai_replies_per_minute",
    )
    @classmethod
    def _valid_rate(cls, value: str) -> str:
        RateLimit.parse(value)
        return value

    @field_validator(
        "redis_url",
        "secret_key",
        "storage_endpoint_url",
        "embeddings_url",
        "embeddings_api_key",
        "embeddings_model_path",
        "whatsapp_app_secret",
        "whatsapp_verify_token",
        "llm_prices",
        "cors_origins",
        "voice_prices",
        "message_rate_card",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("cors_origins")
    @classmethod
    def _valid_origins(cls, value: str | None) -> str | None:
        for origin in _split(value):
            if origin != "*" and _ORIGIN.fullmatch(origin) is None:
                raise ValueError(
                    f"{origin!r} is not an origin: scheme://host[:port], no path (or *)"
                )
        return value

    @property
    def cors_origin_list(self) -> list[str]:
        return _split(self.cors_origins)

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

    def whatsapp_app_secret_value(self) -> str:
        """The secret webhook signatures are checked with (and the simulator signs with)."""
        if self.whatsapp_app_secret:
            return self.whatsapp_app_secret
        digest = hmac.new(
            self.resolved_secret_key().encode(), b"switchboard/whatsapp-app-secret", hashlib.sha256
        )
        return digest.hexdigest()

    @property
    def worker_stop_deadline_seconds(self) -> float:
        """When a stopping worker process ends at the latest: its jobs' grace, then the time to
        close (deliveries in flight get the webhook timeout), plus a margin."""
        return self.worker_shutdown_seconds + self.webhook_timeout_seconds + WORKER_STOP_MARGIN

    @cached_property
    def key_rate_limit(self) -> RateLimit:
        return RateLimit.parse(self.rate_limit_per_key)

    @cached_property
    def org_rate_limit(self) -> RateLimit:
        return RateLimit.parse(self.rate_limit_per_org)

    @cached_property
    def address_rate_limit(self) -> RateLimit:
        return RateLimit.parse(self.rate_limit_per_address)

    @cached_property
    def login_address_rate_limit(self) -> RateLimit:
        return RateLimit.parse(self.login_rate_limit_per_address)

    @cached_property
    def auth_failure_address_rate_limit(self) -> RateLimit:
        return RateLimit.parse(self.auth_failure_rate_limit_per_address)

    @cached_property
    def knowledge_upload_limit(self) -> RateLimit:
        return RateLimit.parse(self.knowledge_upload_rate_limit)

    @cached_property
    def ai_replies_limit(self) -> RateLimit:
        return RateLimit.parse(self.ai_replies_per_minute)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
