"""The CLI's missing-extra line, in process: checked before the command runs, and for late imports too."""

from __future__ import annotations

import argparse

import pytest

from edge import cli
from models import extras


def test_a_missing_extra_stops_the_command_before_it_runs(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    monkeypatch.setitem(extras.EXTRA_MODULES, "train", ("sklearn", "no_such_module_for_edgecloud"))
    out = tmp_path / "out"
    code = cli.main(["models", "train-intent", "--data", str(tmp_path / "x.jsonl"), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "edgecloud models train-intent needs the 'train' extra (no_such_module_for_edgecloud not installed)" in err
    assert "pip install 'edgecloud[train]'" in err


def test_a_late_import_of_an_extra_module_gets_the_same_line(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    def needs_matplotlib(args: argparse.Namespace) -> int:
        raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib.pyplot")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda *_: parser)
    args = parser.parse_args(["report"])
    monkeypatch.setattr(parser, "parse_args", lambda argv=None: argparse.Namespace(**{**vars(args),
                                                                                      "func": needs_matplotlib}))
    assert cli.main(["report"]) == 2
    assert "needs the 'bench' extra (matplotlib not installed)" in capsys.readouterr().err


def test_an_unrelated_missing_module_is_not_disguised(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(args: argparse.Namespace) -> int:
        raise ModuleNotFoundError("No module named 'edge.gone'", name="edge.gone")

    parser = cli.build_parser()
    args = parser.parse_args(["report"])
    monkeypatch.setattr(cli, "build_parser", lambda *_: parser)
    monkeypatch.setattr(parser, "parse_args", lambda argv=None: argparse.Namespace(**{**vars(args), "func": broken}))
    with pytest.raises(ModuleNotFoundError):
        cli.main(["report"])
