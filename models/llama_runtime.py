"""Opening a llama.cpp model with CPU kernels that work on the machine it runs on.

Why this module exists: llama.cpp built with ``-march=native`` (llama-cpp-python's default build) on an
Intel CPU with AMX (Sapphire Rapids and later) routes quantised matrix products through its AMX
"extra buffer type", and that kernel segfaults on the first token in some VMs (seen here on a 2-vCPU
Sapphire Rapids VM with the embedded SmolLM2 Q4_1: ``ggml_backend_amx_mul_mat``; upstream
ggml-org/llama.cpp#20824, closed stale without a fix; dspy's CI and Ollama dropped their AMX builds
for the same crash and because AMX measured slower on Sapphire Rapids). A crash there would take the
gateway down on the first request and make every model update fail its smoke test.

llama.cpp's switch for it is the model parameter ``use_extra_bufts`` (``llama-server --no-repack``);
llama-cpp-python does not expose it as a ``Llama()`` argument, so :func:`open_llama` sets it on the
default parameters that ``Llama.__init__`` asks for, under a lock, for the one constructor call.
Extra buffer types are llama.cpp's CPU weight repacking (AMX on x86, CPU_REPACK for Q4_0/IQ4_NL on
x86 and Arm, KleidiAI on Arm); ``auto`` turns them off only where the CPU reports AMX, so an Arm
board or an AMD/older Intel CPU keeps its repacked kernels. GPU-offloaded layers are not affected.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

ExtraBufferTypes = Literal["auto", "on", "off"]

_PARAMS_LOCK = threading.Lock()
_CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU feature flags of the first processor in ``/proc/cpuinfo`` (empty where unreadable)."""
    if cpuinfo is None:
        try:
            cpuinfo = _CPUINFO.read_text(errors="replace")
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def cpu_has_amx(cpuinfo: str | None = None) -> bool:
    return bool({"amx_int8", "amx_tile", "amx_bf16"} & cpu_flags(cpuinfo))


def use_extra_buffer_types(setting: ExtraBufferTypes = "auto", cpuinfo: str | None = None) -> bool:
    """Whether llama.cpp may repack weights into its CPU extra buffer types (see the module doc)."""
    if setting == "on":
        return True
    if setting == "off":
        return False
    return not cpu_has_amx(cpuinfo)


@contextlib.contextmanager
def _model_params(extra_buffer_types: bool) -> Iterator[None]:
    import llama_cpp.llama_cpp as lib

    with _PARAMS_LOCK:
        original = lib.llama_model_default_params

        def defaults() -> Any:
            params = original()
            params.use_extra_bufts = extra_buffer_types
            return params

        lib.llama_model_default_params = defaults
        try:
            yield
        finally:
            lib.llama_model_default_params = original


def open_llama(model_path: str | Path, *, extra_buffer_types: ExtraBufferTypes = "auto", **kwargs: Any) -> Any:
    """``llama_cpp.Llama(model_path, **kwargs)`` with llama.cpp's extra buffer types decided for this CPU."""
    from llama_cpp import Llama

    with _model_params(use_extra_buffer_types(extra_buffer_types)):
        return Llama(model_path=str(model_path), **kwargs)
