"""Every src/href of an HTML page, for the self-hosted GraphiQL checks."""

from __future__ import annotations

from html.parser import HTMLParser


class _UrlCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in {"src", "href"}:
                self.urls.append(value or "")

    handle_startendtag = handle_starttag


def asset_urls(html: str) -> list[str]:
    """src/href values in document order; an empty attribute appears as ''."""
    parser = _UrlCollector()
    parser.feed(html)
    parser.close()
    return parser.urls
