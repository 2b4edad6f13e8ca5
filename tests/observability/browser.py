"""Headless Debian Chromium for the dashboard tests: find it (``make test`` installs it), dump the DOM, screenshot."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

INSTALL_HINT = "chromium is not installed: `make test` installs it (Debian's package, needs root and apt-get)"


def find_chromium() -> str | None:
    """The headless browser, or None. Installing it is ``make test``'s set-up, never a test's."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def chromium() -> str:
    """The browser's path, or a skip that says how to get it."""
    found = find_chromium()
    if found is None:
        pytest.skip(INSTALL_HINT)
    return found


class Elements(HTMLParser):
    """Collects every element's attributes and its direct text, by id and by class."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, dict[str, str]] = {}
        self.points: list[dict[str, str]] = []
        self._open: list[dict[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        a["_text"] = ""
        if "id" in a:
            self.by_id[a["id"]] = a
        if tag == "circle" and "pt" in a.get("class", "").split():
            self.points.append(a)
        self._open.append(a)

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1]["_text"] += data


def browser(chromium: str, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    flags = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--virtual-time-budget=5000", *extra,
    ]
    return subprocess.run(flags, capture_output=True, text=True, timeout=180)
