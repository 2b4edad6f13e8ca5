"""Operator commands: ``edgecloud fleet init|build|sign|publish|verify|rotate-keys|channel|promote|rollback``.

Every command works on a workspace directory (``--workspace``, default ``./fleet``) that holds the
keys and the signed metadata; ``publish`` writes the static repository that a web server, S3 bucket
or CDN serves to the kiosks. See docs/fleet.md for the whole operator workflow.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from models.fleet.bundle import KINDS, BundleError

if TYPE_CHECKING:
    from models.fleet.repo import FleetRepository

Command = Callable[[argparse.Namespace], int]


def _repo(args: argparse.Namespace, must_exist: bool = True) -> FleetRepository:
    # imported lazily: `edgecloud --help` must not pay for python-tuf
    from models.fleet.repo import FleetRepository, require_workspace

    if must_exist:
        require_workspace(args.workspace)
    return FleetRepository(args.workspace, key_dirs=args.key_dir or ())


def _expiry_pairs(values: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or []:
        role, _, duration = item.partition("=")
        out[role.strip()] = duration.strip()
    return out


def cmd_init(args: argparse.Namespace) -> int:
    repo = _repo(args, must_exist=False)
    repo.init(
        bundle_name=args.bundle,
        root_keys=args.root_keys,
        root_threshold=args.root_threshold,
        targets_keys=args.targets_keys,
        targets_threshold=args.targets_threshold,
        root_key_dir=args.root_key_dir,
        channels=args.channel or ("stable", "canary"),
        expiry=_expiry_pairs(args.expiry),
    )
    print(f"initialised {args.workspace}: root v1, channels {', '.join(repo.channels())}")
    print(f"pin this root on every device: {args.workspace / 'metadata' / 'root_history' / '1.root.json'}")
    _print_signatures(repo)
    return 0


def _print_signatures(repo: FleetRepository) -> None:
    for status in repo.unsigned_roles():
        print(f"  {status.role} v{status.version}: {status.have}/{status.need} signatures; "
              f"run `edgecloud fleet sign {status.role} --key-dir DIR` with the missing keys")


def cmd_build(args: argparse.Namespace) -> int:
    repo = _repo(args)
    artifacts: dict[str, list[Path]] = {}
    for kind in KINDS:
        value: Path | None = getattr(args, kind)
        if value is None:
            continue
        if kind == "intent" and value.is_dir():
            artifacts[kind] = sorted(p for p in value.iterdir() if p.is_file() and p.suffix in (".onnx", ".json"))
        else:
            artifacts[kind] = [value]
    paths = repo.build(
        version=args.version,
        artifacts=artifacts,
        label=args.label or "",
        hardware=args.hardware,
        min_agent_version=args.min_agent_version,
    )
    for path in paths:
        print(f"added {path}")
    for channel in args.channel or []:
        repo.promote(channel, args.version)
        print(f"channel {channel} -> version {args.version}")
    _print_signatures(repo)
    return 0


def cmd_sign(args: argparse.Namespace) -> int:
    repo = _repo(args)
    plain = args.role in ("root", "targets") or args.role.startswith("channel-")
    role = args.role if plain else f"channel-{args.role}"
    status = repo.sign(role)
    print(f"{role} v{status.version}: {status.have}/{status.need} signatures"
          + ("" if status.ok else f" (missing keys: {', '.join(status.missing_keyids)})"))
    return 0 if status.ok else 1


def cmd_publish(args: argparse.Namespace) -> int:
    repo = _repo(args)
    summary = repo.publish(args.out, timestamp_expiry=args.timestamp_expiry)
    print(json.dumps(summary, indent=2))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from models.fleet.verify import verify_published

    report = verify_published(args.directory, trusted_root=args.trusted_root)
    for line in report.lines:
        print(line)
    return 0 if report.ok else 1


def cmd_rotate(args: argparse.Namespace) -> int:
    repo = _repo(args)
    keyids = repo.rotate_keys(args.role, keys=args.keys, threshold=args.threshold, key_dir=args.new_key_dir)
    print(f"{args.role}: new keys {', '.join(k[:12] for k in keyids)}")
    _print_signatures(repo)
    return 0


def cmd_channel_add(args: argparse.Namespace) -> int:
    repo = _repo(args)
    repo.add_channel(args.name)
    print(f"channel {args.name} added (role channel-{args.name}); devices opt in with --channel {args.name}")
    return 0


def cmd_channel_list(args: argparse.Namespace) -> int:
    repo = _repo(args)
    for channel in repo.channels():
        entries = repo.channel_manifest(channel).entries
        shown = ", ".join(f"{e.bundle} v{e.version} ({e.hardware}, {e.label})" for e in entries) or "(empty)"
        print(f"{channel}: {shown}")
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    repo = _repo(args)
    repo.promote(args.channel, args.version)
    print(f"channel {args.channel} -> version {args.version}; run `edgecloud fleet publish` to ship it")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    repo = _repo(args)
    version = repo.rollback(args.channel, args.to, args.version)
    print(f"re-released version {args.to} as version {version} on channel {args.channel}")
    return 0


def _run(func: Command) -> Command:
    def wrapper(args: argparse.Namespace) -> int:
        from models.fleet.keys import KeyLoadError
        from models.fleet.repo import FleetError

        try:
            return func(args)
        except (FleetError, BundleError, KeyLoadError, FileNotFoundError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    return wrapper


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``edgecloud fleet ...`` to the top-level parser."""
    fleet = subparsers.add_parser("fleet", help="operator tools: signed model bundles on TUF")
    fsub = fleet.add_subparsers(dest="fleet_command", metavar="SUBCOMMAND")
    fsub.required = True

    def sub(name: str, func: Command, help_text: str) -> argparse.ArgumentParser:
        parser = fsub.add_parser(name, help=help_text)
        parser.add_argument("--workspace", type=Path, default=Path("fleet"), help="operator workspace")
        parser.add_argument("--key-dir", type=Path, action="append",
                            help="extra directory with private keys (e.g. offline root keys); repeatable")
        parser.set_defaults(func=_run(func))
        return parser

    p = sub("init", cmd_init, "generate keys and the first root/targets/snapshot/timestamp metadata")
    p.add_argument("--bundle", default="kiosk", help="bundle name")
    p.add_argument("--root-keys", type=int, default=1)
    p.add_argument("--root-threshold", type=int, default=1)
    p.add_argument("--targets-keys", type=int, default=1)
    p.add_argument("--targets-threshold", type=int, default=1)
    p.add_argument("--root-key-dir", type=Path, help="write root keys here (offline media), not the workspace")
    p.add_argument("--channel", action="append", help="roll-out channels to create (default: stable, canary)")
    p.add_argument("--expiry", action="append", metavar="ROLE=DURATION",
                   help="e.g. timestamp=1d, snapshot=7d, targets=90d, channel=30d, root=365d")

    p = sub("build", cmd_build, "add a bundle version (GGUF, intent, FAQ, config, knowledge) as signed targets")
    p.add_argument("--version", type=int, required=True, help="monotonic bundle version")
    p.add_argument("--label", help="human label, e.g. 2026.12-smollm2")
    p.add_argument("--hardware", default="any", help="e.g. jetson-orin-nx-16gb (default: any)")
    p.add_argument("--min-agent-version", default="0.1.0")
    p.add_argument("--gguf", type=Path)
    p.add_argument("--intent", type=Path, help="intent model directory (intent.onnx + card.json) or .onnx")
    p.add_argument("--faq", type=Path)
    p.add_argument("--knowledge", type=Path, help="venue knowledge pack (.md or .json)")
    p.add_argument("--config", type=Path)
    p.add_argument("--channel", action="append", help="also promote to this channel")

    p = sub("sign", cmd_sign, "add signatures for ROLE from the keys in --key-dir (k-of-n)")
    p.add_argument("role", help="root, targets or a channel name")

    p = sub("publish", cmd_publish, "write the static repository (serve it over HTTP/S3/CDN)")
    p.add_argument("out", type=Path)
    p.add_argument("--timestamp-expiry", help="override the timestamp expiry for this publish, e.g. 6h")

    p = sub("verify", cmd_verify, "check a published repository as a device would")
    p.add_argument("directory", type=Path)
    p.add_argument("--trusted-root", type=Path, help="pinned root (default: the repository's 1.root.json)")

    p = sub("rotate-keys", cmd_rotate, "replace the keys of a role (root rotation as TUF defines it)")
    p.add_argument("--role", required=True, help="root, targets, snapshot, timestamp or a channel name")
    p.add_argument("--keys", type=int, default=1)
    p.add_argument("--threshold", type=int)
    p.add_argument("--new-key-dir", type=Path, help="write the new private keys here (offline media for root)")

    p = sub("channel", cmd_channel_list, "list channels (or `channel add NAME`)")
    p.add_argument("action", nargs="?", choices=("list", "add"), default="list")
    p.add_argument("name", nargs="?")
    p.set_defaults(func=_run(lambda a: cmd_channel_add(a) if a.action == "add" else cmd_channel_list(a)))

    p = sub("promote", cmd_promote, "point a channel (device group) at a bundle version")
    p.add_argument("--channel", required=True)
    p.add_argument("--version", type=int, required=True)

    p = sub("rollback", cmd_rollback, "re-release an older version as a new, higher version on a channel")
    p.add_argument("--channel", required=True)
    p.add_argument("--to", type=int, required=True, help="the version whose artifacts to ship again")
    p.add_argument("--version", type=int, help="the new version number (default: latest + 1)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="edgecloud")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
