"""What pyproject.toml declares: every imported third-party package, bounds on fenced ones, the extras table."""

from __future__ import annotations

import re
from pathlib import Path

try:
    import tomllib  # novermin (3.11 branch; tomli below)
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from models.extras import DISTRIBUTIONS, EXTRA_MODULES

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()


def _by_name(requirements: list[str]) -> dict[str, str]:
    return {_name(r): r for r in requirements}


def test_fenced_dependencies_have_upper_bounds_and_httpcore_is_declared() -> None:
    deps = _by_name(PROJECT["dependencies"])
    for name in ("diskcache", "uvicorn", "tuf", "httpcore", "securesystemslib"):
        assert name in deps, f"{name} is imported but not declared"
        assert "<" in deps[name], f"{name} needs an upper bound: {deps[name]}"


def test_every_extra_in_the_cli_table_is_declared() -> None:
    """``models.extras`` tells users which extra to install: it must name extras that exist."""
    extras = PROJECT["optional-dependencies"]
    for extra, modules in EXTRA_MODULES.items():
        declared = {_name(r) for r in extras[extra]}
        for module in modules:
            assert DISTRIBUTIONS.get(module, module).lower() in declared, (extra, module)
