"""The attacks TUF names, against a repository built by the operator tools and served over HTTP.

Every refused update must leave the device on its installed version with the reason in the status.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from tuf.api.metadata import Metadata

from models.fleet.bundle import manifest_path

from .conftest import Operator, make_agent, run_cycle
from .rangeserver import RangeServer


def _install_v1(operator: Operator, server: RangeServer, tmp_path: Path):
    operator.release(1)
    agent = make_agent(operator, server, tmp_path / "device")
    result = run_cycle(agent)
    assert result.status == "updated", result
    assert agent.store.current_version() == 1
    return agent


def _newest(public: Path, role: str) -> Path:
    files = sorted((public / "metadata").glob(f"*.{role}.json"), key=lambda p: int(p.name.split(".")[0]))
    return files[-1]


def test_good_update_then_up_to_date(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    agent = _install_v1(operator, server, tmp_path)
    current = agent.store.current()
    assert current is not None and current.label == "v1"
    assert set(current.artifacts) == {"faq", "config", "intent"}
    assert current.artifacts["intent"].suffix == ".onnx" and current.artifacts["intent"].is_file()
    assert run_cycle(agent).status == "up_to_date"
    operator.release(2)
    assert run_cycle(agent).status == "updated"
    assert agent.store.current_version() == 2 and agent.store.previous_version() == 1
    status = agent.status()
    assert status["installed"]["version"] == 2 and status["previous"]["version"] == 1
    assert status["last_result"]["status"] == "updated" and status["last_error"] is None


def test_tampered_target_is_refused(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    agent = _install_v1(operator, server, tmp_path)
    operator.release(2)
    faq = next((operator.public / "targets" / "bundles" / "kiosk" / "2").rglob("*.faq.json"))
    data = bytearray(faq.read_bytes())
    data[10] ^= 0x01  # same length, one bit flipped
    faq.unlink()  # it is a hard link into the workspace store: replace, do not edit in place
    faq.write_bytes(bytes(data))
    result = run_cycle(agent)
    assert result.status == "failed"
    assert "hash does not match" in result.reason
    assert agent.store.current_version() == 1
    assert not list((agent.store.staging_dir / "2").rglob("*.part"))


def test_bad_signature_is_refused(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    agent = _install_v1(operator, server, tmp_path)
    operator.release(2)
    path = _newest(operator.public, "targets")
    body = json.loads(path.read_bytes())
    for target in body["signed"]["targets"].values():
        target["custom"]["edgecloud"]["hardware"] = "any"
        target["custom"]["edgecloud"]["min_agent_version"] = "0.0.1"  # changed after signing
    path.write_text(json.dumps(body))
    result = run_cycle(agent)
    assert result.status == "failed"
    assert result.error_type == "UnsignedMetadataError"
    assert agent.store.current_version() == 1


def test_missing_signature_is_refused(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    agent = _install_v1(operator, server, tmp_path)
    operator.release(2)
    path = _newest(operator.public, "channel-stable")
    body = json.loads(path.read_bytes())
    body["signatures"] = []
    path.write_text(json.dumps(body))
    result = run_cycle(agent)
    assert result.status == "failed" and result.error_type == "UnsignedMetadataError"
    assert agent.store.current_version() == 1


def test_too_few_signatures_for_threshold(tmp_path: Path) -> None:
    from models.fleet.repo import FleetError, FleetRepository

    from .conftest import Operator, run_cycle

    offline = tmp_path / "second-holder"
    repo = FleetRepository(tmp_path / "ws")
    repo.init(targets_keys=2, targets_threshold=2)
    # move one targets key away: it belongs to a second person
    targets_keyids = repo.root().roles["targets"].keyids
    offline.mkdir()
    for name in (f"{targets_keyids[1]}.pem",):
        shutil.move(str(tmp_path / "ws" / "keys" / name), offline / name)
    op = Operator(repo, tmp_path, tmp_path / "public")
    op.release(1, publish=False)
    try:
        repo.publish(op.public)
        raise AssertionError("publish must refuse targets with 1 of 2 signatures")
    except FleetError as exc:
        assert "targets" in str(exc) and "1/2" in str(exc)
    assert repo.sign("targets", [offline]).ok
    repo.publish(op.public)
    with RangeServer(op.public) as srv:
        # a device accepts the 2-of-2 repository ...
        agent = make_agent(op, srv, tmp_path / "device")
        assert run_cycle(agent).status == "updated"
        # ... and refuses one where a signature was dropped on the way
        repo.key_dirs.append(offline)  # both holders sign v2
        op.release(2)
        path = _newest(op.public, "targets")
        body = json.loads(path.read_bytes())
        body["signatures"] = body["signatures"][:1]
        path.write_text(json.dumps(body))
        result = run_cycle(agent)
        assert result.status == "failed" and result.error_type == "UnsignedMetadataError"
        assert agent.store.current_version() == 1


def test_replayed_old_metadata_is_refused(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    operator.release(1)
    old = tmp_path / "old-public"
    shutil.copytree(operator.public, old)
    agent = make_agent(operator, server, tmp_path / "device")
    operator.release(2)
    assert run_cycle(agent).status == "updated"
    server.root = old  # an attacker (or a stale mirror) serves the older, validly signed repository
    result = run_cycle(agent)
    assert result.status == "failed"
    assert result.error_type == "BadVersionNumberError"
    assert agent.store.current_version() == 2


def test_older_or_equal_bundle_version_is_not_installed(
    operator: Operator, server: RangeServer, tmp_path: Path
) -> None:
    operator.release(3)
    agent = make_agent(operator, server, tmp_path / "device")
    assert run_cycle(agent).status == "updated"
    operator.release(2)  # fresh, valid metadata that offers an older bundle
    result = run_cycle(agent)
    assert result.status == "up_to_date" and "offered version 2, installed 3" in result.reason
    operator.repo.promote("stable", 3)
    operator.repo.publish(operator.public)
    assert run_cycle(agent).status == "up_to_date"
    assert agent.store.current_version() == 3


def test_expired_metadata_is_refused(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    operator.release(1, publish=False)
    operator.repo.publish(operator.public, timestamp_expiry="1s")
    time.sleep(2.1)  # a frozen mirror keeps serving this timestamp after it expired
    agent = make_agent(operator, server, tmp_path / "device")
    result = run_cycle(agent)
    assert result.status == "failed" and result.error_type == "ExpiredMetadataError"
    assert agent.store.current_version() is None


def test_endless_data_is_cut_at_declared_length(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    agent = _install_v1(operator, server, tmp_path)
    operator.release(2)
    server.faults.endless.add(".config.json")
    result = run_cycle(agent)
    assert result.status == "failed" and "more than" in result.reason
    assert agent.store.current_version() == 1
    staged = list((agent.store.staging_dir / "2").rglob("config.json*"))
    assert all(p.stat().st_size <= 100_000 for p in staged)


def test_hardware_and_agent_version_must_match(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    operator.release(1, hardware="jetson-orin-nx-16gb")
    other = make_agent(operator, server, tmp_path / "other", hardware="raspberry-pi-5")
    assert run_cycle(other).status == "up_to_date" and other.store.current_version() is None
    jetson = make_agent(operator, server, tmp_path / "jetson", hardware="jetson-orin-nx-16gb")
    assert run_cycle(jetson).status == "updated"
    operator.release(2, hardware="jetson-orin-nx-16gb", min_agent_version="9.0.0")
    result = run_cycle(jetson)
    assert result.status == "failed" and "needs agent 9.0.0" in result.reason
    assert jetson.store.current_version() == 1


def test_manifest_cannot_name_unsigned_targets(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    """The channel key can only point at artifacts the targets key signed."""
    operator.release(1)
    ws = operator.repo
    target = ws.targets("channel-stable").targets[manifest_path("stable")]
    assert target.length > 0
    md = Metadata.from_bytes(_newest(operator.public, "channel-stable").read_bytes())
    assert md.signed.delegations is None  # channels cannot delegate further


def test_root_key_rotation(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    agent = _install_v1(operator, server, tmp_path)
    old_root_keys = set(operator.repo.root().roles["root"].keyids)
    operator.repo.rotate_keys("root")
    operator.repo.rotate_keys("targets")
    assert set(operator.repo.root().roles["root"].keyids).isdisjoint(old_root_keys)
    assert operator.repo.root().version == 3
    operator.release(2)
    result = run_cycle(agent)  # the device only pins root v1: it walks v2 and v3
    assert result.status == "updated", result
    assert (agent.data_dir / "tuf" / "metadata" / "root_history" / "3.root.json").exists()
    # root v2 must carry the old root's signatures: drop them and a fresh device refuses the chain
    body = json.loads((operator.public / "metadata" / "2.root.json").read_bytes())
    body["signatures"] = [s for s in body["signatures"] if s["keyid"] not in old_root_keys]
    (operator.public / "metadata" / "2.root.json").write_text(json.dumps(body))
    fresh = make_agent(operator, server, tmp_path / "fresh")
    result = run_cycle(fresh)
    assert result.status == "failed" and result.error_type == "UnsignedMetadataError"
