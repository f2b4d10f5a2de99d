"""SWITCHBOARD_GRAPH_API_VERSION builds every Graph URL; business-scoped user ids are
addressed with `recipient`, phone numbers with `to` (against the local fake platform)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.config import Settings
from app.integrations.whatsapp.bulk import BulkMessageSender, headers_for
from app.integrations.whatsapp.client import GraphApiClient, template_message_payload
from app.integrations.whatsapp.factory import platform_for
from app.integrations.whatsapp.types import TemplateMessage
from tests.integrations.whatsapp.fake_graph import FakeGraph, running_fake_graph

TOKEN = "EAAGversiontoken"
PHONE_ID = "106540352242922"
USER_ID = "US.13491208655302741918"


@pytest.fixture(scope="module")
def graph() -> Iterator[FakeGraph]:
    with running_fake_graph(TOKEN) as graph:
        yield graph


def settings_with(tmp_path: Path, graph: FakeGraph, **values: object) -> Settings:
    return Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'unused.db'}",
        graph_api_url=graph.base_url,
        var_dir=tmp_path,
        **values,
    )


def test_the_version_defaults_to_v19_and_is_checked(tmp_path: Path, graph: FakeGraph) -> None:
    assert settings_with(tmp_path, graph).graph_api_version == "v19.0"
    for wrong in ("19.0", "v19", "v19.0/../x", "latest"):
        with pytest.raises(ValidationError):
            settings_with(tmp_path, graph, graph_api_version=wrong)


async def test_every_client_builds_urls_with_the_configured_version(
    tmp_path: Path, graph: FakeGraph
) -> None:
    graph.requests.clear()
    settings = settings_with(tmp_path, graph, graph_api_version="v23.0")
    async with platform_for(
        livemode=True,
        access_token=TOKEN,
        business_account_id="102290129340398",
        display_phone_number="+14155550142",
        settings=settings,
        session=None,
    ) as platform:
        await platform.send_text(PHONE_ID, "+14155550100", "Hello")
    sender = BulkMessageSender(settings.graph_api_url, version=settings.graph_api_version)
    try:
        await sender.send(
            headers_for(TOKEN),
            PHONE_ID,
            template_message_payload("+14155550101", TemplateMessage("order", "en_US")),
        )
    finally:
        await sender.aclose()
    paths = [seen.path for seen in graph.requests]
    assert paths == [f"/v23.0/{PHONE_ID}/messages"] * 2


async def test_a_business_scoped_user_id_is_sent_as_recipient(graph: FakeGraph) -> None:
    graph.messages.clear()
    async with GraphApiClient(graph.base_url, TOKEN) as client:
        to_user = await client.send_text(PHONE_ID, USER_ID, "Hi")
        to_phone = await client.send_template(
            PHONE_ID, "+14155550100", TemplateMessage("order", "en_US")
        )
    by_user, by_phone = graph.messages
    assert by_user["recipient"] == USER_ID
    assert "to" not in by_user
    assert by_phone["to"] == "+14155550100"
    assert "recipient" not in by_phone
    assert (to_user.wa_id, to_phone.wa_id) == (USER_ID, "14155550100")
