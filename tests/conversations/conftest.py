"""Settings with a known app secret and verify token, and the templates tests' job drain."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import Settings
from app.resources import Resources
from tests.conftest import make_settings
from tests.templates.conftest import Jobs

APP_SECRET = "meta-app-secret-for-tests"
VERIFY_TOKEN = "verify-me-please"


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return make_settings(
        database_url,
        tmp_path,
        whatsapp_app_secret=APP_SECRET,
        whatsapp_verify_token=VERIFY_TOKEN,
    )


@pytest.fixture
def jobs(resources: Resources, sessionmaker: async_sessionmaker[AsyncSession]) -> Jobs:
    return Jobs(resources, sessionmaker)
