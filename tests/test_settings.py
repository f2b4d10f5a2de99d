"""Every environment variable the docs name is read into its setting (app/config.py).

Settings read SWITCHBOARD_<FIELD> through `env_prefix`; DATABASE_URL and REDIS_URL keep their
conventional names. The documented names are taken from the docs themselves, so a variable
documented but not read (or renamed in one place only) fails here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from app.config import Settings

ROOT = Path(__file__).resolve().parents[1]
VARIABLE = r"\b(SWITCHBOARD_[A-Z_]+[A-Z]|DATABASE_URL|REDIS_URL)\b"
DOCUMENTED = sorted(
    {
        name
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for name in re.findall(
            r"\b(SWITCHBOARD_[A-Z_]+[A-Z]|DATABASE_URL|REDIS_URL)\b", path.read_text()
        )
    }
)
# Values for settings whose type alone does not give a valid one.
SAMPLES: dict[str, Any] = {
    "database_url": "postgresql+asyncpg://db.internal/switchboard",
    "redis_url": "redis://cache.internal:6379/3",
    "rate_limit_per_key": "7/s",
    "rate_limit_per_org": "11/m",
    "rate_limit_per_address": "13/m",
    "login_rate_limit_per_address": "17/10m",
    "auth_failure_rate_limit_per_address": "19/m",
    "log_level": "debug",
    "knowledge_upload_rate_limit": "5/m",
    "embeddings_provider": "openai",
    "worker_event_loop": "asyncio",
    "embeddings_model_path": Path("/srv/models/minilm"),
    "ai_replies_per_minute": "90/m",
    "llm_prices": '{"openai/gpt-4o": [2.5, 10]}',
    "secrets_dir": Path("/run/secrets-of-nothing"),
    "cors_origins": "https://dashboard.example.com,http://localhost:5173",
    # Doubling it would outlast the default job lease, which start-up refuses.
    "knowledge_extraction_seconds": 45.0,
    "voice_prices": '{"deepgram": 0.005}',
    "graph_api_version": "v23.0",
    "message_rate_card": '{"currency": "USD", "rates": {"marketing": {"*": 0.05}}}',
}


def _field(variable: str) -> str:
    if variable in ("DATABASE_URL", "REDIS_URL"):
        return variable.lower()
    return variable.removeprefix("SWITCHBOARD_").lower()


def _sample(field: str) -> tuple[str, Any]:
    """An environment value for `field` and the value the setting must then hold."""
    if field in SAMPLES:
        return str(SAMPLES[field]), SAMPLES[field]
    default = Settings.model_fields[field].default
    if isinstance(default, bool):
        return str(not default).lower(), not default
    if isinstance(default, int):
        return str(default + 1), default + 1
    if isinstance(default, float):
        return str(default * 2), default * 2
    if isinstance(default, Path):
        return "/srv/switchboard/var", Path("/srv/switchboard/var")
    return "sample-value-" + field, "sample-value-" + field


def test_the_docs_name_every_setting() -> None:
    assert len(DOCUMENTED) >= 24, DOCUMENTED
    assert {_field(name) for name in DOCUMENTED} == set(Settings.model_fields)


@pytest.mark.parametrize("variable", DOCUMENTED)
def test_each_documented_variable_is_read(variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    field = _field(variable)
    assert field in Settings.model_fields, f"{variable} is documented but is no setting"
    raw, expected = _sample(field)
    monkeypatch.setenv(variable, raw)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert getattr(settings, field) == expected
    assert getattr(Settings(_env_file=None), field) == expected  # type: ignore[call-arg]


def test_the_connection_urls_take_no_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", "postgresql+asyncpg://elsewhere/db")
    monkeypatch.setenv("SWITCHBOARD_REDIS_URL", "redis://elsewhere:6379/0")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.database_url == Settings.model_fields["database_url"].default
    assert settings.redis_url is None


def test_names_are_read_in_any_case_and_from_the_env_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SWITCHBOARD_JWT_TTL_SECONDS", raising=False)
    monkeypatch.setenv("switchboard_db_pool_size", "7")
    env_file = tmp_path / ".env"
    env_file.write_text("SWITCHBOARD_JWT_TTL_SECONDS=120\nDATABASE_URL=sqlite+aiosqlite:///x.db\n")
    settings = Settings(_env_file=env_file)  # type: ignore[call-arg]
    assert (settings.db_pool_size, settings.jwt_ttl_seconds) == (7, 120)
    assert settings.database_url == "sqlite+aiosqlite:///x.db"


def test_settings_are_still_given_by_field_name() -> None:
    settings = Settings(
        database_url="sqlite+aiosqlite:///y.db", redis_url="redis://r/1", _env_file=None
    )  # type: ignore[call-arg]
    assert (settings.database_url, settings.redis_url) == (
        "sqlite+aiosqlite:///y.db",
        "redis://r/1",
    )


def test_secrets_are_read_from_files_of_the_secrets_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Container secrets: one file per setting, named like its variable in lower case; an
    environment variable of the same name still wins."""
    (tmp_path / "switchboard_secret_key").write_text("from-a-file-" + "k" * 40)
    (tmp_path / "database_url").write_text("postgresql+asyncpg://app:pw@db/switchboard")
    monkeypatch.setenv("SWITCHBOARD_SECRETS_DIR", str(tmp_path))
    monkeypatch.delenv("SWITCHBOARD_SECRET_KEY", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.secret_key == "from-a-file-" + "k" * 40
    assert settings.database_url == "postgresql+asyncpg://app:pw@db/switchboard"
    assert settings.secrets_dir == tmp_path
    monkeypatch.setenv("DATABASE_URL", "sqlite+aiosqlite:///wins.db")
    assert Settings(_env_file=None).database_url == "sqlite+aiosqlite:///wins.db"  # type: ignore[call-arg]
