"""Prove that llama-cpp-python was built with CUDA and that a model's layers really sit on the GPU.

Why this exists: the classic Jetson failure is not an error but a CPU-only llama.cpp. pip builds
it without CUDA whenever ``nvcc`` is not on PATH (sudo and systemd both drop /usr/local/cuda/bin)
and the gateway then works, only about ten times slower. Two facts tell the truth:

1. ``llama_supports_gpu_offload()`` is false for a CPU-only build (a compile-time fact);
2. a CUDA build can still keep layers on the CPU (``n_gpu_layers=0``, not enough memory, a
   wrong architecture), which only the loader's ``offloaded N/M layers to GPU`` line shows.

The script prints ``key=value`` lines (read by jetson/setup.sh) and exits 0 only when the
build supports offload and, with ``--model``, every layer was offloaded. It runs in the
gateway's virtual environment with the system Python 3.10, so it uses only the standard
library and llama-cpp-python.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

OFFLOAD_RE = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
# Newer llama.cpp also logs each layer's device ("layer 3 assigned to device CUDA0, ...");
# a CPU-only build logs only these, with device CPU, and no "offloaded" line at all.
ASSIGNED_RE = re.compile(r"layer\s+(\d+) assigned to device (\w+)")

EXIT_OK = 0
EXIT_CPU_ONLY = 3
EXIT_NOT_OFFLOADED = 4
EXIT_LOAD_FAILED = 5


@dataclass(frozen=True)
class Offload:
    """What the loader reported: layers placed on the GPU out of the model's total."""

    offloaded: int
    total: int

    @property
    def complete(self) -> bool:
        return self.total > 0 and self.offloaded == self.total


def parse_offload(log_text: str) -> Offload | None:
    """Layers on the GPU according to a llama.cpp load log, or None if it says nothing.

    The ``offloaded N/M layers to GPU`` summary wins; without it, the per-layer device lines
    are counted (any device but ``CPU`` is an accelerator).
    """
    matches = OFFLOAD_RE.findall(log_text)
    if matches:
        offloaded, total = matches[-1]
        return Offload(int(offloaded), int(total))
    devices = dict(ASSIGNED_RE.findall(log_text))
    if not devices:
        return None
    on_gpu = sum(1 for device in devices.values() if not device.startswith("CPU"))
    return Offload(on_gpu, len(devices))


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """Capture file descriptor 2, where llama.cpp (C and Python callback alike) logs.

    Replacing ``sys.stderr`` alone misses lines that ggml writes from C before the Python
    log callback is installed, so the descriptor itself is redirected to a temporary file.
    """
    out: list[str] = []
    sys.stderr.flush()
    saved_fd, saved_stream = os.dup(2), sys.stderr
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        # llama-cpp-python's log callback prints to sys.stderr, which need not be fd 2 (a test
        # runner or a wrapper may have replaced it): point it at the same file.
        sys.stderr = open(tmp.fileno(), "w", encoding="utf-8", closefd=False, buffering=1)
        try:
            yield out
        finally:
            sys.stderr.flush()
            sys.stderr = saved_stream
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            tmp.seek(0)
            out.append(tmp.read().decode("utf-8", errors="replace"))


def emit(key: str, value: object) -> None:
    print(f"{key}={value}", flush=True)


def check_build() -> bool:
    """Print the build facts; True when this llama.cpp can offload to a GPU."""
    import llama_cpp  # the gateway's venv has it; imported here so --help works without it

    supports = bool(llama_cpp.llama_supports_gpu_offload())
    emit("llama_cpp_version", getattr(llama_cpp, "__version__", "unknown"))
    emit("gpu_offload", int(supports))
    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip()
    emit("system_info", " ".join(info.split()))
    return supports


def check_model(model: str, n_ctx: int, n_gpu_layers: int) -> Offload | None:
    """Load ``model`` with every layer requested on the GPU and return what the loader did."""
    from llama_cpp import Llama

    with captured_stderr() as log:
        llm = Llama(model_path=model, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, verbose=True)
        del llm
    return parse_offload(log[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF file to load with every layer on the GPU")
    parser.add_argument("--n-ctx", type=int, default=512, help="context size for the test load")
    parser.add_argument("--n-gpu-layers", type=int, default=-1)
    parser.add_argument("--supports-only", action="store_true", help="only check the build")
    args = parser.parse_args(argv)

    supports = check_build()
    if not supports:
        emit("verdict", "cpu-only-build")
        return EXIT_CPU_ONLY
    if args.supports_only or not args.model:
        emit("verdict", "gpu-build")
        return EXIT_OK
    try:
        offload = check_model(args.model, args.n_ctx, args.n_gpu_layers)
    except Exception as exc:  # llama-cpp-python raises ValueError/RuntimeError on load failures
        emit("verdict", "load-failed")
        emit("error", " ".join(str(exc).split()))
        return EXIT_LOAD_FAILED
    emit("offloaded", offload.offloaded if offload else 0)
    emit("layers", offload.total if offload else 0)
    if offload is None or not offload.complete:
        emit("verdict", "layers-not-on-gpu")
        return EXIT_NOT_OFFLOADED
    emit("verdict", "gpu")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
