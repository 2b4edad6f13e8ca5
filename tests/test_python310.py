"""The code runs on Python 3.10 (JetPack 6 ships it): a static check, and a compile under 3.10.

Why static: CI and `make test` run on 3.11, where a 3.11-only call (``asyncio.timeout``,
``tomllib``, ``except*``, ``typing.Self``) passes every test and then fails on the kiosk. vermin
reads the syntax tree for the minimum version each construct needs; the branches written for
3.11 behind a ``sys.version_info`` check carry a ``# novermin`` mark. Where a 3.10 interpreter
exists (pyenv here), every file is also byte-compiled by it, which catches 3.11-only syntax.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = ["edge", "cloud_bridge", "models", "bench", "jetson", "tests"]
PY310_CANDIDATES = [Path("/root/.pyenv/versions/3.10.13/bin/python"), Path("/usr/bin/python3.10")]


def test_vermin_finds_nothing_that_needs_more_than_python_3_10() -> None:
    vermin = shutil.which("vermin") or str(Path(sys.executable).with_name("vermin"))
    if not Path(vermin).exists():
        pytest.fail("vermin missing: it comes with the test extra (vermin==1.9.2)")
    proc = subprocess.run(
        [vermin, "--no-tips", "--violations", "--target=3.10-", "--eval-annotations",
         "--exclude-regex", r"\.venv", *SOURCES],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _python310() -> str | None:
    for candidate in PY310_CANDIDATES:
        if candidate.is_file():
            return str(candidate)
    return shutil.which("python3.10")


def test_every_file_compiles_under_python_3_10(tmp_path: Path) -> None:
    python = _python310()
    if python is None:
        pytest.skip("no Python 3.10 interpreter here: only the static check ran")
    # The byte code goes to a throwaway folder (PYTHONPYCACHEPREFIX), not into the checkout.
    proc = subprocess.run(
        [python, "-m", "compileall", "-q", "-x", r"\.venv", *SOURCES],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env={"PYTHONPYCACHEPREFIX": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_static_check_catches_a_3_11_only_call(tmp_path: Path) -> None:
    """The check above is worth something: the same call rejects code that needs 3.11."""
    sample = tmp_path / "new.py"
    sample.write_text("import asyncio\n\nasync def f():\n    async with asyncio.timeout(1):\n        pass\n")
    vermin = shutil.which("vermin") or str(Path(sys.executable).with_name("vermin"))
    proc = subprocess.run([vermin, "--no-tips", "--violations", "--target=3.10-", str(sample)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0 and "asyncio.timeout" in proc.stdout
