"""The fleet's one use of python-tuf's not-yet-stable ``tuf.repository`` module, and what it assumes.

python-tuf marks ``tuf.repository.Repository`` as "not yet considered stable API"; it saves the
operator workspace from re-implementing version bumps, expiry and snapshot/timestamp book-keeping,
so ``models.fleet.repo.FleetRepository`` builds on it, importing it from here only. The
assumptions, each checked by ``check_assumptions`` (run by ``tests/fleet/test_fleet_units.py``):

1. ``Repository`` is an abstract class whose abstract methods are exactly ``open(role) ->
   Metadata`` and ``close(role, md)``; ``targets_infos`` and ``snapshot_info`` are properties the
   subclass overrides to describe the workspace's roles.
2. ``edit(role)``, ``edit_root()``, ``edit_targets(rolename="targets")`` are context managers
   that ``open`` the role, yield its ``signed`` part for changes and ``close`` it (which bumps the
   version, sets the expiry and signs).
3. ``do_snapshot(force=False)`` and ``do_timestamp(force=False)`` rebuild snapshot and timestamp
   from ``targets_infos`` / ``snapshot_info`` and return ``(changed, ...)`` tuples.

The device side (``tuf.ngclient``, ``tuf.api.metadata``) is python-tuf's stable API and is not
fenced here. ``pyproject.toml`` bounds tuf below the next major release.
"""

from __future__ import annotations

import inspect

import tuf
from tuf.repository import Repository

EDIT_METHODS = {"edit": ["role"], "edit_root": [], "edit_targets": ["rolename"]}
REBUILD_METHODS = {"do_snapshot": ["force"], "do_timestamp": ["force"]}


class TufAssumptionError(RuntimeError):
    """python-tuf no longer behaves as ``models.fleet.tuf_private`` assumes."""


def check_assumptions() -> None:
    """Raise ``TufAssumptionError`` unless every assumption in this module's docstring holds."""

    def fail(number: int, detail: str) -> TufAssumptionError:
        return TufAssumptionError(
            f"python-tuf {getattr(tuf, '__version__', '?')} breaks assumption {number} of "
            f"models.fleet.tuf_private: {detail}"
        )

    abstract = set(getattr(Repository, "__abstractmethods__", ()))
    if abstract != {"open", "close"}:
        raise fail(1, f"Repository's abstract methods are {sorted(abstract)}")
    for name in ("targets_infos", "snapshot_info"):
        if not isinstance(inspect.getattr_static(Repository, name, None), property):
            raise fail(1, f"Repository.{name} is not a property")
    for number, methods in ((2, EDIT_METHODS), (3, REBUILD_METHODS)):
        for name, params in methods.items():
            method = getattr(Repository, name, None)
            if method is None:
                raise fail(number, f"Repository.{name} is gone")
            got = list(inspect.signature(method).parameters)[1:]
            if got != params:
                raise fail(number, f"Repository.{name} takes {got}, not {params}")


__all__ = ["Repository", "TufAssumptionError", "check_assumptions"]
