"""Headless Debian Chromium for the dashboard tests: install if missing, dump the DOM, screenshot."""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("chromium is not installed and cannot be installed here (needs root and apt-get)")
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    for cmd in ([apt, "update", "-qq"], [apt, "install", "-y", "-qq", "chromium"]):
        try:
            subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=900)
        except (subprocess.SubprocessError, OSError) as exc:
            pytest.skip(f"chromium could not be installed with apt-get: {exc}")
    found = shutil.which("chromium")
    if not found:
        pytest.skip("apt-get ran but no chromium binary appeared")
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
