"""The curl examples of the README and docs send what the server accepts: a body sent with
`-d` says it is JSON (without the header curl sends `application/x-www-form-urlencoded`, and
JSON routes answer 415)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench/README.md"]


def curl_commands(text: str) -> list[str]:
    """Each curl command, its continuation lines (ending in a backslash) joined."""
    commands = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        if re.search(r"\bcurl\b", lines[index]):
            command = lines[index]
            while command.rstrip().endswith("\\") and index + 1 < len(lines):
                index += 1
                command += "\n" + lines[index]
            commands.append(command)
        index += 1
    return commands


def test_every_curl_body_is_sent_as_json() -> None:
    with_body = [
        f"{path.name}: {command}"
        for path in DOCUMENTS
        for command in curl_commands(path.read_text())
        if re.search(r"\s(-d|--data(-raw|-binary)?)\s", command)
    ]
    assert len(with_body) >= 10
    missing = [
        command for command in with_body if "content-type: application/json" not in command.lower()
    ]
    assert missing == []
