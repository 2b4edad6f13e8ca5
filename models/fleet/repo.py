"""The operator's TUF repository workspace, built on python-tuf's Metadata API.

Workspace layout (private to the operator; only ``publish`` output is served)::

    fleet.json                  expiry periods, bundle name, channels
    keys/<keyid>.pem            online keys (targets, snapshot, timestamp, channels); root keys too
                                unless ``init --root-key-dir`` put them on offline media
    metadata/<role>.json        newest version of each role
    metadata/root_history/<N>.root.json
    store/<sha256>              content of every target (content-addressed)

Roles: ``root`` (keys of all top roles), ``targets`` (bundle artifacts), ``snapshot``, ``timestamp``,
and one delegated targets role ``channel-<name>`` per roll-out channel, trusted only for
``channels/<name>/*``: it signs which bundle the channel runs, not the artifacts themselves.

Why one module of about 500 lines: ``FleetRepository`` is python-tuf's ``Repository`` subclass, and
every operator command (init, add a channel, build, promote, roll back, rotate keys, sign, publish)
is one method that opens roles, edits them and closes them through the same open/close/sign
bookkeeping (versions, expiry, signatures, root history). Split into mixins, that bookkeeping would
sit in one file and its every use in others; the signing helpers the commands share are already
small functions here, and python-tuf's unstable part is fenced in ``models/fleet/tuf_private.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from securesystemslib.signer import SSlibKey
from tuf.api.exceptions import UnsignedMetadataError
from tuf.api.metadata import (
    DelegatedRole,
    Delegations,
    Metadata,
    MetaFile,
    Root,
    Snapshot,
    TargetFile,
    Targets,
    Timestamp,
)
from tuf.api.serialization.json import JSONSerializer

from models.fleet.bundle import (
    KINDS,
    ArtifactInfo,
    BundleError,
    ChannelManifest,
    ManifestEntry,
    artifact_path,
    check_file_name,
    check_name,
    manifest_path,
)
from models.fleet.keys import find_signer, generate_key
from models.fleet.tuf_private import Repository  # not yet stable upstream: fenced there

TOP_ROLES = (Root.type, Targets.type, Snapshot.type, Timestamp.type)
CHANNEL_PREFIX = "channel-"
DEFAULT_EXPIRY = {"root": "365d", "targets": "90d", "channel": "30d", "snapshot": "7d", "timestamp": "1d"}
_DURATION_RE = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class FleetError(RuntimeError):
    """An operator action that cannot be done as asked (message says what to do instead)."""


def parse_duration(text: str) -> timedelta:
    """``"1d"``, ``"12h"``, ``"30m"``, ``"90s"``: expiry periods in the config and on the CLI."""
    match = _DURATION_RE.match(text.strip())
    if not match:
        raise FleetError(f"invalid duration {text!r} (use e.g. 30s, 15m, 12h, 7d)")
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


def channel_role(channel: str) -> str:
    return CHANNEL_PREFIX + check_name(channel, "channel")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _link_or_copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        return
    tmp = dest.with_name(dest.name + ".tmp")
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


@dataclass
class RoleSignatures:
    """How far a role is from being publishable."""

    role: str
    version: int
    have: int
    need: int
    missing_keyids: list[str] = field(default_factory=list)
    ok: bool = False


class FleetRepository(Repository):
    """One operator workspace. Every edit bumps the role version, sets its expiry and signs it with
    every private key of that role found in ``key_dirs``; roles short of their threshold are
    completed with :meth:`sign` (k-of-n) before :meth:`publish` accepts them."""

    def __init__(self, workspace: Path, key_dirs: Iterable[Path] = ()) -> None:
        self.workspace = Path(workspace)
        self.metadata_dir = self.workspace / "metadata"
        self.store_dir = self.workspace / "store"
        self.key_dirs = [self.workspace / "keys", *[Path(p) for p in key_dirs]]
        self.serializer = JSONSerializer(compact=False)
        config_path = self.workspace / "fleet.json"
        self.config: dict[str, Any] = (
            json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
        )
        self._expiry_override: dict[str, timedelta] = {}

    # -- tuf.repository.Repository ----------------------------------------------------------------
    def _path(self, role: str) -> Path:
        return self.metadata_dir / f"{role}.json"

    def open(self, role: str) -> Metadata:
        path = self._path(role)
        if path.exists():
            return Metadata.from_bytes(path.read_bytes())
        if role == Root.type:
            return Metadata(Root(consistent_snapshot=True))
        if role == Snapshot.type:
            return Metadata(Snapshot())
        if role == Timestamp.type:
            return Metadata(Timestamp())
        return Metadata(Targets())

    def _expiry(self, role: str) -> timedelta:
        key = "channel" if role.startswith(CHANNEL_PREFIX) else role
        if key in self._expiry_override:
            return self._expiry_override[key]
        expiry = {**DEFAULT_EXPIRY, **self.config.get("expiry", {})}
        return parse_duration(expiry[key])

    def close(self, role: str, md: Metadata) -> None:
        """Bump the version (unless first), set expiry, re-sign with the available keys, store."""
        if self._path(role).exists():
            md.signed.version += 1
        md.signed.expires = datetime.now(timezone.utc).replace(microsecond=0) + self._expiry(role)
        md.signatures.clear()
        self._add_signatures(role, md, self.key_dirs)  # before writing: a key that fails leaves no trace
        self._write(role, md)

    def _write(self, role: str, md: Metadata) -> None:
        data = md.to_bytes(self.serializer)
        _atomic_write(self._path(role), data)
        if role == Root.type:
            _atomic_write(self.metadata_dir / "root_history" / f"{md.signed.version}.root.json", data)

    @property
    def targets_infos(self) -> dict[str, MetaFile]:
        infos = {"targets.json": MetaFile(self.open(Targets.type).signed.version)}
        for role in self.channel_roles():
            infos[f"{role}.json"] = MetaFile(self.open(role).signed.version)
        return infos

    @property
    def snapshot_info(self) -> MetaFile:
        return MetaFile(self.open(Snapshot.type).signed.version)

    # -- keys and signatures ----------------------------------------------------------------------
    def _previous_root(self, version: int | None = None) -> Root | None:
        version = version if version is not None else self.root().version
        path = self.metadata_dir / "root_history" / f"{version - 1}.root.json"
        if version > 1 and path.exists():
            return Metadata[Root].from_bytes(path.read_bytes()).signed
        return None

    def _delegator(self, role: str) -> Root | Targets:
        return self.targets() if role.startswith(CHANNEL_PREFIX) else self.root()

    def _role_keys(self, role: str, md: Metadata) -> list[SSlibKey]:
        delegator = md.signed if role == Root.type else self._delegator(role)  # root lists its own keys
        keys = [delegator.get_key(keyid) for keyid in delegator.get_delegated_role(role).keyids]
        if role == Root.type:
            previous = self._previous_root(md.signed.version)
            if previous is not None:  # a rotated root must also satisfy the old root's threshold
                keys += [previous.get_key(k) for k in previous.roles[Root.type].keyids]
        return [k for k in keys if isinstance(k, SSlibKey)]

    def sign(self, role: str, key_dirs: Iterable[Path] = ()) -> RoleSignatures:
        """Add the signatures of every key for ``role`` found in the key dirs (k-of-n signing:
        run once per key holder, each with their own ``--key-dir``). Does not change the version."""
        md = self.open(role)
        self._add_signatures(role, md, [*self.key_dirs, *[Path(p) for p in key_dirs]])
        self._write(role, md)
        return self.signature_status(role)

    def _add_signatures(self, role: str, md: Metadata, dirs: list[Path]) -> None:
        for key in self._role_keys(role, md):
            if key.keyid in md.signatures:
                continue
            signer = find_signer(key, dirs)
            if signer is not None:
                md.sign(signer, append=True)

    def signature_status(self, role: str) -> RoleSignatures:
        md = self.open(role)
        delegator = self._delegator(role)
        checks = [delegator.get_verification_result(role, md.signed_bytes, md.signatures)]
        if role == Root.type:
            previous = self._previous_root()
            if previous is not None:
                checks.append(previous.get_verification_result(role, md.signed_bytes, md.signatures))
        have = min(len(c.signed) for c in checks)
        need = max(c.threshold for c in checks)
        missing = sorted({k for c in checks for k in c.unsigned})
        return RoleSignatures(role, md.signed.version, have, need, missing, all(c.verified for c in checks))

    # -- set-up -----------------------------------------------------------------------------------
    def init(
        self,
        *,
        bundle_name: str = "kiosk",
        root_keys: int = 1,
        root_threshold: int = 1,
        targets_keys: int = 1,
        targets_threshold: int = 1,
        root_key_dir: Path | None = None,
        channels: Iterable[str] = ("stable", "canary"),
        expiry: dict[str, str] | None = None,
    ) -> None:
        """Generate keys and the first version of every role."""
        if self._path(Root.type).exists():
            raise FleetError(f"{self.workspace} already has a repository")
        if root_threshold > root_keys or targets_threshold > targets_keys:
            raise FleetError("a threshold cannot exceed the number of keys")
        for value in (expiry or {}).values():
            parse_duration(value)
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.config = {
            "bundle": check_name(bundle_name, "bundle name"),
            "expiry": {**DEFAULT_EXPIRY, **(expiry or {})},
        }
        _atomic_write(self.workspace / "fleet.json", json.dumps(self.config, indent=2).encode())
        online = self.workspace / "keys"
        root_dir = Path(root_key_dir) if root_key_dir else online
        if root_key_dir:
            self.key_dirs.append(root_dir)
        root = Root(consistent_snapshot=True)
        root.roles[Root.type].threshold = root_threshold
        root.roles[Targets.type].threshold = targets_threshold
        for _ in range(root_keys):
            root.add_key(generate_key(root_dir), Root.type)
        for _ in range(targets_keys):
            root.add_key(generate_key(online), Targets.type)
        root.add_key(generate_key(online), Snapshot.type)
        root.add_key(generate_key(online), Timestamp.type)
        md = Metadata(root)
        md.signed.expires = datetime.now(timezone.utc).replace(microsecond=0) + self._expiry(Root.type)
        self._add_signatures(Root.type, md, self.key_dirs)
        self._write(Root.type, md)
        with self.edit_targets() as targets:
            targets.delegations = Delegations(keys={}, roles={})
        for channel in channels:
            self.add_channel(channel)

    def channel_roles(self) -> list[str]:
        delegations = self.targets().delegations
        if delegations is None or delegations.roles is None:
            return []
        return [name for name in delegations.roles if name.startswith(CHANNEL_PREFIX)]

    def channels(self) -> list[str]:
        return [r.removeprefix(CHANNEL_PREFIX) for r in self.channel_roles()]

    def add_channel(self, channel: str, keys: int = 1, threshold: int = 1) -> None:
        """A roll-out channel = a delegated targets role for ``channels/<channel>/*`` with its own key,
        so the people promoting to a test group never hold the key that signs artifacts."""
        role = channel_role(channel)
        if role in self.channel_roles():
            raise FleetError(f"channel {channel} exists")
        online = self.workspace / "keys"
        with self.edit_targets() as targets:
            if targets.delegations is None:
                targets.delegations = Delegations(keys={}, roles={})
            delegated = DelegatedRole(role, [], threshold, True, paths=[f"channels/{channel}/*"])
            assert targets.delegations.roles is not None
            targets.delegations.roles[role] = delegated
            for _ in range(keys):
                targets.add_key(generate_key(online), role)
        with self.edit_targets(role):
            pass

    # -- bundles ----------------------------------------------------------------------------------
    def _store(self, path: Path) -> str:
        digest = _sha256(path)
        _link_or_copy(path, self.store_dir / digest)
        return digest

    def bundle_targets(self, version: int, bundle: str | None = None) -> dict[str, TargetFile]:
        name = bundle or self.config.get("bundle", "kiosk")
        prefix = f"bundles/{name}/{version}/"
        return {p: t for p, t in self.targets().targets.items() if p.startswith(prefix)}

    def latest_version(self, bundle: str | None = None) -> int:
        name = bundle or self.config.get("bundle", "kiosk")
        versions = [
            int(p.split("/")[2]) for p in self.targets().targets if p.startswith(f"bundles/{name}/")
        ]
        return max(versions, default=0)

    def build(
        self,
        *,
        version: int,
        artifacts: dict[str, list[Path]],
        label: str = "",
        hardware: str = "any",
        min_agent_version: str = "0.1.0",
        bundle: str | None = None,
    ) -> list[str]:
        """Add one bundle version as targets with our ``custom`` metadata. Versions are immutable."""
        name = check_name(bundle or self.config.get("bundle", "kiosk"), "bundle name")
        check_name(hardware, "hardware")
        if version < 1:
            raise FleetError("--version must be a positive integer")
        if not artifacts:
            raise FleetError("a bundle needs at least one artifact")
        existing = self.bundle_targets(version, name)
        if any(p.split("/")[3] == hardware for p in existing):
            raise FleetError(f"bundle {name} version {version} for {hardware} exists; versions are immutable")
        added: dict[str, TargetFile] = {}
        for kind, files in artifacts.items():
            if kind not in KINDS:
                raise FleetError(f"unknown artifact kind {kind}")
            for file in files:
                file = Path(file)
                if not file.is_file():
                    raise FleetError(f"{file} is not a file")
                file_name = check_file_name(file.name)
                path = artifact_path(name, version, hardware, kind, file_name)
                info = ArtifactInfo(name, version, label or str(version), kind, hardware, min_agent_version,
                                    file_name)
                target = TargetFile.from_file(path, str(file), ["sha256"])
                target.unrecognized_fields["custom"] = info.to_custom()
                self._store(file)
                added[path] = target
        with self.edit_targets() as targets:
            targets.targets.update(added)
        return sorted(added)

    def promote(self, channel: str, version: int, bundle: str | None = None) -> ChannelManifest:
        """Point ``channel`` at ``version`` (all hardware variants of it) by rewriting its manifest."""
        name = bundle or self.config.get("bundle", "kiosk")
        role = channel_role(channel)
        if role not in self.channel_roles():
            raise FleetError(f"no channel {channel}; add it with `edgecloud fleet channel add {channel}`")
        targets = self.bundle_targets(version, name)
        if not targets:
            raise FleetError(f"bundle {name} has no version {version}; build it first")
        by_hw: dict[str, list[str]] = {}
        label = ""
        for path, target in targets.items():
            info = ArtifactInfo.from_custom(target.custom)
            by_hw.setdefault(info.hardware, []).append(path)
            label = info.label
        current = self.channel_manifest(channel)
        kept = [e for e in current.entries if not (e.bundle == name and e.hardware in by_hw)]
        new = [ManifestEntry(name, version, label, hw, tuple(sorted(paths))) for hw, paths in by_hw.items()]
        manifest = ChannelManifest(channel, tuple(sorted(kept + new, key=lambda e: (e.bundle, e.hardware))))
        data = manifest.to_bytes()
        tmp = self.store_dir / "manifest.tmp"
        _atomic_write(tmp, data)
        self._store(tmp)
        tmp.unlink()
        target = TargetFile.from_data(manifest_path(channel), data, ["sha256"])
        with self.edit_targets(role) as channel_targets:
            channel_targets.targets[target.path] = target
        return manifest

    def channel_manifest(self, channel: str) -> ChannelManifest:
        target = self.targets(channel_role(channel)).targets.get(manifest_path(channel))
        if target is None:
            return ChannelManifest(channel)
        return ChannelManifest.from_bytes((self.store_dir / target.hashes["sha256"]).read_bytes())

    def rollback(self, channel: str, to_version: int, new_version: int | None = None) -> int:
        """Devices never install a lower version, so rolling back = re-releasing old artifacts as a new,
        higher version (label says so) and promoting it."""
        name = self.config.get("bundle", "kiosk")
        old = self.bundle_targets(to_version, name)
        if not old:
            raise FleetError(f"no version {to_version} to roll back to")
        version = new_version or self.latest_version(name) + 1
        per_hw: dict[tuple[str, str], dict[str, list[Path]]] = {}
        for target in old.values():
            info = ArtifactInfo.from_custom(target.custom)
            staged = self.workspace / "rollback" / info.kind / info.file_name
            staged.parent.mkdir(parents=True, exist_ok=True)
            staged.unlink(missing_ok=True)
            _link_or_copy(self.store_dir / target.hashes["sha256"], staged)
            group = per_hw.setdefault((info.hardware, info.min_agent_version), {})
            group.setdefault(info.kind, []).append(staged)
        try:
            for (hardware, min_agent), artifacts in per_hw.items():
                self.build(version=version, artifacts=artifacts, label=f"rollback-to-{to_version}",
                           hardware=hardware, min_agent_version=min_agent, bundle=name)
        finally:
            shutil.rmtree(self.workspace / "rollback", ignore_errors=True)
        self.promote(channel, version, name)
        return version

    # -- key rotation -----------------------------------------------------------------------------
    def rotate_keys(
        self, role: str, keys: int = 1, threshold: int | None = None, key_dir: Path | None = None
    ) -> list[str]:
        """Replace every key of ``role`` with new ones (TUF rotation: a new root version, signed by the
        old and the new root keys, or a new delegation in ``targets`` for a channel). New private keys
        go to ``key_dir`` (offline media for root) or the workspace."""
        target_dir = Path(key_dir) if key_dir else self.workspace / "keys"
        if key_dir and target_dir not in self.key_dirs:
            self.key_dirs.append(target_dir)
        new_keys = [generate_key(target_dir) for _ in range(keys)]
        if role.startswith(CHANNEL_PREFIX) or role in self.channels():
            role = role if role.startswith(CHANNEL_PREFIX) else channel_role(role)
            with self.edit_targets() as targets:
                assert targets.delegations is not None and targets.delegations.roles is not None
                delegated = targets.delegations.roles[role]
                for keyid in list(delegated.keyids):
                    targets.revoke_key(keyid, role)
                for key in new_keys:
                    targets.add_key(key, role)
                if threshold:
                    delegated.threshold = threshold
            with self.edit_targets(role):
                pass  # re-sign the channel with its new key
        elif role in TOP_ROLES:
            with self.edit_root() as root:
                for keyid in list(root.roles[role].keyids):
                    root.revoke_key(keyid, role)
                for key in new_keys:
                    root.add_key(key, role)
                if threshold:
                    root.roles[role].threshold = threshold
            if role != Root.type:
                with self.edit(role):
                    pass  # the role's next version is signed by its new key
        else:
            raise FleetError(f"unknown role {role}")
        return [k.keyid for k in new_keys]

    # -- publishing -------------------------------------------------------------------------------
    def all_roles(self) -> list[str]:
        return [Root.type, Targets.type, *self.channel_roles()]

    def unsigned_roles(self) -> list[RoleSignatures]:
        return [s for s in (self.signature_status(r) for r in self.all_roles()) if not s.ok]

    def publish(self, out_dir: Path, timestamp_expiry: str | None = None) -> dict[str, Any]:
        """Write a static repository: versioned metadata (consistent snapshots) and content-addressed
        targets, ``timestamp.json`` last so a server mid-copy never offers a half-written state.
        Older files are kept: a device mid-update may still fetch them."""
        missing = self.unsigned_roles()
        if missing:
            detail = "; ".join(f"{s.role} v{s.version} has {s.have}/{s.need} signatures" for s in missing)
            raise FleetError(f"not enough signatures: {detail}. "
                             "Run `edgecloud fleet sign ROLE --key-dir ...`")
        if timestamp_expiry:
            self._expiry_override["timestamp"] = parse_duration(timestamp_expiry)
        self.do_snapshot(force=True)
        self.do_timestamp(force=True)
        for role in (Snapshot.type, Timestamp.type):
            status = self.signature_status(role)
            if not status.ok:
                raise FleetError(f"{role} key is not available here; it must be online to publish")
        out = Path(out_dir)
        meta_out = out / "metadata"
        for path in sorted((self.metadata_dir / "root_history").glob("*.root.json")):
            _atomic_write(meta_out / path.name, path.read_bytes())
        for role in [Targets.type, *self.channel_roles()]:
            md = self.open(role)
            _atomic_write(meta_out / f"{md.signed.version}.{role}.json", self._path(role).read_bytes())
            for target in md.signed.targets.values():
                digest = target.hashes["sha256"]
                _link_or_copy(self.store_dir / digest, out / "targets" / target.get_prefixed_paths()[0])
        snapshot = self.open(Snapshot.type)
        snapshot_bytes = self._path(Snapshot.type).read_bytes()
        _atomic_write(meta_out / f"{snapshot.signed.version}.snapshot.json", snapshot_bytes)
        _atomic_write(meta_out / "timestamp.json", self._path(Timestamp.type).read_bytes())
        return {
            "root": self.root().version,
            "targets": self.targets().version,
            "snapshot": snapshot.signed.version,
            "timestamp": self.timestamp().version,
            "channels": {c: [(e.hardware, e.version) for e in self.channel_manifest(c).entries]
                         for c in self.channels()},
        }


def require_workspace(workspace: Path) -> None:
    if not (Path(workspace) / "metadata" / "root.json").exists():
        raise FleetError(f"{workspace} is not a fleet workspace; run `edgecloud fleet init` first")


__all__ = ["BundleError", "FleetError", "FleetRepository", "UnsignedMetadataError", "parse_duration"]
