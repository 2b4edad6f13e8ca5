"""The ``edgecloud`` console script.

Each subcommand lives in the module that owns its feature and registers itself through a
``register(subparsers)`` function; this file only lists them, imported lazily so that
``edgecloud serve`` does not pay for the training tools or the benchmark.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command -> module with ``register(subparsers)``; one module may register several commands.
COMMAND_MODULES: tuple[str, ...] = (
    "edge.serve_cli",          # serve
    "edge.route_cli",          # route
    "edge.report_cli",         # sla, report
    "edge.cache_cli",          # cache (stats, purge, load-faq against a running gateway)
    "edge.knowledge.cli",      # knowledge (check a pack; load, status, search on a gateway)
    "cloud_bridge.diagnose",   # diagnose
    "models.cli",              # models (train-intent, eval-intent, store status)
    "models.fleet.cli",        # fleet (init, build, sign, publish, verify, rotate-keys)
    "bench.cli",               # bench
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edgecloud", description="Edge-cloud hybrid LLM gateway for kiosks.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # A feature module not built yet (or its optional extra not installed).
            if exc.name and name.startswith(exc.name):
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
