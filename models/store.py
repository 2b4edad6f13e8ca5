"""The device's model store: A/B-style versions, an atomic ``current`` pointer and a crash-safe journal.

Layout under ``<data_dir>/models/``::

    versions/<N>/bundle.json        what version N is (label, artifacts, hashes)
    versions/<N>/<kind>/<file>      the verified artifacts
    staging/<N>/...                 downloads in progress (resumable ``.part`` files)
    current -> versions/<N>         symlink, replaced with one rename (atomic on POSIX)
    previous -> versions/<M>        the version kept for rollback
    journal                         JSON lines, fsync'ed: the update state machine's history

A power cut can stop the agent between any two steps; every step is either a rename or an append
to the journal, so :meth:`ModelStore.recover` can always tell what happened and restore a version
that passed its health check. Only ``current`` and ``previous`` are kept; older ones are pruned.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.fleet.bundle import KINDS

BUNDLE_FILE = "bundle.json"
JOURNAL_MAX_LINES = 500


class StoreError(RuntimeError):
    """The store cannot do what was asked (missing version, inconsistent pointer)."""


@dataclass(frozen=True)
class InstalledVersion:
    """A complete, verified version on disk. Every artifact is a file path; for ``intent`` it is the
    ``.onnx`` file, and its folder also holds the other files of that kind (``card.json``), so
    ``IntentClassifier.load(artifacts["intent"].parent)`` loads it."""

    version: int
    label: str
    path: Path
    artifacts: dict[str, Path]
    bundle: str = ""
    hardware: str = "any"

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "label": self.label,
            "bundle": self.bundle,
            "hardware": self.hardware,
            "path": str(self.path),
            "artifacts": {k: str(v) for k, v in self.artifacts.items()},
        }


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bundle_file(directory: Path, description: dict[str, Any]) -> None:
    """Write ``bundle.json`` durably (temp file, fsync, rename) so a version dir is all-or-nothing."""
    tmp = directory / (BUNDLE_FILE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(description, fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, directory / BUNDLE_FILE)
    _fsync_dir(directory)


def read_version_dir(directory: Path) -> InstalledVersion:
    """Describe a version directory from its ``bundle.json`` (raises StoreError when incomplete)."""
    try:
        desc = json.loads((directory / BUNDLE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StoreError(f"{directory} has no readable {BUNDLE_FILE}") from exc
    artifacts: dict[str, Path] = {}
    for item in desc.get("artifacts", []):
        kind = item["kind"]
        if kind not in KINDS:
            raise StoreError(f"unknown artifact kind {kind!r} in {directory}")
        file_path = directory / kind / item["file_name"]
        if not file_path.is_file():
            raise StoreError(f"{file_path} is missing")
        if kind != "intent" or file_path.suffix == ".onnx" or kind not in artifacts:
            artifacts[kind] = file_path
    return InstalledVersion(
        version=int(desc["version"]),
        label=str(desc.get("label", "")),
        path=directory,
        artifacts=artifacts,
        bundle=str(desc.get("bundle", "")),
        hardware=str(desc.get("hardware", "any")),
    )


class ModelStore:
    """All state of installed model versions; the only code that moves pointers or version dirs."""

    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / "models"
        self.versions_dir = self.root / "versions"
        self.staging_dir = self.root / "staging"
        self.journal_path = self.root / "journal"
        self.versions_dir.mkdir(parents=True, exist_ok=True)
        self.staging_dir.mkdir(parents=True, exist_ok=True)

    # -- pointers ---------------------------------------------------------------------------------
    def _pointer(self, name: str) -> int | None:
        link = self.root / name
        try:
            target = os.readlink(link)
        except OSError:
            return None
        try:
            return int(Path(target).name)
        except ValueError:
            return None

    def _set_pointer(self, name: str, version: int | None) -> None:
        """Replace a symlink in one rename: readers see the old or the new target, never neither."""
        link = self.root / name
        if version is None:
            with contextlib.suppress(FileNotFoundError):
                link.unlink()
        else:
            tmp = self.root / f".{name}.tmp"
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            os.symlink(f"versions/{version}", tmp)
            os.replace(tmp, link)
        _fsync_dir(self.root)

    def current_version(self) -> int | None:
        return self._pointer("current")

    def previous_version(self) -> int | None:
        return self._pointer("previous")

    def _describe(self, version: int | None) -> InstalledVersion | None:
        if version is None:
            return None
        try:
            return read_version_dir(self.versions_dir / str(version))
        except StoreError:
            return None

    def current(self) -> InstalledVersion | None:
        return self._describe(self.current_version())

    def previous(self) -> InstalledVersion | None:
        return self._describe(self.previous_version())

    def installed_versions(self) -> list[int]:
        return sorted(int(p.name) for p in self.versions_dir.iterdir() if p.name.isdigit())

    # -- journal ----------------------------------------------------------------------------------
    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one event and fsync it: after a crash the journal says how far we got."""
        entry = {"ts": time.time(), "event": event, **fields}
        line = json.dumps(entry, sort_keys=True) + "\n"
        if self._torn_tail():
            line = "\n" + line  # close a line torn by a power cut so this entry stays readable
        with open(self.journal_path, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self._maybe_compact()
        return entry

    def _torn_tail(self) -> bool:
        try:
            with open(self.journal_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                if fh.tell() == 0:
                    return False
                fh.seek(-1, os.SEEK_END)
                return fh.read(1) != b"\n"
        except FileNotFoundError:
            return False

    def _maybe_compact(self) -> None:
        entries = self.journal()
        if len(entries) <= JOURNAL_MAX_LINES:
            return
        keep = entries[-JOURNAL_MAX_LINES // 2 :]
        tmp = self.journal_path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(e, sort_keys=True) + "\n" for e in keep)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.journal_path)

    def journal(self) -> list[dict[str, Any]]:
        """All readable entries; a line torn by a power cut is skipped, not fatal."""
        try:
            lines = self.journal_path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        entries = []
        for line in lines:
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
        return entries

    def failed_versions(self) -> set[int]:
        """Versions that failed a smoke test or health check here: never retried automatically."""
        return {int(e["version"]) for e in self.journal() if e.get("event") == "rejected" and "version" in e}

    # -- staging and installing -------------------------------------------------------------------
    def staging_path(self, version: int) -> Path:
        path = self.staging_dir / str(version)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def install(self, version: int) -> InstalledVersion:
        """Move a complete staging dir into ``versions/`` with one rename (same file system)."""
        src = self.staging_dir / str(version)
        read_version_dir(src)  # refuses an incomplete staging dir
        dest = self.versions_dir / str(version)
        if dest.exists():
            if version in (self.current_version(), self.previous_version()):
                raise StoreError(f"version {version} is in use")
            shutil.rmtree(dest)
        os.replace(src, dest)
        _fsync_dir(self.versions_dir)
        self.record("installed", version=version)
        return read_version_dir(dest)

    def begin_activation(self, version: int) -> None:
        """Journal first, then pointers: recovery knows an activation was under way."""
        self.record(
            "activating",
            version=version,
            from_version=self.current_version(),
            old_previous=self.previous_version(),
        )

    def switch_to(self, version: int) -> None:
        """``previous`` <- old current, then ``current`` <- version."""
        if not (self.versions_dir / str(version)).is_dir():
            raise StoreError(f"version {version} is not installed")
        old = self.current_version()
        if old is not None and old != version:
            self._set_pointer("previous", old)
        self._set_pointer("current", version)

    def commit_activation(self, version: int) -> None:
        self.record("active", version=version)
        self.prune()

    def roll_back(self, failed: int, reason: str) -> int | None:
        """Restore the pointers recorded when ``failed`` began activating; drop the failed version."""
        start = self._last_activation(failed)
        restore = start.get("from_version") if start else self.previous_version()
        old_previous = start.get("old_previous") if start else None
        if restore is not None and (self.versions_dir / str(restore)).is_dir():
            self._set_pointer("current", int(restore))
        else:
            self._set_pointer("current", None)
            restore = None
        prev_ok = old_previous is not None and (self.versions_dir / str(old_previous)).is_dir()
        self._set_pointer("previous", int(old_previous) if prev_ok else None)
        self.record("rejected", version=failed, restored=restore, reason=reason)
        self._remove_version(failed)
        return restore

    def _last_activation(self, version: int) -> dict[str, Any] | None:
        for entry in reversed(self.journal()):
            if entry.get("event") == "activating" and entry.get("version") == version:
                return entry
        return None

    def _remove_version(self, version: int) -> None:
        if version in (self.current_version(), self.previous_version()):
            return
        shutil.rmtree(self.versions_dir / str(version), ignore_errors=True)

    def discard_staging(self, version: int) -> None:
        shutil.rmtree(self.staging_dir / str(version), ignore_errors=True)

    def prune(self) -> None:
        """Keep only ``current`` and ``previous`` (and staging newer than current, for resume)."""
        keep = {self.current_version(), self.previous_version()}
        for version in self.installed_versions():
            if version not in keep:
                shutil.rmtree(self.versions_dir / str(version), ignore_errors=True)
        current = self.current_version() or 0
        for path in self.staging_dir.iterdir():
            if not path.name.isdigit() or int(path.name) <= current:
                shutil.rmtree(path, ignore_errors=True)

    # -- crash recovery ---------------------------------------------------------------------------
    def recover(self) -> None:
        """Run at start-up: finish or undo whatever a crash interrupted.

        Rule: after recovery ``current`` is a version that passed its post-activation health check
        (journal event ``active``). An activation cut short is undone; its files go back to staging
        so the next update finishes it without downloading again.
        """
        for name in (".current.tmp", ".previous.tmp"):
            with contextlib.suppress(FileNotFoundError):
                (self.root / name).unlink()
        entries = self.journal()
        last_activating = next((e for e in reversed(entries) if e.get("event") == "activating"), None)
        if last_activating is not None:
            later = entries[entries.index(last_activating) + 1 :]
            done = any(
                e.get("event") in ("active", "rejected") and e.get("version") == last_activating["version"]
                for e in later
            )
            if not done:
                version = int(last_activating["version"])
                restore = last_activating.get("from_version")
                old_previous = last_activating.get("old_previous")
                restore_ok = restore is not None and (self.versions_dir / str(restore)).is_dir()
                self._set_pointer("current", int(restore) if restore_ok else None)
                prev_ok = old_previous is not None and (self.versions_dir / str(old_previous)).is_dir()
                self._set_pointer("previous", int(old_previous) if prev_ok else None)
                self.record(
                    "recovered",
                    version=version,
                    restored=restore if restore_ok else None,
                    reason="activation interrupted; restored the last healthy version",
                )
        if self.current_version() is not None and self.current() is None:
            # The pointer names a version whose files are gone: fall back to previous, else nothing.
            prev = self.previous()
            self._set_pointer("current", prev.version if prev else None)
            self._set_pointer("previous", None)
            self.record("recovered", reason="current pointed at a missing version")
        keep = {self.current_version(), self.previous_version()}
        for version in self.installed_versions():
            if version in keep:
                continue
            src = self.versions_dir / str(version)
            dest = self.staging_dir / str(version)
            if not dest.exists() and version > (self.current_version() or 0):
                os.replace(src, dest)  # complete files: the next update re-verifies and installs them
            else:
                shutil.rmtree(src, ignore_errors=True)
        current = self.current_version() or 0
        for path in self.staging_dir.iterdir():
            if not path.name.isdigit() or int(path.name) <= current:
                shutil.rmtree(path, ignore_errors=True)

    def status(self) -> dict[str, Any]:
        cur, prev = self.current(), self.previous()
        journal = self.journal()
        return {
            "current": cur.to_dict() if cur else None,
            "previous": prev.to_dict() if prev else None,
            "staging": sorted(p.name for p in self.staging_dir.iterdir()),
            "history": journal[-10:],
        }
