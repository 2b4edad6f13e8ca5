"""``bench.grammar_check`` runs on the embedded model and writes its report (figures never asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.grammar_check import main


def test_smoke_run_writes_the_three_figures(tmp_path: Path, embedded_model: Path, capsys) -> None:
    out = tmp_path / "grammar.json"
    assert main(["--repeat", "3", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["n_vocab"] > 1000
    for key in ("mask_every_token_ms", "check_one_token_ms", "decode_step_ms"):
        assert report[key] > 0
    assert "mask every token" in capsys.readouterr().out
