"""Consent fixtures: settings with the app secret the signed webhooks use, and the campaign
fixtures (a test-mode channel, an APPROVED template, the job runner)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import Settings
from tests.campaigns.conftest import channel, jobs, template
from tests.conftest import make_settings
from tests.conversations.conftest import APP_SECRET, VERIFY_TOKEN
from tests.integrations.whatsapp.fake_graph import FakeGraph

__all__ = ["channel", "jobs", "template"]


@pytest.fixture
def settings(database_url: str, tmp_path: Path, platform: FakeGraph) -> Settings:
    return make_settings(
        database_url,
        tmp_path,
        whatsapp_app_secret=APP_SECRET,
        whatsapp_verify_token=VERIFY_TOKEN,
        graph_api_url=platform.base_url,
    )
