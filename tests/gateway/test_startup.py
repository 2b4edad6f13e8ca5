"""Start-up stays lean: `edgecloud serve` builds its parser without importing the update agent's tuf and
crypto (updates are off by default), and the edge benchmark's measuring helpers hold their definitions."""

from __future__ import annotations

import subprocess
import sys

from bench.edge_overhead import _measure, summarize


def test_building_the_cli_does_not_import_the_update_agent() -> None:
    code = (
        "import sys, edge.cli; edge.cli.build_parser(); "
        "heavy = [m for m in ('tuf', 'securesystemslib', 'cryptography', 'models.fleet.agent', 'wsproto') "
        "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_edge_overhead_measures_ttft_and_decode_rate() -> None:
    assert _measure(10.0, None, None, 0) == (None, None)  # no token: nothing to count
    ttft, rate = _measure(10.0, 10.05, 11.05, 21)
    assert abs(ttft - 50.0) < 1e-6 and abs(rate - 20.0) < 1e-6  # 20 tokens after the first, in 1 s
    assert _measure(10.0, 10.05, 10.05, 1)[1] is None  # one token: no rate
    s = summarize([30.0, 10.0, 20.0], [50.0, 70.0])
    assert s["ttft_ms_p50"] == 20.0 and s["ttft_ms_max"] == 30.0 and s["decode_tps_min"] == 50.0


def test_every_command_is_registered_by_the_module_the_cli_names() -> None:
    import argparse

    from edge import cli

    def commands(parser: argparse.ArgumentParser) -> set[str]:
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return set(sub.choices)

    assert commands(cli.build_parser()) == set(cli.COMMANDS)
    for command in cli.COMMANDS:
        assert command in commands(cli.build_parser(command)), command


def test_one_command_imports_only_its_own_module() -> None:
    code = (
        "import sys, edge.cli; edge.cli.build_parser('route'); "
        "others = [m for m in edge.cli.COMMAND_MODULES if m != 'edge.route_cli' and m in sys.modules]; "
        "heavy = [m for m in ('fastapi', 'onnxruntime', 'numpy') if m in sys.modules]; "
        "print(others, heavy); sys.exit(1 if others or heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
