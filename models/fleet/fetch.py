"""The blocking half of an update cycle: TUF refresh, bundle choice, space check, verified download.

``BundleFetcher.fetch_and_stage`` runs in a worker thread (python-tuf's ngclient is synchronous).
It returns a ``Staged`` bundle, or an ``UpdateResult`` when there is nothing to install; a problem
the status API should show raises ``UpdateFailed``. The rest of the cycle (smoke test, A/B switch,
activation, rollback) is ``models.fleet.agent.UpdateAgent``'s.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from tuf.api import exceptions as tuf_exc
from tuf.api.metadata import Metadata, TargetFile, Targets
from tuf.ngclient import Updater, UpdaterConfig

from models.fleet import faults
from models.fleet.bundle import (
    ANY_HARDWARE,
    ArtifactInfo,
    BundleError,
    ChannelManifest,
    ManifestEntry,
    manifest_path,
    parse_agent_version,
)
from models.fleet.transport import (
    DownloadLimits,
    RepoFetcher,
    download_resumable,
    join,
    local_dir,
    target_url,
)
from models.store import ModelStore, write_bundle_file

DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


class UpdateFailed(RuntimeError):
    """One update cycle failed for a reason the status API should show."""

    def __init__(self, reason: str, kind: str = "failed") -> None:
        super().__init__(reason)
        self.kind = kind


@dataclass
class UpdateResult:
    """Outcome of one cycle. ``status``: updated | up_to_date | skipped | failed | rolled_back."""

    status: str
    version: int | None = None
    installed: int | None = None
    reason: str = ""
    error_type: str = ""
    smoke: dict[str, str] = field(default_factory=dict)
    finished_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Staged:
    """A bundle downloaded and verified into its staging folder, ready for the smoke test."""

    entry: ManifestEntry
    directory: Path


class BundleFetcher:
    """One device's view of the repository: its channel, hardware, agent version and download limits."""

    def __init__(
        self,
        *,
        store: ModelStore,
        repository_url: str,
        trusted_root: Path,
        tuf_dir: Path,
        hardware: str,
        channel: str,
        agent_version: str,
        reserve_bytes: int,
        download_limits: DownloadLimits,
        on_progress: Callable[[int, int, str | None], None],
        on_state: Callable[[str], None],
    ) -> None:
        self.store = store
        self.repository_url = repository_url
        self.trusted_root = trusted_root
        self.tuf_dir = tuf_dir
        self.hardware = hardware
        self.channel = channel
        self.agent_version = agent_version
        self.reserve_bytes = reserve_bytes
        self.download_limits = download_limits
        self._progress = on_progress
        self._on_state = on_state

    def _client(self) -> httpx.Client | None:
        if local_dir(self.repository_url) is not None:
            return None
        return httpx.Client(
            timeout=httpx.Timeout(self.download_limits.read_timeout_s, connect=10.0),
            # Nothing is decompressed (transport.refuse_encoded): the signed bytes, as published.
            headers={"User-Agent": f"edgecloud-agent/{self.agent_version}", "Accept-Encoding": "identity"},
            follow_redirects=True,
        )

    def _updater(self, client: httpx.Client | None) -> Updater:
        metadata_dir = self.tuf_dir / "metadata"
        metadata_dir.mkdir(parents=True, exist_ok=True)
        (self.tuf_dir / "targets").mkdir(parents=True, exist_ok=True)
        return Updater(
            metadata_dir=str(metadata_dir),
            metadata_base_url=join(self.repository_url, "metadata"),
            target_dir=str(self.tuf_dir / "targets"),
            target_base_url=join(self.repository_url, "targets"),
            fetcher=RepoFetcher(client, self.download_limits.read_timeout_s, self.download_limits),
            config=UpdaterConfig(app_user_agent=f"edgecloud-agent/{self.agent_version}"),
            bootstrap=self.trusted_root.read_bytes(),  # the root pinned at install time
        )

    def fetch_and_stage(self) -> UpdateResult | Staged:
        client = self._client()
        try:
            updater = self._updater(client)
            updater.refresh()
            entry = self._choose(updater)
            if isinstance(entry, UpdateResult):
                return entry
            targets = self._targets_for(updater, entry)
            self._check_space(entry, targets)
            directory = self._download(client, updater, entry, targets)
            return Staged(entry, directory)
        finally:
            if client is not None:
                client.close()

    def _choose(self, updater: Updater) -> ManifestEntry | UpdateResult:
        info = updater.get_targetinfo(manifest_path(self.channel))
        if info is None:
            if self._channel_exists():
                return UpdateResult("up_to_date", reason=f"channel {self.channel!r} offers no bundle yet")
            raise UpdateFailed(f"the repository has no channel {self.channel!r}")
        path = updater.find_cached_target(info) or updater.download_target(info)
        manifest = ChannelManifest.from_bytes(Path(path).read_bytes())
        if manifest.channel != self.channel:
            raise UpdateFailed(f"manifest is for channel {manifest.channel!r}, not {self.channel!r}")
        entries = manifest.for_hardware(self.hardware)
        if not entries:
            return UpdateResult("up_to_date", reason=f"channel offers nothing for hardware {self.hardware}")
        entry = max(entries, key=lambda e: (e.version, e.hardware != ANY_HARDWARE))
        installed = self.store.current_version() or 0
        if entry.version <= installed:
            return UpdateResult("up_to_date", version=entry.version,
                                reason=f"offered version {entry.version}, installed {installed}")
        if entry.version in self.store.failed_versions():
            return UpdateResult("skipped", version=entry.version,
                                reason=f"version {entry.version} failed on this device before")
        return entry

    def _channel_exists(self) -> bool:
        """Is ``channel-<name>`` delegated? Reads the top-level targets ngclient just verified and cached,
        so a mistyped ``--channel`` is an error instead of a device that silently never updates."""
        try:
            cached = Metadata[Targets].from_bytes((self.tuf_dir / "metadata" / "targets.json").read_bytes())
        except (OSError, ValueError):
            return False
        roles = cached.signed.delegations.roles if cached.signed.delegations else None
        return bool(roles) and f"channel-{self.channel}" in roles

    def _targets_for(self, updater: Updater, entry: ManifestEntry) -> list[tuple[ArtifactInfo, TargetFile]]:
        mine = parse_agent_version(self.agent_version)
        out: list[tuple[ArtifactInfo, TargetFile]] = []
        for path in entry.targets:
            target = updater.get_targetinfo(path)
            if target is None:
                raise UpdateFailed(f"manifest names {path}, which no trusted role signs")
            try:
                info = ArtifactInfo.from_custom(target.custom)
            except BundleError as exc:
                raise UpdateFailed(f"{path}: {exc}") from exc
            if (info.bundle, info.version) != (entry.bundle, entry.version):
                raise UpdateFailed(f"{path} belongs to {info.bundle} v{info.version}, not v{entry.version}")
            if info.hardware not in (self.hardware, ANY_HARDWARE):
                raise UpdateFailed(f"{path} is for hardware {info.hardware}, this device is {self.hardware}")
            if parse_agent_version(info.min_agent_version) > mine:
                raise UpdateFailed(
                    f"bundle {entry.version} needs agent {info.min_agent_version}, "
                    f"this is {self.agent_version}"
                )
            out.append((info, target))
        if not out:
            raise UpdateFailed(f"bundle version {entry.version} has no artifacts")
        return out

    def _check_space(self, entry: ManifestEntry, targets: list[tuple[ArtifactInfo, TargetFile]]) -> None:
        staging = self.store.staging_dir / str(entry.version)
        needed = 0
        for info, target in targets:
            final = staging / info.kind / info.file_name
            part = final.with_name(final.name + ".part")
            have = final.stat().st_size if final.exists() else part.stat().st_size if part.exists() else 0
            needed += max(0, target.length - have)
        free = shutil.disk_usage(self.store.root).free
        if free - needed < self.reserve_bytes:
            raise UpdateFailed(
                f"not enough disk space: need {needed} bytes plus a {self.reserve_bytes}-byte reserve, "
                f"{free} free", kind="failed",
            )

    def _download(
        self,
        client: httpx.Client | None,
        updater: Updater,
        entry: ManifestEntry,
        targets: list[tuple[ArtifactInfo, TargetFile]],
    ) -> Path:
        self._on_state("downloading")
        staging = self.store.staging_path(entry.version)
        total = sum(t.length for _, t in targets)
        base_done = 0
        target_base = join(self.repository_url, "targets")
        for info, target in targets:
            final = staging / info.kind / info.file_name
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.exists() and _verifies(target, final):
                base_done += target.length
                continue
            final.unlink(missing_ok=True)
            part = final.with_name(final.name + ".part")
            start = base_done

            def progress(done: int, _start: int = start, _path: str = target.path) -> None:
                self._progress(_start + done, total, _path)

            try:
                download_resumable(client, target_url(target_base, target), part, target, progress,
                                   limits=self.download_limits)
            except OSError as exc:
                if exc.errno in DISK_FULL:  # free what we took: the gateway needs the space more
                    self.store.discard_staging(entry.version)
                    raise UpdateFailed(f"disk full while downloading {target.path}; staging discarded") from exc
                raise
            except Exception as exc:
                if "more than" in str(exc):
                    part.unlink(missing_ok=True)
                raise UpdateFailed(f"{target.path}: {exc}") from exc
            if not _verifies(target, part):
                part.unlink(missing_ok=True)
                raise UpdateFailed(f"{target.path}: length or hash does not match the signed metadata "
                                   "(tampered or corrupted); discarded")
            os.replace(part, final)
            base_done += target.length
        self._progress(total, total, None)
        write_bundle_file(staging, {
            "bundle": entry.bundle,
            "version": entry.version,
            "label": entry.label,
            "hardware": entry.hardware,
            "artifacts": [
                {"kind": i.kind, "file_name": i.file_name, "target": t.path, "length": t.length,
                 "hashes": dict(t.hashes)}
                for i, t in targets
            ],
        })
        self.store.record("staged", version=entry.version)
        faults.maybe_kill("staged")
        return staging


def _verifies(target: TargetFile, path: Path) -> bool:
    """TUF's own check (length and every listed hash) on a file on disk."""
    try:
        with open(path, "rb") as fh:
            target.verify_length_and_hashes(fh)
        return True
    except (OSError, tuf_exc.LengthOrHashMismatchError):
        return False
