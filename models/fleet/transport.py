"""Getting bytes from a repository: TUF metadata through ngclient, big targets with HTTP Range resume.

A repository is an ``http(s)://`` base URL or a local directory (USB stick, first install from the
setup media). ngclient downloads whole files into memory/temp files, which is right for metadata and
wrong for a multi-GB GGUF on a flaky kiosk link, so artifacts go through :func:`download_resumable`
into the staging folder and are then checked with TUF's own ``TargetFile.verify_length_and_hashes``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import httpx
from tuf.api import exceptions as tuf_exc
from tuf.api.metadata import TargetFile
from tuf.ngclient import FetcherInterface

from models.fleet import faults

CHUNK = 1 << 20
ProgressFn = Callable[[int], None]


class DownloadError(RuntimeError):
    """A target could not be fetched (network, HTTP status, endless data, too slow, encoded)."""


@dataclass(frozen=True)
class DownloadLimits:
    """Bounds on every fetch, so a mirror that drips bytes cannot hold the update lock forever.

    ``read_timeout_s`` alone does not: one byte every 29 seconds never trips it. So each fetch also
    has a wall-clock deadline (artifacts: all resume attempts together; metadata: per file) and must
    keep at least ``min_rate_bps`` over every ``rate_window_s``. A stall is noticed within a window
    plus one read timeout.
    """

    read_timeout_s: float = 30.0
    deadline_s: float = 6 * 3600.0
    metadata_deadline_s: float = 120.0
    min_rate_bps: float = 4096.0
    rate_window_s: float = 30.0


class RateGuard:
    """Counts the bytes of one fetch; raises ``DownloadError`` past the deadline or under the rate."""

    def __init__(self, limits: DownloadLimits, deadline_s: float, what: str) -> None:
        self.limits = limits
        self.what = what
        self.started = time.monotonic()
        self.deadline = self.started + deadline_s
        self.restart_window()

    def restart_window(self) -> None:
        self.window_start = time.monotonic()
        self.window_bytes = 0

    def tick(self, n: int) -> None:
        now = time.monotonic()
        if now > self.deadline:
            raise DownloadError(f"{self.what}: over the {self.deadline - self.started:.0f}s download deadline "
                                "(the mirror is too slow)")
        self.window_bytes += n
        elapsed = now - self.window_start
        if elapsed >= self.limits.rate_window_s:
            rate = self.window_bytes / elapsed
            if rate < self.limits.min_rate_bps:
                raise DownloadError(f"{self.what}: {rate:.0f} bytes/s over {elapsed:.0f}s, under the "
                                    f"{self.limits.min_rate_bps:.0f} bytes/s minimum (the mirror stalls)")
            self.restart_window()


def refuse_encoded(response: httpx.Response, url: str) -> None:
    """Signed bytes are fetched exactly as published: nothing is decompressed, so no bomb can expand.

    Requests say ``Accept-Encoding: identity``; a server that encodes anyway is refused.
    """
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise DownloadError(f"{url}: refused Content-Encoding {encoding!r} (only identity is accepted)")


def local_dir(repository: str) -> Path | None:
    """The directory a repository string names, or None for an HTTP(S) URL."""
    parsed = urlparse(repository)
    if parsed.scheme in ("http", "https"):
        return None
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    return Path(repository)


def join(repository: str, *parts: str) -> str:
    return repository.rstrip("/") + "/" + "/".join(p.strip("/") for p in parts)


class RepoFetcher(FetcherInterface):
    """ngclient fetcher over httpx (HTTP/1.1, timeouts) or a local directory.

    Only used for metadata and small targets; ngclient enforces the length limits on top.
    """

    def __init__(self, client: httpx.Client | None, timeout_s: float = 30.0,
                 limits: DownloadLimits | None = None) -> None:
        self._client = client
        self._timeout = timeout_s
        self._limits = limits or DownloadLimits(read_timeout_s=timeout_s)

    def _fetch(self, url: str) -> Iterator[bytes]:
        directory = local_dir(url)
        if directory is not None:
            try:
                fh = open(directory, "rb")
            except FileNotFoundError as exc:
                raise tuf_exc.DownloadHTTPError(f"{url} not found", 404) from exc
            return self._file_chunks(fh)
        assert self._client is not None
        request = self._client.build_request("GET", url, timeout=self._timeout)
        try:
            response = self._client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise tuf_exc.SlowRetrievalError(str(exc)) from exc
        except httpx.HTTPError as exc:
            raise tuf_exc.DownloadError(f"cannot fetch {url}: {type(exc).__name__}") from exc
        if response.status_code >= 400:
            response.close()
            raise tuf_exc.DownloadHTTPError(f"HTTP {response.status_code} for {url}", response.status_code)
        try:
            refuse_encoded(response, url)
        except DownloadError as exc:
            response.close()
            raise tuf_exc.DownloadError(str(exc)) from None
        guard = RateGuard(self._limits, self._limits.metadata_deadline_s, url)
        return self._http_chunks(response, guard)

    @staticmethod
    def _file_chunks(fh: object) -> Iterator[bytes]:
        with fh:  # type: ignore[attr-defined]
            yield from iter(lambda: fh.read(CHUNK), b"")  # type: ignore[attr-defined]

    @staticmethod
    def _http_chunks(response: httpx.Response, guard: RateGuard) -> Iterator[bytes]:
        try:
            for chunk in response.iter_raw():
                guard.tick(len(chunk))
                yield chunk
        except DownloadError as exc:
            raise tuf_exc.SlowRetrievalError(str(exc)) from None
        except httpx.TimeoutException as exc:
            raise tuf_exc.SlowRetrievalError(str(exc)) from exc
        except httpx.HTTPError as exc:
            raise tuf_exc.DownloadError(f"download interrupted: {type(exc).__name__}") from exc
        finally:
            response.close()


def target_url(target_base: str, target: TargetFile) -> str:
    """Consistent snapshots: targets are served as ``<dir>/<sha256>.<name>`` (never overwritten)."""
    return join(target_base, target.get_prefixed_paths()[0])


def download_resumable(
    client: httpx.Client | None,
    url: str,
    part: Path,
    target: TargetFile,
    progress: ProgressFn | None = None,
    attempts: int = 4,
    limits: DownloadLimits | None = None,
) -> None:
    """Fetch ``url`` into ``part``, continuing from what a previous (cut) attempt left there.

    Never writes more than ``target.length`` bytes: a server that sends more (endless-data attack) is
    cut off at the declared length and the download fails. Verification against length and hashes is
    the caller's job (``TargetFile.verify_length_and_hashes``) once this returns.
    """
    limits = limits or DownloadLimits()
    guard = RateGuard(limits, limits.deadline_s, target.path)  # one deadline for every attempt
    last_error: Exception | None = None
    for _ in range(attempts):
        try:
            guard.restart_window()
            _download_once(client, url, part, target.length, progress, guard)
            return
        except DownloadError as exc:
            if "more than" in str(exc) or "HTTP 4" in str(exc) or isinstance(exc, _Fatal):
                raise
            last_error = exc
    raise DownloadError(f"giving up after {attempts} attempts: {last_error}")


class _Fatal(DownloadError):
    """Not worth another attempt: too slow past the deadline or rate, or an encoding we refuse."""


def _download_once(
    client: httpx.Client | None, url: str, part: Path, length: int, progress: ProgressFn | None,
    guard: RateGuard | None = None,
) -> None:
    have = part.stat().st_size if part.exists() else 0
    if have > length:
        part.unlink()
        have = 0
    if have == length:
        return
    directory = local_dir(url)
    if directory is not None:
        try:
            src = open(directory, "rb")
        except FileNotFoundError as exc:
            raise DownloadError(f"HTTP 404: {url} not found") from exc
        with src, open(part, "ab") as out:
            src.seek(have)
            _copy(iter(lambda: src.read(CHUNK), b""), out, have, length, progress)
        return
    assert client is not None
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        with client.stream("GET", url, headers=headers) as response:
            if response.status_code == 416:  # our part is stale/bigger: start over
                part.unlink(missing_ok=True)
                raise DownloadError("range not satisfiable; restarting")
            if response.status_code >= 400:
                raise DownloadError(f"HTTP {response.status_code} for {url}")
            if have and response.status_code != 206:
                have = 0  # server ignored Range: rewrite from the start
            try:
                refuse_encoded(response, url)
            except DownloadError as exc:
                raise _Fatal(str(exc)) from None
            mode = "ab" if have else "wb"
            with open(part, mode) as out:
                _copy(_guarded(response.iter_raw(), guard), out, have, length, progress)  # a cut keeps them
    except httpx.HTTPError as exc:
        raise DownloadError(f"download interrupted: {type(exc).__name__}") from exc


def _guarded(chunks: Iterator[bytes], guard: RateGuard | None) -> Iterator[bytes]:
    for chunk in chunks:
        if guard is not None:
            try:
                guard.tick(len(chunk))
            except DownloadError as exc:
                raise _Fatal(str(exc)) from None
        yield chunk


def _copy(chunks: Iterator[bytes], out, have: int, length: int, progress: ProgressFn | None) -> None:
    done = have
    for chunk in chunks:
        if done + len(chunk) > length:
            out.write(chunk[: length - done])
            out.flush()
            raise DownloadError(f"server sent more than the {length} bytes the signed metadata declares")
        out.write(chunk)
        done += len(chunk)
        if progress:
            progress(done)
        faults.maybe_kill("download_part")
    out.flush()
    os.fsync(out.fileno())
    if done < length:
        raise DownloadError(f"connection closed after {done} of {length} bytes")
