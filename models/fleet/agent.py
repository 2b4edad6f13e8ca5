"""The device-side update agent: TUF refresh, resumable download, smoke test, A/B switch, rollback.

python-tuf (``tuf.ngclient``) does the metadata security: signatures and thresholds, expiry (freeze
attacks), version rollback of metadata, mix-and-match, length limits. This agent adds what TUF leaves
to the application: the bundle version must be strictly higher than the installed one (and not one
that already failed here), the hardware and agent version must match, big files resume with HTTP
Range into a staging folder and are verified with ``TargetFile.verify_length_and_hashes`` before
use, disk space is checked first, and activation is smoke-tested, health-checked and rolled back.

It runs inside the gateway process (so the gateway can hot-swap without a restart) or one-shot from
the device CLI. Network and disk work runs in a worker thread: ngclient is synchronous.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse, urlunparse

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge
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
from models.fleet.smoke import SmokeResult, run_smoke_test
from models.fleet.transport import (
    DownloadLimits,
    RepoFetcher,
    download_resumable,
    join,
    local_dir,
    target_url,
)
from models.store import InstalledVersion, ModelStore, write_bundle_file

AGENT_VERSION = "0.1.0"
_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
log = logging.getLogger(__name__)


class Activator(Protocol):
    """Implemented by the gateway: load a new version while the old one keeps serving."""

    async def activate(self, version: InstalledVersion) -> None:
        """Hot-swap to ``version`` (raise on failure; the agent then rolls back)."""

    async def health_check(self) -> bool:
        """After activation: is the gateway answering with the new version?"""

    # Optional: ``async def deactivate(self) -> None`` -- called when a first install (no previous
    # version) fails after activation, to return to the model built into the gateway.


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
class _Staged:
    entry: ManifestEntry
    directory: Path


def redact_url(url: str) -> str:
    """Never show credentials embedded in a repository URL (status, logs, errors)."""
    parsed = urlparse(url)
    if parsed.username or parsed.password:
        host = parsed.hostname or ""
        if parsed.port:
            host += f":{parsed.port}"
        return urlunparse(parsed._replace(netloc=f"***@{host}"))
    return url


class UpdateMetrics:
    """Prometheus series for fleet monitoring; registered on the registry the gateway exposes."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.bundle_version = Gauge(
            "edgecloud_model_bundle_version", "Installed (current) model bundle version", registry=registry
        )
        self.updates = Counter(
            "edgecloud_model_updates", "Update cycles by result", ["result"], registry=registry
        )
        self.last_check = Gauge(
            "edgecloud_model_update_last_check_timestamp_seconds", "When the last update check ended",
            registry=registry,
        )
        self.last_success = Gauge(
            "edgecloud_model_update_last_success_timestamp_seconds",
            "When the last update check succeeded (updated or up to date)", registry=registry,
        )
        self.bytes_done = Gauge(
            "edgecloud_model_update_download_bytes", "Bytes of the current download on disk",
            registry=registry,
        )
        self.bytes_total = Gauge(
            "edgecloud_model_update_download_total_bytes", "Size of the current download", registry=registry
        )
        self.in_progress = Gauge(
            "edgecloud_model_update_in_progress", "1 while an update cycle runs", registry=registry
        )


