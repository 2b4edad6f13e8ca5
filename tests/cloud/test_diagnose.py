"""``edgecloud diagnose cloud`` against the fake cloud, and its findings from a known breakdown."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench.fake_cloud import FakeCloudHandle
from cloud_bridge import diagnose
from cloud_bridge.diagnose import PhaseStat, ProviderReport, findings

SECRET = "sk-diagnose-secret-424242"


def write_config(tmp_path: Path, handle: FakeCloudHandle, name: str = "fake") -> Path:
    path = tmp_path / "edgecloud.toml"
    verify = f'verify_tls = "{handle.ca_file}"\n' if handle.ca_file else ""
    path.write_text(f'[cloud]\n[[cloud.providers]]\nname = "{name}"\nbase_url = "{handle.base_url}"\n'
                    f'api_key = "{SECRET}"\nmodel = "m1"\n{verify}')
    return path


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="edgecloud")
    diagnose.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_diagnose_json_counts_429s(fake: FakeCloudHandle, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("EDGECLOUD_CLOUD_BASE_URL", "EDGECLOUD_CLOUD_API_KEY", "EDGECLOUD_CLOUD_MODEL", "EDGECLOUD_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    fake.set_fault("429", count=2, retry_after="0")
    rc = run_cli(["diagnose", "cloud", "--config", str(write_config(tmp_path, fake)), "--samples", "6", "--json"])
    out = capsys.readouterr().out
    assert rc == 0 and SECRET not in out
    report = json.loads(out)["providers"][0]
    assert report["name"] == "fake" and report["samples"] == 6
    assert report["ok"] == 4 and report["rate_limited"] == 2 and report["errors"] == {"rate_limited": 2}
    assert fake.state.chat_attempts == 6  # retries are off while diagnosing
    assert report["phases"]["first_token"]["n"] == 4 and report["tokens_per_s"] is not None
    assert any("rate limit" in f for f in report["findings"])
    assert fake.state.last_headers["authorization"] == f"Bearer {SECRET}"


def test_diagnose_table_over_http2(fake_h2: FakeCloudHandle, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    rc = run_cli(["diagnose", "cloud", "--config", str(write_config(tmp_path, fake_h2)), "--samples", "3",
                  "--fresh-connections"])
    out = capsys.readouterr().out
    assert rc == 0 and SECRET not in out
    assert "HTTP/2" in out and "TLS handshake" in out and "findings:" in out
    assert fake_h2.state.connections == 3


def test_diagnose_errors_and_bad_provider(fake: FakeCloudHandle, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    fake.config.api_key = "sk-other"
    config = str(write_config(tmp_path, fake))
    assert run_cli(["diagnose", "cloud", "--config", config, "--samples", "2"]) == 1
    out = capsys.readouterr().out
    assert "authentication failed" in out and SECRET not in out
    assert run_cli(["diagnose", "cloud", "--config", config, "--provider", "nope"]) == 2


def _report(**phases: float | None) -> ProviderReport:
    report = ProviderReport(name="p", base_url="https://api.example.com/v1", model="m", samples=20, ok=20,
                            http_version="HTTP/2")
    report.phases = {k: PhaseStat(v, v, 1) for k, v in phases.items()}
    return report


def test_findings_in_plain_language() -> None:
    far = _report(connect=180.0, tls=190.0)
    far.cold = {"dns": 20.0, "connect": 200.0, "tls": 400.0, "total": 1000.0}
    far.ttft_p50_ms, far.ttft_p99_ms = 400.0, 2000.0
    text = " ".join(findings(far))
    assert "connect is 62% of the time" in text and "nearer region" in text
    assert "TTFT P99 is 5.0x P50" in text
    assert "round trip is about 180 ms" in text
    healthy = _report(connect=5.0, tls=6.0)
    healthy.cold = {"dns": 1.0, "connect": 5.0, "tls": 6.0, "total": 500.0}
    healthy.ttft_p50_ms, healthy.ttft_p99_ms = 300.0, 450.0
    healthy.tokens_per_s = 60.0
    assert findings(healthy)[0].startswith("no problem found")
    limited = _report()
    limited.rate_limited, limited.errors, limited.ok = 5, {"rate_limited": 5}, 15
    assert any("rate limit" in f for f in findings(limited))
