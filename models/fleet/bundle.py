"""What a bundle is, shared by the operator tools and the device agent.

A bundle is a set of TUF targets. TUF signs their length and hashes; the ``custom`` field of each
target carries what only this application understands (bundle name, version, kind, hardware,
minimum agent version). Keeping that schema in one module means the operator side can never write
a field the device side reads differently.

Target paths:
    ``bundles/<name>/<version>/<hardware>/<kind>/<file>``   the artifacts (top-level ``targets`` role)
    ``channels/<channel>/manifest.json``                   which bundle a channel runs (delegated role)
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

KINDS: tuple[str, ...] = ("gguf", "intent", "faq", "config", "knowledge")
ANY_HARDWARE = "any"
CUSTOM_KEY = "edgecloud"
MANIFEST_NAME = "manifest.json"
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class BundleError(ValueError):
    """A bundle or manifest that does not follow the schema (refused, never half-used)."""


def check_name(value: str, what: str) -> str:
    """Names end up in paths and URLs: allow only a safe alphabet so nothing can escape a folder."""
    if not _NAME_RE.match(value):
        raise BundleError(f"invalid {what} {value!r}: use lower-case letters, digits, '.', '_' or '-'")
    return value


def check_file_name(value: str) -> str:
    if not _FILE_RE.match(value) or value in (".", ".."):
        raise BundleError(f"invalid artifact file name {value!r}")
    return value


def parse_agent_version(value: str) -> tuple[int, ...]:
    """``"1.2.3"`` -> ``(1, 2, 3)``; a bundle's ``min_agent_version`` is compared numerically."""
    try:
        return tuple(int(part) for part in value.split("."))
    except ValueError as exc:
        raise BundleError(f"invalid agent version {value!r}") from exc


def artifact_path(name: str, version: int, hardware: str, kind: str, file_name: str) -> str:
    return f"bundles/{name}/{version}/{hardware}/{kind}/{file_name}"


def manifest_path(channel: str) -> str:
    return f"channels/{channel}/{MANIFEST_NAME}"


@dataclass(frozen=True)
class ArtifactInfo:
    """The ``custom`` metadata of one target (signed as part of the targets role)."""

    bundle: str
    version: int
    label: str
    kind: str
    hardware: str
    min_agent_version: str
    file_name: str

    def to_custom(self) -> dict[str, Any]:
        return {CUSTOM_KEY: asdict(self)}

    @classmethod
    def from_custom(cls, custom: Any) -> ArtifactInfo:
        """Validate the device-side copy: a target without our schema is refused, not guessed at."""
        if not isinstance(custom, dict) or not isinstance(custom.get(CUSTOM_KEY), dict):
            raise BundleError("target has no edgecloud custom metadata")
        raw = custom[CUSTOM_KEY]
        try:
            info = cls(
                bundle=check_name(str(raw["bundle"]), "bundle name"),
                version=int(raw["version"]),
                label=str(raw["label"]),
                kind=str(raw["kind"]),
                hardware=check_name(str(raw["hardware"]), "hardware"),
                min_agent_version=str(raw["min_agent_version"]),
                file_name=check_file_name(str(raw["file_name"])),
            )
        except BundleError:
            raise
        except KeyError as exc:
            raise BundleError(f"custom metadata lacks {exc}") from exc
        except (TypeError, ValueError) as exc:
            raise BundleError(f"invalid custom metadata: {exc}") from exc
        if info.kind not in KINDS:
            raise BundleError(f"unknown artifact kind {info.kind!r}")
        if info.version < 1 or isinstance(raw["version"], bool):
            raise BundleError("bundle version must be a positive integer")
        parse_agent_version(info.min_agent_version)
        return info


@dataclass(frozen=True)
class ManifestEntry:
    """One bundle a channel offers (one per hardware type)."""

    bundle: str
    version: int
    label: str
    hardware: str
    targets: tuple[str, ...]


@dataclass(frozen=True)
class ChannelManifest:
    """``channels/<channel>/manifest.json``: a signed target naming the bundles a channel runs.

    TUF clients cannot list targets, so the device needs one well-known path per channel; promoting
    a version to a channel is rewriting this file in the channel's delegated role.
    """

    channel: str
    entries: tuple[ManifestEntry, ...] = field(default_factory=tuple)

    def to_bytes(self) -> bytes:
        body = {
            "channel": self.channel,
            "bundles": [
                {
                    "bundle": e.bundle,
                    "version": e.version,
                    "label": e.label,
                    "hardware": e.hardware,
                    "targets": list(e.targets),
                }
                for e in self.entries
            ],
        }
        return json.dumps(body, indent=2, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ChannelManifest:
        try:
            body = json.loads(data)
            entries = tuple(
                ManifestEntry(
                    bundle=check_name(str(b["bundle"]), "bundle name"),
                    version=int(b["version"]),
                    label=str(b["label"]),
                    hardware=check_name(str(b["hardware"]), "hardware"),
                    targets=tuple(str(t) for t in b["targets"]),
                )
                for b in body["bundles"]
            )
            return cls(channel=check_name(str(body["channel"]), "channel"), entries=entries)
        except (ValueError, KeyError, TypeError) as exc:
            raise BundleError(f"invalid channel manifest: {exc}") from exc

    def for_hardware(self, hardware: str) -> list[ManifestEntry]:
        """Entries this device may run: its own hardware, or a hardware-independent bundle."""
        return [e for e in self.entries if e.hardware in (hardware, ANY_HARDWARE)]
