"""The device-side update agent: TUF refresh, resumable download, smoke test, A/B switch, rollback.

python-tuf (``tuf.ngclient``) does the metadata security: signatures and thresholds, expiry (freeze
attacks), version rollback of metadata, mix-and-match, length limits. This agent adds what TUF leaves
to the application: the bundle version must be strictly higher than the installed one (and not one
that already failed here), the hardware and agent version must match, big files resume with HTTP
Range into a staging folder and are verified with ``TargetFile.verify_length_and_hashes`` before
use, disk space is checked first, and activation is smoke-tested, health-checked and rolled back.

It runs inside the gateway process (so the gateway can hot-swap without a restart) or one-shot from
the device CLI. Network and disk work runs in a worker thread (ngclient is synchronous): that half
of the cycle, from the TUF refresh to a verified staging folder, is ``models.fleet.fetch``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse, urlunparse

from prometheus_client import CollectorRegistry, Counter, Gauge
from tuf.api import exceptions as tuf_exc

from models.fleet import faults
from models.fleet.bundle import (
    ANY_HARDWARE,
    BundleError,
)
from models.fleet.fetch import DISK_FULL, BundleFetcher, UpdateFailed, UpdateResult
from models.fleet.smoke import SmokeResult, run_smoke_test
from models.fleet.transport import (
    DownloadLimits,
)
from models.store import InstalledVersion, ModelStore

AGENT_VERSION = "0.1.0"
log = logging.getLogger(__name__)


class Activator(Protocol):
    """Implemented by the gateway: load a new version while the old one keeps serving."""

    async def activate(self, version: InstalledVersion) -> None:
        """Hot-swap to ``version`` (raise on failure; the agent then rolls back)."""

    async def health_check(self) -> bool:
        """After activation: is the gateway answering with the new version?"""

    # Optional: ``async def deactivate(self) -> None`` -- called when a first install (no previous
    # version) fails after activation, to return to the model built into the gateway.


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
        self._fetcher = BundleFetcher(
            store=self.store, repository_url=repository_url, trusted_root=self.trusted_root,
            tuf_dir=self.data_dir / "tuf", hardware=hardware, channel=channel, agent_version=agent_version,
            reserve_bytes=reserve_bytes, download_limits=self.download_limits,
            on_progress=self._set_progress, on_state=self._set_state,
        )
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
                reason = "disk full" if exc.errno in DISK_FULL else f"{type(exc).__name__}: {exc}"
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

    def _set_state(self, state: str) -> None:
        self.state = state

    def _set_progress(self, done: int, total: int, target: str | None) -> None:
        self.progress = {"bytes_done": done, "bytes_total": total, "target": target}
        self.metrics.bytes_done.set(done)
        self.metrics.bytes_total.set(total)
        if self.progress_callback is not None:
            self.progress_callback(dict(self.progress))

    # -- the cycle --------------------------------------------------------------------------------
    async def _cycle(self) -> UpdateResult:
        if not self._recovered:
            await asyncio.to_thread(self.store.recover)
            self._recovered = True
        self.state = "checking"
        outcome = await asyncio.to_thread(self._fetcher.fetch_and_stage)
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


__all__ = ["AGENT_VERSION", "Activator", "UpdateAgent", "UpdateResult"]
