"""The ``edgecloud`` console script.

Each subcommand lives in the module that owns its feature and registers itself through a
``register(subparsers)`` function; this file only lists them, imported lazily so that
``edgecloud serve`` does not pay for the training tools or the benchmark.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from models.extras import MISSING_EXTRA_STATUS, MissingExtra, extra_providing, missing_extra_message, require_extra

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


def _command_name(args: argparse.Namespace) -> str:
    words = ["edgecloud", args.command]
    for key in ("sla_command", "cache_command", "models_command", "fleet_command", "bench_command"):
        value = getattr(args, key, None)
        if isinstance(value, str):
            words.append(value)
    return " ".join(words)


def main(argv: list[str] | None = None) -> int:
    """Run one command; a missing optional extra ends in one line naming it (status 2), not a traceback."""
    parser = build_parser()
    args = parser.parse_args(argv)
    what = _command_name(args)
    try:
        extra = getattr(args, "needs_extra", None)
        if extra:
            require_extra(extra, what)
        result = args.func(args)
    except MissingExtra as exc:
        sys.stderr.write(f"error: {exc.message}\n")
        return exc.code if isinstance(exc.code, int) else MISSING_EXTRA_STATUS
    except ModuleNotFoundError as exc:
        extra = extra_providing(exc.name)
        if extra is None:
            raise
        top = str(exc.name).split(".", 1)[0]
        sys.stderr.write(f"error: {missing_extra_message(extra, [top], what)}\n")
        return MISSING_EXTRA_STATUS
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
