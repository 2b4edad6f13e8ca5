"""Device commands: ``edgecloud models update`` and ``edgecloud models status``.

``update --once`` is what the Jetson setup script runs to install the first bundle, through exactly
the same TUF path, checks and store as the in-gateway agent. Without ``--once`` it runs as its own
service (checking on a schedule). Also runnable as ``python -m models.fleet.device_cli`` (the crash
tests SIGKILL that process at chosen steps).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from models.store import ModelStore

if TYPE_CHECKING:  # the agent pulls in tuf and its crypto: imported when a command runs, not at
    # `edgecloud serve`, whose parser registers these commands too (-200 ms at start-up)
    from models.fleet.agent import UpdateAgent, UpdateResult

EXIT_CODES = {"updated": 0, "up_to_date": 0, "skipped": 3, "failed": 1, "rolled_back": 2}


class ProgressBar:
    """A one-line progress bar on a TTY (nothing on a pipe: logs stay clean)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.enabled = stream.isatty()
        self._last = -1

    def __call__(self, progress: dict[str, Any]) -> None:
        if not self.enabled or not progress.get("bytes_total"):
            return
        done, total = progress["bytes_done"], progress["bytes_total"]
        pct = int(100 * done / total)
        if pct == self._last:
            return
        self._last = pct
        bar = "#" * (pct // 4) + "-" * (25 - pct // 4)
        self.stream.write(f"\r[{bar}] {pct:3d}% {done / 1e6:8.1f}/{total / 1e6:.1f} MB")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def add_update_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repository", required=True, help="base URL or directory of the published repository")
    parser.add_argument("--trusted-root", required=True, type=Path, help="root.json pinned at install time")
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--hardware", default="any", help="e.g. jetson-orin-nx-16gb")
    parser.add_argument("--channel", default="stable")
    parser.add_argument("--once", action="store_true", help="one check, then exit (set-up scripts, cron)")
    parser.add_argument("--interval", type=float, default=3600.0, help="seconds between checks (service mode)")
    parser.add_argument("--jitter", type=float, default=600.0)
    parser.add_argument("--reserve-mb", type=int, default=512, help="disk space to leave free")
    parser.add_argument("--metrics-textfile", type=Path, help="write Prometheus metrics here after each check "
                        "(node_exporter textfile collector)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _agent(args: argparse.Namespace) -> UpdateAgent:
    from models.fleet.agent import AGENT_VERSION, UpdateAgent

    return UpdateAgent(
        data_dir=args.data_dir,
        repository_url=args.repository,
        trusted_root=args.trusted_root,
        hardware=args.hardware,
        channel=args.channel,
        agent_version=AGENT_VERSION,
        check_interval_s=args.interval,
        check_jitter_s=args.jitter,
        reserve_bytes=args.reserve_mb * 1024 * 1024,
        progress_callback=ProgressBar(sys.stderr),
    )


def _report(agent: UpdateAgent, result: UpdateResult, args: argparse.Namespace) -> None:
    if args.metrics_textfile:
        from prometheus_client import write_to_textfile

        write_to_textfile(str(args.metrics_textfile), agent.metrics_registry)
    if args.json:
        print(json.dumps(result.to_dict(), sort_keys=True))
    else:
        print(f"{result.status}: {result.reason} (installed: {result.installed})")


async def _service(agent: UpdateAgent, args: argparse.Namespace) -> int:
    """Own-service mode (no gateway in this process): check, report, sleep interval + jitter."""
    while True:
        result = await agent.check_and_apply()
        _report(agent, result, args)
        await asyncio.sleep(args.interval + random.uniform(0, args.jitter))


def cmd_update(args: argparse.Namespace) -> int:
    agent = _agent(args)
    if not args.once:
        return asyncio.run(_service(agent, args))
    result = asyncio.run(agent.check_and_apply())
    _report(agent, result, args)
    return EXIT_CODES.get(result.status, 1)


def cmd_status(args: argparse.Namespace) -> int:
    store = ModelStore(args.data_dir)
    print(json.dumps(store.status(), indent=2, sort_keys=True, default=str))
    return 0


def register(models_subparsers: argparse._SubParsersAction) -> None:
    """Called by ``models/cli.py`` with the ``edgecloud models`` sub-parsers."""
    update = models_subparsers.add_parser("update", help="install the newest signed bundle (TUF)")
    add_update_arguments(update)
    update.set_defaults(func=cmd_update)
    status = models_subparsers.add_parser("status", help="installed/previous versions and update history")
    status.add_argument("--data-dir", required=True, type=Path)
    status.set_defaults(func=cmd_status)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="edgecloud models")
    sub = parser.add_subparsers(dest="models_command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
