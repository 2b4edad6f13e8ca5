"""The ``edgecloud`` console script.

Each subcommand lives in the module that owns its feature and registers itself through a
``register(subparsers)`` function; this file only lists them, imported lazily: a command imports
only the module that registers it (``edgecloud route --help`` answers in a fifth of a second, not
the second and more that importing every command's module costs), and only ``edgecloud`` alone or
``edgecloud --help`` imports them all to list them.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from models.extras import MISSING_EXTRA_STATUS, MissingExtra, extra_providing, missing_extra_message, require_extra

# command -> the module whose ``register(subparsers)`` adds it (a test checks that each one does).
COMMANDS: dict[str, str] = {
    "serve": "edge.serve_cli",
    "route": "edge.route_cli",
    "sla": "edge.report_cli",
    "report": "edge.report_cli",
    "cache": "edge.cache_cli",                # stats, purge, load-faq against a running gateway
    "knowledge": "edge.knowledge.cli",        # check a pack; load, status, search on a gateway
    "diagnose": "cloud_bridge.diagnose",
    "models": "models.cli",                   # train-intent, eval-intent, store status
    "fleet": "models.fleet.cli",              # init, build, sign, publish, verify, rotate-keys
    "bench": "bench.cli",
}
COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(COMMANDS.values()))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``command`` alone when it is a known one, else of every command."""
    parser = argparse.ArgumentParser(prog="edgecloud", description="Edge-cloud hybrid LLM gateway for kiosks.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in (COMMANDS[command],) if command in COMMANDS else COMMAND_MODULES:
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
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(words[0] if words else None)
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