class UpdateAgent:
    """One device's updater. ``check_and_apply`` runs one cycle; ``run_forever`` schedules them."""

    def __init__(
        self,
        *,
        data_dir: Path,
        repository_url: str,
        trusted_root: Path,
        hardware: str = ANY_HARDWARE,
        channel: str = "stable",
        activator: Activator | None = None,
        agent_version: str = AGENT_VERSION,
        check_interval_s: float = 3600,
        check_jitter_s: float = 600,
        reserve_bytes: int = 512 * 1024 * 1024,
        smoke_timeout_s: float = 180.0,
        metrics_registry: CollectorRegistry | None = None,
        progress_callback: Callable[[dict[str, Any]], None] | None = None,
        download_limits: DownloadLimits | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.download_limits = download_limits or DownloadLimits()
        self.repository_url = repository_url
        self.trusted_root = Path(trusted_root)
        self.hardware = hardware
        self.channel = channel
        self.activator = activator
        self.agent_version = agent_version
        self.check_interval_s = check_interval_s
        self.check_jitter_s = check_jitter_s
        self.reserve_bytes = reserve_bytes
        self.smoke_timeout_s = smoke_timeout_s
        self.metrics_registry = metrics_registry or CollectorRegistry()
        self.metrics = UpdateMetrics(self.metrics_registry)
        self.progress_callback = progress_callback
        self.store = ModelStore(self.data_dir)
        self._tuf_dir = self.data_dir / "tuf"
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[UpdateResult] | None = None
        self._recovered = False
        self.state = "idle"
        self.last_check: float | None = None
        self.last_error: str | None = None
        self.last_result: UpdateResult | None = None
        self.progress: dict[str, Any] = {"bytes_done": 0, "bytes_total": 0, "target": None}
        current = self.store.current_version()
        self.metrics.bundle_version.set(current or 0)

    # -- public API -------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._lock.locked() or (self._task is not None and not self._task.done())

    def trigger(self) -> bool:
        """Start a cycle in the background (admin API). False when one is already running."""
        if self.busy:
            return False
        self._task = asyncio.get_running_loop().create_task(self.check_and_apply())
        return True

    async def wait(self) -> UpdateResult | None:
        """Wait for a cycle started with :meth:`trigger` (tests, shutdown)."""
        if self._task is None:
            return None
        return await self._task

    async def run_forever(self) -> None:
        """Check at ``interval + random jitter`` so a fleet booted together does not stampede the CDN."""
        while True:
            await asyncio.sleep(random.uniform(0, self.check_jitter_s) + (self.check_interval_s
                                if self.last_check is not None else 0))
            try:
                if not self.busy:
                    await self.check_and_apply()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let one bad cycle stop future updates
                log.exception("update cycle crashed")

    def status(self) -> dict[str, Any]:
        cur, prev = self.store.current(), self.store.previous()
        return {
            "state": self.state,
            "installed": cur.to_dict() if cur else None,
            "previous": prev.to_dict() if prev else None,
            "channel": self.channel,
            "hardware": self.hardware,
            "agent_version": self.agent_version,
            "repository": redact_url(self.repository_url),
            "last_check": self.last_check,
            "last_error": self.last_error,
            "last_result": self.last_result.to_dict() if self.last_result else None,
            "progress": dict(self.progress),
        }

    async def check_and_apply(self) -> UpdateResult:
        """One full cycle. Never raises for update problems: they are in the result and the status."""
        async with self._lock:
            self.metrics.in_progress.set(1)
            try:
                result = await self._cycle()
            except UpdateFailed as exc:
                result = UpdateResult(exc.kind, reason=str(exc), error_type="UpdateFailed")
            except (tuf_exc.RepositoryError, tuf_exc.DownloadError) as exc:
                result = UpdateResult("failed", reason=f"{type(exc).__name__}: {exc}",
                                      error_type=type(exc).__name__)
            except BundleError as exc:
                result = UpdateResult("failed", reason=str(exc), error_type="BundleError")
            except OSError as exc:
                reason = "disk full" if exc.errno in _DISK_FULL else f"{type(exc).__name__}: {exc}"
                result = UpdateResult("failed", reason=reason, error_type=type(exc).__name__)
            except Exception as exc:  # a bug must not kill the scheduler; it shows in the status
                log.exception("update cycle failed unexpectedly")
                result = UpdateResult("failed", reason=f"internal error: {type(exc).__name__}: {exc}",
                                      error_type=type(exc).__name__)
            finally:
                self.metrics.in_progress.set(0)
                self.state = "idle"
            result.installed = self.store.current_version()
            result.finished_at = time.time()
            self.last_check = result.finished_at
            self.last_result = result
            self.last_error = result.reason if result.status in ("failed", "rolled_back") else None
            self.metrics.updates.labels(result=result.status).inc()
            self.metrics.last_check.set(result.finished_at)
            if result.status in ("updated", "up_to_date"):
                self.metrics.last_success.set(result.finished_at)
            self.metrics.bundle_version.set(result.installed or 0)
            log.info("update cycle: %s %s", result.status, result.reason)
            return result

    # -- the cycle --------------------------------------------------------------------------------
    async def _cycle(self) -> UpdateResult:
        if not self._recovered:
            await asyncio.to_thread(self.store.recover)
            self._recovered = True
        self.state = "checking"
        outcome = await asyncio.to_thread(self._fetch_and_stage)
        if isinstance(outcome, UpdateResult):
            return outcome
        version = outcome.entry.version
        self.state = "smoke_testing"
        smoke: SmokeResult = await asyncio.to_thread(run_smoke_test, outcome.directory, self.smoke_timeout_s)
        if not smoke.ok:
            await asyncio.to_thread(self._reject_staged, version, smoke.reason)
            return UpdateResult("failed", version=version, reason=smoke.reason, error_type="SmokeTestFailed",
                                smoke=smoke.checks)
        return await self._activate(version, smoke)

    def _reject_staged(self, version: int, reason: str) -> None:
        self.store.record("rejected", version=version, restored=self.store.current_version(), reason=reason)
        self.store.discard_staging(version)

    async def _activate(self, version: int, smoke: SmokeResult) -> UpdateResult:
        self.state = "activating"
        store = self.store
        old = store.current()
        new = await asyncio.to_thread(store.install, version)
        await asyncio.to_thread(store.begin_activation, version)
        faults.maybe_kill("before_switch")
        await asyncio.to_thread(store.switch_to, version)
        faults.maybe_kill("after_switch")
        reason = ""
        try:
            if self.activator is not None:
                await self.activator.activate(new)
                self.state = "health_checking"
                if not await self.activator.health_check():
                    reason = "post-activation health check failed"
        except Exception as exc:
            reason = f"activation failed: {type(exc).__name__}: {exc}"
        if not reason:
            await asyncio.to_thread(store.commit_activation, version)
            return UpdateResult("updated", version=version, reason=f"installed {new.label}",
                                smoke=smoke.checks)
        self.state = "rolling_back"
        restored = await asyncio.to_thread(store.roll_back, version, reason)
        try:
            if self.activator is not None and old is not None and restored is not None:
                await self.activator.activate(old)
            elif self.activator is not None and hasattr(self.activator, "deactivate"):
                await self.activator.deactivate()  # first install failed: back to the built-in model
        except Exception as exc:
            reason += f"; re-activating the previous model also failed: {exc}"
        return UpdateResult("rolled_back", version=version, reason=reason, error_type="ActivationFailed",
                            smoke=smoke.checks)

    # -- blocking part (worker thread) ------------------------------------------------------------
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
        metadata_dir = self._tuf_dir / "metadata"
        metadata_dir.mkdir(parents=True, exist_ok=True)
        (self._tuf_dir / "targets").mkdir(parents=True, exist_ok=True)
        return Updater(
            metadata_dir=str(metadata_dir),
            metadata_base_url=join(self.repository_url, "metadata"),
            target_dir=str(self._tuf_dir / "targets"),
            target_base_url=join(self.repository_url, "targets"),
            fetcher=RepoFetcher(client, self.download_limits.read_timeout_s, self.download_limits),
            config=UpdaterConfig(app_user_agent=f"edgecloud-agent/{self.agent_version}"),
            bootstrap=self.trusted_root.read_bytes(),  # the root pinned at install time
        )

    def _fetch_and_stage(self) -> UpdateResult | _Staged:
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
            return _Staged(entry, directory)
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
            cached = Metadata[Targets].from_bytes((self._tuf_dir / "metadata" / "targets.json").read_bytes())
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

    def _set_progress(self, done: int, total: int, target: str | None) -> None:
        self.progress = {"bytes_done": done, "bytes_total": total, "target": target}
        self.metrics.bytes_done.set(done)
        self.metrics.bytes_total.set(total)
        if self.progress_callback is not None:
            self.progress_callback(dict(self.progress))

    def _download(
        self,
        client: httpx.Client | None,
        updater: Updater,
        entry: ManifestEntry,
        targets: list[tuple[ArtifactInfo, TargetFile]],
    ) -> Path:
        self.state = "downloading"
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
                self._set_progress(_start + done, total, _path)

            try:
                download_resumable(client, target_url(target_base, target), part, target, progress,
                                   limits=self.download_limits)
            except OSError as exc:
                if exc.errno in _DISK_FULL:  # free what we took: the gateway needs the space more
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
        self._set_progress(total, total, None)
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


__all__ = ["AGENT_VERSION", "Activator", "UpdateAgent", "UpdateResult"]
