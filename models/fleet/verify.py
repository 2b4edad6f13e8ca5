"""``edgecloud fleet verify DIR``: check a published repository the way a device will.

It runs the real client (``tuf.ngclient``) against the directory, so a repository that passes here
passes on the kiosks: every role's signatures and thresholds, expiry, every channel manifest, every
artifact's schema, length and hashes (the file the CDN will serve under its content address).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tuf.api import exceptions as tuf_exc
from tuf.api.metadata import Metadata, Targets
from tuf.api.serialization.json import JSONSerializer
from tuf.ngclient import Updater

from models.fleet.bundle import ArtifactInfo, BundleError, ChannelManifest, manifest_path
from models.fleet.repo import CHANNEL_PREFIX
from models.fleet.transport import RepoFetcher

_LOWER_HEX = re.compile(r"^[0-9a-f]*$")  # what our signers write; other spellings mean an edit


@dataclass
class VerifyReport:
    ok: bool = True
    lines: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.ok = False
        self.lines.append(f"FAIL {message}")

    def good(self, message: str) -> None:
        self.lines.append(f"ok   {message}")


def verify_published(directory: Path, trusted_root: Path | None = None) -> VerifyReport:
    directory = Path(directory).resolve()
    report = VerifyReport()
    root_path = trusted_root or directory / "metadata" / "1.root.json"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            updater = Updater(
                metadata_dir=tmp,
                metadata_base_url=str(directory / "metadata") + "/",
                target_dir=tmp,
                target_base_url=str(directory / "targets") + "/",
                fetcher=RepoFetcher(None),
                bootstrap=Path(root_path).read_bytes(),
            )
            updater.refresh()
        except (OSError, tuf_exc.RepositoryError, tuf_exc.DownloadError) as exc:
            report.fail(f"metadata: {type(exc).__name__}: {exc}")
            return report
        report.good("root, timestamp, snapshot, targets: signatures, thresholds, expiry, versions")
        _check_exact_bytes(directory / "metadata", report)
        targets_files = sorted((directory / "metadata").glob("*.targets.json"),
                               key=lambda p: int(p.name.split(".")[0]))
        top = Metadata[Targets].from_bytes(targets_files[-1].read_bytes()).signed
        roles = top.delegations.roles if top.delegations and top.delegations.roles else {}
        for role in roles:
            channel = role.removeprefix(CHANNEL_PREFIX)
            try:
                info = updater.get_targetinfo(manifest_path(channel))
            except (tuf_exc.RepositoryError, tuf_exc.DownloadError) as exc:
                report.fail(f"channel {channel}: {type(exc).__name__}: {exc}")
                continue
            if info is None:
                report.good(f"channel {channel}: empty")
                continue
            try:
                manifest = ChannelManifest.from_bytes(Path(updater.download_target(info)).read_bytes())
            except (tuf_exc.RepositoryError, tuf_exc.DownloadError, BundleError) as exc:
                report.fail(f"channel {channel} manifest: {exc}")
                continue
            for entry in manifest.entries:
                for path in entry.targets:
                    _check_target(updater, path, entry.version, report)
                report.good(f"channel {channel}: {entry.bundle} v{entry.version} ({entry.hardware}), "
                            f"{len(entry.targets)} artifacts verified")
    return report


def _check_exact_bytes(metadata_dir: Path, report: VerifyReport) -> None:
    """Every metadata file must be byte-for-byte what ``fleet publish`` writes. Signatures only cover
    the ``signed`` part and tolerate e.g. upper-case hex in a signature; a file changed on the server
    in any way is still worth an alarm (a broken sync, a tampered mirror), so re-serialize and compare."""
    serializer = JSONSerializer(compact=False)
    for path in sorted(metadata_dir.glob("*.json")):
        data = path.read_bytes()
        try:
            md = Metadata.from_bytes(data)
            same = md.to_bytes(serializer) == data and all(
                _LOWER_HEX.match(sig.signature) for sig in md.signatures.values()
            )
        except Exception:  # unparsable: the client checks above already failed or will
            same = False
        if not same:
            report.fail(f"{path.name}: not byte-identical to what `fleet publish` writes (modified on the server?)")


def _check_target(updater: Updater, path: str, version: int, report: VerifyReport) -> None:
    target = updater.get_targetinfo(path)
    if target is None:
        report.fail(f"{path}: not signed by any trusted role")
        return
    try:
        info = ArtifactInfo.from_custom(target.custom)
        if info.version != version:
            report.fail(f"{path}: custom version {info.version} != manifest version {version}")
        updater.download_target(target)  # ngclient checks length and hashes
    except (BundleError, tuf_exc.RepositoryError, tuf_exc.DownloadError) as exc:
        report.fail(f"{path}: {type(exc).__name__}: {exc}")
