"""A new user's ``pip install edgecloud`` (no extras): every command's ``--help`` and first step.

The package is installed with pip, exactly as a user would, into a virtual environment of its
own under ``build/`` (not this test run's environment, which has every extra). Creating it takes
minutes, so it is kept and reused while ``pyproject.toml`` is unchanged (its hash names the
folder); the project itself is reinstalled on every run (``--no-deps``), so the code under test
is always the working tree's. A command that needs an extra must end in one line naming it,
never a traceback.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"

# Creating the environment downloads or unpacks every dependency: minutes on a loaded machine,
# once per pyproject.toml; later runs only reinstall the project (about 20 s).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def _pip(python: Path, *args: str) -> None:
    run = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
                         capture_output=True, text=True, timeout=900)
    if run.returncode != 0:
        pytest.fail(f"pip install {' '.join(args)} failed:\n{run.stderr[-3000:]}")


@pytest.fixture(scope="module")
def bare_venv() -> Path:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:12]
    venv = BUILD / f"bare-venv-{digest}"
    python = venv / "bin" / "python"
    ready = venv / ".installed"
    if not ready.exists():
        shutil.rmtree(venv, ignore_errors=True)
        for old in BUILD.glob("bare-venv-*"):  # an older pyproject's environment
            shutil.rmtree(old, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        _pip(python, str(ROOT))  # the user's command: the package and its declared dependencies
        ready.touch()
    _pip(python, "--no-deps", "--force-reinstall", str(ROOT))  # this working tree's code
    return venv


def _run(venv: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EDGECLOUD_", "PYTHON"))}
    env["HOME"] = str(tmp_path)
    return subprocess.run([str(venv / "bin" / "edgecloud"), *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)


HELP = [
    [], ["serve"], ["route"], ["sla", "report"], ["report"], ["cache"], ["diagnose", "cloud"],
    ["models"], ["models", "train-intent"], ["models", "eval-intent"], ["models", "recut-intent"],
    ["models", "status"],
    ["models", "update"], ["fleet"], ["fleet", "init"], ["bench"], ["bench", "kiosk"], ["bench", "scale"],
]


def test_the_bare_install_has_no_extras(bare_venv: Path) -> None:
    probe = "import importlib.util as u; print([m for m in ('sklearn', 'matplotlib', 'openai') if u.find_spec(m)])"
    out = subprocess.run([str(bare_venv / "bin" / "python"), "-c", probe], capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("command", HELP, ids=lambda c: " ".join(c) or "edgecloud")
def test_help(bare_venv: Path, tmp_path: Path, command: list[str]) -> None:
    run = _run(bare_venv, tmp_path, *command, "--help")
    assert run.returncode == 0, run.stderr
    assert "usage: edgecloud" in run.stdout


def test_first_steps_of_the_commands_without_extras(bare_venv: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    steps = {
        ("serve", "--print-config", "--data-dir", str(data)): 0,
        ("route", "Where is the restroom?", "--json"): 0,
        ("sla", "report", "--data-dir", str(data)): 0,
        ("report", "--data-dir", str(data)): 0,
        ("models", "status", "--data-dir", str(data)): 0,
        ("fleet", "init", "--workspace", str(tmp_path / "fleet")): 0,
        # No gateway, no provider: a clear error, not a traceback.
        ("cache", "--url", "http://127.0.0.1:9", "--token", "t", "stats"): None,
        ("diagnose", "cloud", "--samples", "1"): None,
    }
    for args, want in steps.items():
        run = _run(bare_venv, tmp_path, *args)
        assert "Traceback" not in run.stderr, (args, run.stderr)
        if want is not None:
            assert run.returncode == want, (args, run.stderr)
        else:
            assert run.returncode != 0 and run.stderr.strip(), args
    assert "within 1% of the exact value" in _run(bare_venv, tmp_path, "sla", "report", "--data-dir", str(data)).stdout


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (("models", "train-intent", "--data", "x.jsonl", "--out", "out"), "train"),
        (("models", "recut-intent", "--model", "m", "--out", "out", "--data", "x.jsonl", "--threshold-data",
          "y.jsonl", "--add-threshold-data", "z.jsonl"), "train"),
        (("bench", "kiosk", "--quick"), "bench"),
        (("bench", "scale", "--quick"), "bench"),
    ],
    ids=["train", "recut", "bench-kiosk", "bench-scale"],
)
def test_a_missing_extra_is_one_line_naming_it(bare_venv: Path, tmp_path: Path, args: tuple[str, ...],
                                               extra: str) -> None:
    run = _run(bare_venv, tmp_path, *args)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'edgecloud[{extra}]'" in lines[0], run.stderr
    assert not (tmp_path / "out").exists()  # checked before any work


def test_semantic_without_its_extra_warns_in_one_line(bare_venv: Path, tmp_path: Path) -> None:
    config = tmp_path / "semantic.toml"
    config.write_text(f'[server]\ndata_dir = "{tmp_path / "d"}"\n[cache]\nsemantic = true\n', encoding="utf-8")
    run = _run(bare_venv, tmp_path, "serve", "--config", str(config), "--print-config")
    assert run.returncode == 0 and "Traceback" not in run.stderr
    warning = [line for line in run.stderr.splitlines() if "'semantic' extra" in line]
    assert len(warning) == 1 and "pip install 'edgecloud[semantic]'" in warning[0]
