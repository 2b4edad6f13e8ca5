"""Small behaviours: schema validation, journal robustness, metrics, progress bar, secret redaction."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from models.fleet.agent import redact_url
from models.fleet.bundle import ArtifactInfo, BundleError, ChannelManifest
from models.fleet.device_cli import ProgressBar
from models.store import ModelStore, write_bundle_file

from .conftest import Operator, make_agent, run_cycle
from .rangeserver import RangeServer


def _custom(**overrides: object) -> dict:
    base = {"bundle": "kiosk", "version": 3, "label": "x", "kind": "faq", "hardware": "any",
            "min_agent_version": "0.1.0", "file_name": "faq.json"}
    return {"edgecloud": {**base, **overrides}}


@pytest.mark.parametrize("bad", [
    {"file_name": "../../etc/passwd"}, {"file_name": "a/b"}, {"kind": "shell"}, {"hardware": "../x"},
    {"version": 0}, {"version": True}, {"min_agent_version": "one"}, {"bundle": "Kiosk!"},
])
def test_custom_metadata_is_validated(bad: dict) -> None:
    with pytest.raises(BundleError):
        ArtifactInfo.from_custom(_custom(**bad))
    assert ArtifactInfo.from_custom(_custom()).version == 3


def test_manifest_rejects_garbage() -> None:
    with pytest.raises(BundleError):
        ChannelManifest.from_bytes(b'{"channel": "stable", "bundles": [{"version": "x"}]}')
    with pytest.raises(BundleError):
        ChannelManifest.from_bytes(b"not json")


def test_journal_survives_a_torn_line(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    store.record("active", version=1)
    with open(store.journal_path, "a") as fh:
        fh.write('{"event": "activ')  # power cut mid-write
    store.record("staged", version=2)
    assert [e["event"] for e in store.journal()] == ["active", "staged"]


def test_recover_when_current_points_at_a_missing_version(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    for version in (1, 2):
        d = store.staging_path(version)
        (d / "faq").mkdir()
        (d / "faq" / "faq.json").write_text("{}")
        write_bundle_file(d, {"version": version, "label": f"v{version}",
                              "artifacts": [{"kind": "faq", "file_name": "faq.json"}]})
        store.install(version)
        store.begin_activation(version)
        store.switch_to(version)
        store.commit_activation(version)
    assert (store.current_version(), store.previous_version()) == (2, 1)
    (store.versions_dir / "2" / "faq" / "faq.json").unlink()  # disk corruption
    store.recover()
    assert store.current_version() == 1 and store.current() is not None


def test_progress_bar_only_on_a_tty() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        bar = ProgressBar(stream)
        for done in (0, 50, 100):
            bar({"bytes_done": done * 10_000, "bytes_total": 1_000_000, "target": "x"})
    assert "100%" in tty.getvalue() and "50%" in tty.getvalue()
    assert pipe.getvalue() == ""


def test_repository_credentials_are_redacted() -> None:
    assert redact_url("https://user:s3cret@cdn.example.com:8443/fleet") == "https://***@cdn.example.com:8443/fleet"
    assert redact_url("https://cdn.example.com/fleet") == "https://cdn.example.com/fleet"


def test_metrics_follow_the_installed_version(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    operator.release(1)
    agent = make_agent(operator, server, tmp_path / "device")
    run_cycle(agent)
    run_cycle(agent)
    text = generate_latest(agent.metrics_registry).decode()
    assert "edgecloud_model_bundle_version 1.0" in text
    assert 'edgecloud_model_updates_total{result="updated"} 1.0' in text
    assert 'edgecloud_model_updates_total{result="up_to_date"} 1.0' in text
    assert "edgecloud_model_update_in_progress 0.0" in text
    status = json.dumps(agent.status())
    assert "pem" not in status


def test_keys_encrypted_with_passphrase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from models.fleet.keys import PASSPHRASE_ENV, KeyLoadError
    from models.fleet.repo import FleetRepository

    monkeypatch.setenv(PASSPHRASE_ENV, "correct horse battery staple")
    repo = FleetRepository(tmp_path / "ws")
    repo.init()
    pems = list((tmp_path / "ws" / "keys").glob("*.pem"))
    assert pems and all(b"ENCRYPTED PRIVATE KEY" in p.read_bytes() for p in pems)
    faq = tmp_path / "faq.json"
    faq.write_text("{}")
    repo.build(version=1, artifacts={"faq": [faq]})
    repo.publish(tmp_path / "public")
    before = repo.targets().version
    monkeypatch.setenv(PASSPHRASE_ENV, "wrong")
    with pytest.raises(KeyLoadError):
        repo.build(version=2, artifacts={"faq": [faq]})
    assert repo.targets().version == before  # nothing half-written
    monkeypatch.setenv(PASSPHRASE_ENV, "correct horse battery staple")
    repo.build(version=2, artifacts={"faq": [faq]})


def test_verify_flags_any_edit_of_served_metadata(operator: Operator) -> None:
    """Signatures tolerate some edits (upper-case hex in a signature verifies the same); an operator
    still wants to know the served files were touched."""
    import re

    from models.fleet.verify import verify_published

    operator.release(1)
    assert verify_published(operator.public).ok
    path = operator.public / "metadata" / "timestamp.json"
    text = path.read_text()
    sig = re.search(r'"sig": "([0-9a-f]+)"', text).group(1)
    i = next(k for k, c in enumerate(sig) if c in "abcdef")
    path.write_text(text.replace(sig, sig[:i] + sig[i].upper() + sig[i + 1:]))
    report = verify_published(operator.public)
    assert not report.ok and any("timestamp.json" in line and "FAIL" in line for line in report.lines)
