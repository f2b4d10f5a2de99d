"""The GraphiQL page must load only vendored assets, never anything remote."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from app.graphql.ide import ASSETS, STATIC_DIR, STATIC_URL_PREFIX, graphiql_html
from tests.html_assets import asset_urls


def test_graphiql_page_uses_only_vendored_assets() -> None:
    html = graphiql_html()
    urls = asset_urls(html)
    assert all(urls), f"empty src/href in {urls}"

    # Every asset the page is meant to load is referenced.
    assert sorted(urls) == sorted(f"{STATIC_URL_PREFIX}/{name}" for name in ASSETS)

    root = STATIC_DIR.resolve()
    for url in urls:
        assert url.startswith(f"{STATIC_URL_PREFIX}/"), url
        rel = PurePosixPath(url[len(STATIC_URL_PREFIX) + 1 :])
        assert rel.parts, url
        assert ".." not in rel.parts, url
        path = (root / rel).resolve()
        assert path.is_relative_to(root), url
        assert path.is_file(), f"{url} missing from {STATIC_DIR}"
        assert path.stat().st_size > 0, url

    # No absolute or protocol-relative URLs anywhere: no CDN, fonts or analytics.
    assert re.search(r"https?://", html, re.IGNORECASE) is None
    assert re.search(r"""["'(=]\s*//""", html) is None
    for host in ("unpkg", "jsdelivr", "googleapis", "gstatic", "cdnjs"):
        assert host not in html


def test_graphiql_page_targets_endpoint() -> None:
    assert 'var endpoint = "/graphql";' in graphiql_html()
    html = graphiql_html("/api/</script>graphql")
    assert "</script>graphql" not in html
    assert '"/api/\\u003c/script\\u003egraphql"' in html
    assert graphiql_html("/x") is graphiql_html("/x")  # cached
