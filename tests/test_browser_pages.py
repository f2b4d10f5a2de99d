"""The service's own pages in headless Chromium with every outside host blocked: the landing
page links the REST reference (/api/v1/docs, Swagger UI rendering the OpenAPI document) and
GraphiQL; both render and work from the package's files alone. Screenshots are saved (see
SWITCHBOARD_SCREENSHOT_DIR in tests/browser.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.auth.service import create_api_key
from app.db.engine import create_engine, create_sessionmaker
from app.main import create_app
from app.organizations.service import create_organization
from tests.browser import browser_page, screenshot_dir
from tests.conftest import TEST_SECRET, fresh_database, make_settings
from tests.live_server import ServerThread


@dataclass
class Served:
    base_url: str
    organization_id: str
    api_key: str


async def _tenant(database_url: str) -> tuple[str, str]:
    engine = create_engine(database_url, null_pool=True)
    try:
        async with create_sessionmaker(engine)() as session:
            organization = await create_organization(session, "Browser Acme")
            key = await create_api_key(
                session, organization.id, name="ui", scopes=["full_access"], secret_key=TEST_SECRET
            )
            await session.commit()
    finally:
        await engine.dispose()
    return organization.id, key.secret


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("browser")
    with fresh_database("sqlite", directory, "sb_browser") as url:
        organization_id, api_key = asyncio.run(_tenant(url))
        server = ServerThread(create_app(make_settings(url, directory)))
        base_url = server.start()
        try:
            yield Served(base_url, organization_id, api_key)
        finally:
            server.stop()


async def test_the_rest_reference_renders_offline_and_runs_requests(
    served: Served, tmp_path: Path
) -> None:
    async with browser_page() as page:
        await page.goto(served.base_url + "/")
        await page.wait_for("document.querySelector('a[href=\"/api/v1/docs\"]') !== null")
        await page.evaluate("document.querySelector('a[href=\"/api/v1/docs\"]').click()")
        await page.wait_for("document.querySelectorAll('.opblock').length > 50")
        title = await page.evaluate("document.querySelector('.info .title').textContent")
        assert "Switchboard" in title
        tags = await page.evaluate(
            "[...document.querySelectorAll('.opblock-tag')].map(t => t.dataset.tag)"
        )
        assert {"contacts", "call logs", "inbox"} <= set(tags)
        await page.screenshot(screenshot_dir(tmp_path) / "rest-reference.png")
        # "Authorize", then "Try it out" and "Execute" on GET /contacts, as a person would.
        await page.evaluate("document.querySelector('.btn.authorize').click()")
        await page.wait_for("document.querySelector('.modal-ux input') !== null")
        await page.evaluate("document.querySelector('.modal-ux input').focus()")
        await page.send("Input.insertText", text=served.api_key)
        await page.evaluate(
            "document.querySelector('.modal-ux .auth-btn-wrapper .authorize').click()"
        )
        await page.evaluate("document.querySelector('.modal-ux .btn-done').click()")
        operation = "#operations-contacts-list_contacts"
        await page.evaluate(
            f"document.querySelector('{operation} .opblock-summary-control').click()"
        )
        for button in (".try-out__btn", ".execute"):
            await page.wait_for(f"document.querySelector('{operation} {button}') !== null")
            await page.evaluate(f"document.querySelector('{operation} {button}').click()")
        status = f"{operation} .live-responses-table tbody .response-col_status"
        await page.wait_for(f"document.querySelector('{status}') !== null")
        assert await page.evaluate(f"document.querySelector('{status}').textContent") == "200"
        await page.screenshot(screenshot_dir(tmp_path) / "rest-reference-try-it-out.png")
    assert page.outside_requests() == []
    assert page.console_errors == []


async def test_graphiql_renders_offline_and_keeps_the_key_in_session_storage(
    served: Served, tmp_path: Path
) -> None:
    headers = f'{{"Authorization": "Bearer {served.api_key}"}}'
    async with browser_page() as page:
        # The key, as GraphiQL stores what is pasted into its Headers editor.
        await page.goto(served.base_url + "/healthz")
        await page.wait_for("document.readyState === 'complete'")
        await page.evaluate(
            f"sessionStorage.setItem('graphiql:headers', {headers!r});"
            "sessionStorage.setItem('graphiql:query', '{ viewer { organizationId } }');"
        )
        await page.goto(served.base_url + "/graphql")
        await page.wait_for("document.querySelector('.graphiql-execute-button') !== null")
        await page.evaluate("document.querySelector('.graphiql-execute-button').click()")
        await page.wait_for(
            f"document.querySelector('.result-window')?.textContent.includes("
            f"{served.organization_id!r})"
        )
        await page.screenshot(screenshot_dir(tmp_path) / "graphiql.png")
        stored = await page.evaluate(
            "({local: Object.keys(localStorage), session: Object.values(sessionStorage)})"
        )
        # The key is kept for this tab only (gone when it closes), never on disk.
        assert stored["local"] == []
        assert any(served.api_key in value for value in stored["session"])
    assert page.outside_requests() == []
