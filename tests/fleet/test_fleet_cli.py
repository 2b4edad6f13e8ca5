"""The operator workflow through the real ``edgecloud`` CLI: init with an offline root key and a 2-of-2
targets threshold, build, sign, publish, verify, canary roll-out, roll-back, key rotation; and the
device commands ``edgecloud models update/status``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from edge.cli import main

from .conftest import config_file, faq_pack, intent_files


def _keys_for(workspace: Path, role: str) -> list[str]:
    root = json.loads((workspace / "metadata" / "root.json").read_text())
    return root["signed"]["roles"][role]["keyids"]


def test_operator_workflow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws, usb, second, public = tmp_path / "ws", tmp_path / "usb", tmp_path / "second", tmp_path / "public"
    common = ["--workspace", str(ws)]
    assert main(["fleet", "init", *common, "--root-key-dir", str(usb), "--targets-keys", "2",
                 "--targets-threshold", "2", "--expiry", "timestamp=6h"]) == 0
    assert not list((ws / "keys").glob(f"{_keys_for(ws, 'root')[0]}.pem"))  # root key stays offline
    assert (usb / f"{_keys_for(ws, 'root')[0]}.pem").exists()
    # the second targets key belongs to another person
    second.mkdir()
    other = _keys_for(ws, "targets")[1]
    shutil.move(str(ws / "keys" / f"{other}.pem"), second / f"{other}.pem")

    src = tmp_path / "src"
    src.mkdir()
    intent = intent_files(src / "intent")[0].parent
    faq = faq_pack(src / "faq.json")
    cfg = config_file(src / "config.json")
    build = ["fleet", "build", *common, "--faq", str(faq), "--config", str(cfg), "--intent", str(intent)]
    assert main([*build, "--version", "1", "--label", "2026.12", "--channel", "canary"]) == 0
    capsys.readouterr()
    assert main(["fleet", "publish", *common, str(public)]) == 2  # 1 of 2 targets signatures
    assert "targets" in capsys.readouterr().err
    assert main(["fleet", "sign", *common, "targets", "--key-dir", str(second)]) == 0
    assert main(["fleet", "publish", *common, str(public)]) == 0
    assert main(["fleet", "verify", str(public)]) == 0
    out = capsys.readouterr().out
    assert "channel canary: kiosk v1" in out and "channel stable: empty" in out

    # the canary channel has v1, stable nothing: a stable device stays empty, a canary device installs
    root = public / "metadata" / "1.root.json"
    stable_dev, canary_dev = tmp_path / "stable-dev", tmp_path / "canary-dev"
    update = ["models", "update", "--repository", str(public), "--trusted-root", str(root), "--once",
              "--reserve-mb", "0"]
    assert main([*update, "--data-dir", str(stable_dev)]) == 0
    assert main([*update, "--data-dir", str(canary_dev), "--channel", "canary"]) == 0
    capsys.readouterr()
    assert main(["models", "status", "--data-dir", str(canary_dev)]) == 0
    assert json.loads(capsys.readouterr().out)["current"]["version"] == 1
    assert main(["models", "status", "--data-dir", str(stable_dev)]) == 0
    assert json.loads(capsys.readouterr().out)["current"] is None

    # promote to everyone, then roll back by re-releasing v1 as v3 after a bad v2
    keys = ["--key-dir", str(second)]
    assert main(["fleet", "promote", *common, *keys, "--channel", "stable", "--version", "1"]) == 0
    assert main([*build, *keys, "--version", "2", "--channel", "stable", "--channel", "canary"]) == 0
    assert main(["fleet", "rollback", *common, *keys, "--channel", "stable", "--to", "1"]) == 0
    assert main(["fleet", "publish", *common, *keys, str(public)]) == 0
    capsys.readouterr()
    assert main(["fleet", "channel", *common]) == 0
    listing = capsys.readouterr().out
    assert "stable: kiosk v3 (any, rollback-to-1)" in listing and "canary: kiosk v2" in listing
    assert main([*update, "--data-dir", str(stable_dev), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["installed"] == 3

    # root rotation needs the offline root key; the device follows the chain from its pinned v1
    usb2 = tmp_path / "usb2"
    assert main(["fleet", "rotate-keys", *common, "--role", "root", "--new-key-dir", str(usb2)]) == 0
    assert not list((ws / "keys").glob(f"{_keys_for(ws, 'root')[0]}.pem"))
    assert (usb2 / f"{_keys_for(ws, 'root')[0]}.pem").exists()
    capsys.readouterr()
    assert main(["fleet", "publish", *common, *keys, str(public)]) == 2  # new root lacks the old signature
    assert "root" in capsys.readouterr().err
    assert main(["fleet", "sign", *common, "root", "--key-dir", str(usb)]) == 0
    assert main(["fleet", "publish", *common, *keys, str(public)]) == 0
    assert main(["fleet", "verify", str(public)]) == 0
    assert main([*update, "--data-dir", str(stable_dev)]) == 0

    # verify catches a tampered artifact on the server
    served = next((public / "targets" / "bundles").rglob("*.faq.json"))
    served.unlink()
    served.write_text("{}")
    capsys.readouterr()
    assert main(["fleet", "verify", str(public)]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_build_refuses_to_overwrite_a_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = ["--workspace", str(tmp_path / "ws")]
    assert main(["fleet", "init", *ws]) == 0
    faq = faq_pack(tmp_path / "faq.json")
    assert main(["fleet", "build", *ws, "--faq", str(faq), "--version", "1"]) == 0
    capsys.readouterr()
    assert main(["fleet", "build", *ws, "--faq", str(faq), "--version", "1"]) == 2
    assert "immutable" in capsys.readouterr().err
