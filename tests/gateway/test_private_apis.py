"""The private or unstable parts of dependencies the gateway relies on: each module's assumptions hold.

Each fenced module's ``check_assumptions`` raises a named error when a dependency moved; these
tests run it against what is installed, so an upgrade fails here, loudly, before a kiosk sees it.
(diskcache's fence is tested in tests/cache/test_diskcache_private.py, with the cache's own data.)
"""

from __future__ import annotations

import pytest

from edge import uvicorn_private
from models.fleet import tuf_private


def test_uvicorn_internals_hold() -> None:
    uvicorn_private.check_assumptions()


def test_uvicorn_check_fails_loudly_when_a_hook_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(uvicorn_private.HttpToolsProtocol, "on_headers_complete")
    with pytest.raises(uvicorn_private.UvicornAssumptionError, match="assumption 2"):
        uvicorn_private.check_assumptions()


def test_tuf_repository_contract_holds() -> None:
    tuf_private.check_assumptions()


def test_tuf_check_fails_loudly_when_the_contract_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tuf_private.Repository, "__abstractmethods__", frozenset({"open", "close", "save"}))
    with pytest.raises(tuf_private.TufAssumptionError, match="assumption 1"):
        tuf_private.check_assumptions()
