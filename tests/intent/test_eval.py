"""eval-intent: the report's sections, the JSON, the console script, and the shipped model's quality."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from models import cli as models_cli
from models.intent.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "models" / "intent" / "data"
KIOSK_TEST = DATA / "kiosk_test.jsonl"
# the shipped card's ``thresholds.chosen_on``, as its training command names them (docs/intent.md)
SPLIT_FILES = (DATA / "threshold", KIOSK_TEST, DATA / "heldout", DATA / "heldout_v15", DATA / "heldout_v16",
               DATA / "heldout_v17", DATA / "heldout_v17" / "second_zh")
SECTIONS = ("== accuracy ==", "== per label ==", "== confusion matrix", "== per language ==",
            "== latency per request", "P50", "P99")


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    models_cli.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_eval_prints_sections_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    assert _run(["models", "eval-intent", "--data", str(KIOSK_TEST), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for section in SECTIONS:
        assert section in text
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["data"]["rows"] == len(KIOSK_TEST.read_text(encoding="utf-8").splitlines())
    assert set(report["overall"]["per_label"]) == {"simple", "complex"}
    assert {"en", "zh", "mixed"} <= set(report["per_language"])
    assert report["latency"]["n"] == report["data"]["rows"]
    assert report["latency"]["p50_ms"] <= report["latency"]["p99_ms"]
    matrix = report["overall"]["confusion"]["matrix"]
    assert sum(map(sum, matrix)) == report["data"]["rows"]


def test_shipped_model_generalises_to_hand_written_kiosk_requests() -> None:
    """The hand-written test set is never trained on. With the card's confidence threshold (what the
    policy applies), complex requests must reach the cloud: at most two of its 96 kept on the device (the
    models of rounds v27, v31 and v37 keep two, "Draft a press release …" and "Is free will compatible with
    determinism?", where round v25's kept one; docs/intent.md, rounds v26 and v27)."""
    report = evaluate([KIOSK_TEST])
    assert report["overall"]["accuracy"] >= 0.93
    assert report["routing_all"]["n_complex"] == 96
    assert report["routing_all"]["complex_kept_on_edge"] <= 2


def test_the_cut_keeps_the_recall_constraint_on_its_split() -> None:
    """The card's routing cut, applied as the policy applies it, keeps complex recall of at least 0.99 on
    the threshold split it was chosen on (the trainer holds 0.995 there), so the router and the card agree."""
    report = evaluate([*SPLIT_FILES])
    assert report["routing_all"]["n_complex"] > 1000
    assert report["routing_all"]["complex_to_cloud"] >= 0.99


def test_console_script(tmp_path: Path) -> None:
    exe = ROOT / ".venv" / "bin" / "edgecloud"
    if not exe.exists():
        pytest.skip("console script not installed (pip install -e .)")
    out = tmp_path / "r.json"
    proc = subprocess.run([str(exe), "models", "eval-intent", "--data", str(KIOSK_TEST), "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "== confusion matrix" in proc.stdout
    assert json.loads(out.read_text())["overall"]["n"] > 0
    help_text = subprocess.run([str(exe), "models", "--help"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout
    assert "train-intent" in help_text and "eval-intent" in help_text


def test_dev_split_of_shipped_routing_data(routing_data: Path) -> None:
    report = evaluate([routing_data], split="dev")
    assert report["data"]["skipped_multi_turn"] > 0
    assert report["overall"]["accuracy"] >= 0.9
    # Complex requests reach the cloud as deployed (the card's routing cut). The label's own cut is the most
    # accurate one on the threshold split, above the routing cut, so its recall alone says less.
    assert report["routing"]["complex_to_cloud"] >= 0.98
    assert {"en", "zh"} <= set(report["per_language"])


def test_bad_input_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    assert _run(["models", "eval-intent", "--data", str(empty)]) == 2
    assert "no rows" in capsys.readouterr().err


def test_rows_the_model_may_have_read_are_left_out_and_counted(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """--seen-data reads training paths the way training does (a folder's *_test.jsonl is skipped) and
    drops the single-turn rows whose normalised text is there; conversations are routed by rule and stay."""
    rows = [
        {"text": "Where is the restroom?", "label": "simple", "lang": "en"},
        {"text": "Prove that the square root of 2 is irrational.", "label": "complex", "lang": "en"},
        {"text": "What time does the pool open?", "label": "simple", "lang": "en"},
        {"text": "ok thanks", "label": "complex", "lang": "en",
         "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                      {"role": "user", "content": "ok thanks"}]},
    ]
    held = tmp_path / "held" / "set_test.jsonl"
    held.parent.mkdir()
    held.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    train = tmp_path / "train"
    train.mkdir()
    (train / "a.jsonl").write_text(json.dumps({"text": "where is the restroom", "label": "simple"}) + "\n"
                                   + json.dumps({"text": "ok thanks", "label": "simple"}) + "\n", encoding="utf-8")
    (train / "b_test.jsonl").write_text(json.dumps({"text": "What time does the pool open?", "label": "simple"})
                                        + "\n", encoding="utf-8")
    out = tmp_path / "r.json"
    assert _run(["models", "eval-intent", "--data", str(held.parent), "--seen-data", str(train),
                 "--json", str(out)]) == 0
    assert "1 rows left out: their text is also in the training data given (1 files)" in capsys.readouterr().out
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["data"]["left_out_seen"] == 1
    assert report["data"]["rows"] == 2 and report["data"]["multi_turn_rows"] == 1
    assert report["routing_all"]["n"] == 3
    without = evaluate([held.parent])
    assert without["data"]["left_out_seen"] == 0 and without["data"]["rows"] == 3
