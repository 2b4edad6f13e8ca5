"""Operator signing keys on disk: ed25519, PKCS#8 PEM, optionally passphrase-encrypted.

Each key is ``<dir>/<keyid>.pem`` (private, mode 0600) beside ``<dir>/<keyid>.pub.json`` (public).
Keys are found by key id in any of the directories the operator names, so the root keys can live on
an offline USB stick (``--key-dir /media/usb``) and are needed only for root changes.
The passphrase comes from ``EDGECLOUD_FLEET_KEY_PASSPHRASE`` when set, never from the command line
(it would end up in shell history and ``ps``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)
from securesystemslib.signer import CryptoSigner, SSlibKey

PASSPHRASE_ENV = "EDGECLOUD_FLEET_KEY_PASSPHRASE"  # noqa: S105 - the variable name, not a secret


class KeyLoadError(ValueError):
    """A private key file exists but cannot be used (encrypted with another passphrase, damaged)."""


def _passphrase() -> bytes | None:
    value = os.environ.get(PASSPHRASE_ENV)
    return value.encode() if value else None


def generate_key(directory: Path) -> SSlibKey:
    """Create a new ed25519 key pair in ``directory`` and return its public key."""
    directory.mkdir(parents=True, exist_ok=True)
    private = Ed25519PrivateKey.generate()
    key = SSlibKey.from_crypto(private.public_key(), scheme="ed25519")
    secret = _passphrase()
    encryption = BestAvailableEncryption(secret) if secret else NoEncryption()
    pem = private.private_bytes(encoding=Encoding.PEM, format=PrivateFormat.PKCS8, encryption_algorithm=encryption)
    private_path = directory / f"{key.keyid}.pem"
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    (directory / f"{key.keyid}.pub.json").write_text(json.dumps(key.to_dict(), indent=2), encoding="utf-8")
    return key


def load_public_key(path: Path) -> SSlibKey:
    data = json.loads(path.read_text(encoding="utf-8"))
    key = SSlibKey.from_dict(path.name.removesuffix(".pub.json"), data)
    return key


def find_signer(key: SSlibKey, key_dirs: Iterable[Path]) -> CryptoSigner | None:
    """The signer for ``key`` if its private half is in one of ``key_dirs`` (else None: offline)."""
    for directory in key_dirs:
        path = Path(directory) / f"{key.keyid}.pem"
        if path.is_file():
            try:
                private = load_pem_private_key(path.read_bytes(), _passphrase())
            except (ValueError, TypeError) as exc:  # wrong/missing passphrase or not a key
                raise KeyLoadError(f"cannot load private key {path}: check {PASSPHRASE_ENV}") from exc
            return CryptoSigner(private, key)
    return None
