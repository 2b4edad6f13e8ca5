"""``bench.intent_features`` runs and writes its report (figures are the benchmark's, never asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.intent_features import main


def test_smoke_run_writes_every_side(tmp_path: Path, capsys) -> None:
    out = tmp_path / "features.json"
    assert main(["--repeat", "1", "--limit", "40", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["texts"] == 40
    for side in ("specification", "python", "featurize"):
        assert 0 < report[side]["p50_us"] <= report[side]["p99_us"] <= report[side]["max_us"]
    assert report["median_ratio"] > 0 and report["against_python"]["median_ratio"] > 0
    assert report["implementation"] == "C"
    for side in ("specification", "python", "cue_tokens"):
        assert 0 < report["cues"][side]["p50_us"] <= report["cues"][side]["p99_us"]
    printed = capsys.readouterr().out
    assert "featurize / specification" in printed and "cue_tokens / specification" in printed
