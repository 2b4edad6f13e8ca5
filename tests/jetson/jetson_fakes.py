"""Fake Jetson commands for the jetson/setup.sh tests: one dispatcher, many names.

Only what cannot exist on a CI machine is faked: the Jetson tools (nvpmodel, jetson_clocks,
tegrastats, nvcc), the machine-wide tools that would change the test machine itself (apt-get,
systemctl, useradd, swapon ...), pip's CUDA build and the internet (curl). Each fake appends
its argv (and the build environment pip sees) to ``$FAKE_LOG`` as one JSON line and keeps its
state in ``$FAKE_STATE`` (JSON), so a second installer run sees the first run's effects, the
way a real board would. Scripts the installer runs with the venv's Python that do not need a
GPU (health_probe.py) run for real.

Run as ``python fakes.py NAME ARGS...``; the test fixture writes one tiny wrapper per name.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

LLAMA_LAYERS = 29


def _state_path() -> Path:
    return Path(os.environ["FAKE_STATE"])


def load_state() -> dict[str, Any]:
    return json.loads(_state_path().read_text())


def save_state(state: dict[str, Any]) -> None:
    tmp = _state_path().with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    tmp.replace(_state_path())


def log_call(name: str, argv: list[str], **extra: Any) -> None:
    record = {"cmd": name, "argv": argv, **extra}
    with open(os.environ["FAKE_LOG"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def _arg_after(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def nvpmodel(argv: list[str], state: dict[str, Any]) -> int:
    if argv[:1] == ["-q"]:
        mode = state["power_mode"]
        print(f"NV Power Mode: {state['power_mode_names'].get(str(mode), 'MODE')}\n{mode}")
        return 0
    if argv[:1] == ["-m"]:
        state["power_mode"] = int(argv[1])
        return 0
    return 2


def systemctl(argv: list[str], state: dict[str, Any]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    verb, units = args[0], args[1:]
    enabled, active = set(state["enabled"]), set(state["active"])
    if verb == "is-enabled":
        return 0 if units[0] in enabled else 1
    if verb == "is-active":
        return 0 if units[0] in active else 3
    if verb == "get-default":
        print(state["default_target"])
        return 0
    if verb == "set-default":
        state["default_target"] = units[0]
    elif verb == "enable":
        enabled.update(units)
        if "--now" in argv:
            active.update(units)
    elif verb == "disable":
        enabled.difference_update(units)
        if "--now" in argv:
            active.difference_update(units)
    elif verb in ("start", "restart"):
        active.update(units)
    elif verb == "stop":
        active.difference_update(units)
    state["enabled"], state["active"] = sorted(enabled), sorted(active)
    return 0


def dpkg_query(argv: list[str], state: dict[str, Any]) -> int:
    if "--show" in argv and "nvidia-l4t-core" in argv:
        version = state.get("l4t_core_version")
        if not version:
            return 1
        print(version, end="")
        return 0
    # dpkg-query -W -f='${Package} ${Status}\n' PKG...: unknown packages are an error (exit 1).
    packages = [a for a in argv if not a.startswith("-")]
    for package in packages:
        if package in state["packages"]:
            print(f"{package} install ok installed")
    return 0 if all(p in state["packages"] for p in packages) else 1


def venv_python(argv: list[str], state: dict[str, Any]) -> int:
    """The venv's python: pip and gpu_check.py are faked, health_probe.py runs for real."""
    if argv[:2] == ["-m", "pip"]:
        return pip(argv[2:], state)
    if argv and argv[0].endswith("health_probe.py"):
        real = os.environ["FAKE_REAL_PYTHON"]
        os.execv(real, [real, *argv])  # noqa: S606 - argv list, no shell
    if argv and argv[0].endswith("gpu_check.py"):
        return gpu_check(argv[1:], state)
    if argv[:1] == ["-c"] and "ModelStore" in argv[1]:
        # models.store.ModelStore(data_dir).current().artifacts["gguf"] after a bundle update
        gguf = Path(argv[2]) / "models" / "store" / "bundle-model.gguf"
        print(gguf if gguf.is_file() else "")
        return 0
    if argv[:1] == ["-c"]:
        # The health report's one-shot version query: llama_cpp, onnxruntime + providers, edgecloud.
        gpu = "onnxruntime-gpu" in state["pip"]
        providers = "CUDAExecutionProvider,CPUExecutionProvider" if gpu else "CPUExecutionProvider"
        print(state["llama"]["version"] if state.get("llama") else "")
        print(f"1.23.0 {providers}")
        print("0.1.0")
        return 0
    return 0


def pip(argv: list[str], state: dict[str, Any]) -> int:
    installed = set(state["pip"])
    verb, rest = argv[0], argv[1:]
    if verb == "show":
        return 0 if rest[0] in installed else 1
    if verb == "uninstall":
        installed.difference_update(a for a in rest if not a.startswith("-"))
    elif verb == "download":
        if os.environ.get("FAKE_ORT_GPU") != "1":
            print("ERROR: No matching distribution found for onnxruntime-gpu", file=sys.stderr)
            return 1
        dest = Path(_arg_after(rest, "--dest") or ".")
        (dest / "onnxruntime_gpu-1.23.0-cp310-cp310-linux_aarch64.whl").write_bytes(b"wheel")
    elif verb == "install":
        for arg in rest:
            if arg.startswith("llama-cpp-python=="):
                cmake_args = os.environ.get("CMAKE_ARGS", "")
                cudacxx = os.environ.get("CUDACXX", "")
                path_has_cuda = any(
                    p.endswith("/cuda/bin") and Path(p, "nvcc").exists()
                    for p in os.environ.get("PATH", "").split(":")
                )
                cuda = ("-DGGML_CUDA=on" in cmake_args and "-DCMAKE_CUDA_ARCHITECTURES=87" in cmake_args
                        and Path(cudacxx).is_file() and path_has_cuda)
                state["llama"] = {"version": arg.split("==", 1)[1], "cuda": cuda}
                installed.add("llama-cpp-python")
            elif arg.endswith(".whl") and "onnxruntime_gpu" in arg:
                installed.add("onnxruntime-gpu")
            elif arg.startswith("onnxruntime"):
                installed.add("onnxruntime")
            elif Path(arg).is_dir():  # the project: its dependencies bring the CPU onnxruntime
                installed.update({"edgecloud", "onnxruntime"})
    state["pip"] = sorted(installed)
    return 0


def gpu_check(argv: list[str], state: dict[str, Any]) -> int:
    llama = state.get("llama")
    if not llama:
        print("ModuleNotFoundError: No module named 'llama_cpp'", file=sys.stderr)
        return 1
    print(f"llama_cpp_version={llama['version']}")
    print(f"gpu_offload={int(llama['cuda'])}")
    if not llama["cuda"]:
        print("verdict=cpu-only-build")
        return 3
    model = _arg_after(argv, "--model")
    if "--supports-only" in argv or not model:
        print("verdict=gpu-build")
        return 0
    if not Path(model).is_file():
        print("verdict=load-failed")
        return 5
    print(f"offloaded={LLAMA_LAYERS}\nlayers={LLAMA_LAYERS}\nverdict=gpu")
    return 0


def venv_edgecloud(argv: list[str], state: dict[str, Any]) -> int:
    if argv[:2] != ["models", "update"]:
        return 2
    if os.environ.get("FAKE_BUNDLE_CMD") != "1":
        return 2
    if "--help" in argv:
        return 0
    data_dir = Path(_arg_after(argv, "--data-dir") or "")
    target = data_dir / "models" / "store" / "bundle-model.gguf"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"bundle model")
    return 0


def curl(argv: list[str], state: dict[str, Any]) -> int:
    out = _arg_after(argv, "-o")
    if not out:
        return 2
    Path(out).write_bytes(os.environ.get("FAKE_MODEL_CONTENT", "fake gguf").encode())
    state["downloads"] = state.get("downloads", 0) + 1
    return 0


def tegrastats(argv: list[str], state: dict[str, Any]) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    for _ in range(600):
        print("RAM 6120/15388MB (lfb 2x4MB) SWAP 0/7694MB CPU [12%@1984,8%@1984] "
              "EMC_FREQ 40%@3199 GR3D_FREQ 87%@[918] cpu@48C gpu@50C", flush=True)
        time.sleep(0.2)
    return 0


def df(argv: list[str], state: dict[str, Any]) -> int:
    avail = int(os.environ.get("FAKE_DF_AVAIL_KB", str(200 * 1024 * 1024)))
    print("Filesystem 1024-blocks Used Available Capacity Mounted on")
    print(f"/dev/nvme0n1p1 {avail * 2} {avail} {avail} 50% /")
    return 0


def getent(argv: list[str], state: dict[str, Any]) -> int:
    return 0 if argv[:1] == ["passwd"] and argv[1] in state["users"] else 2


def useradd(argv: list[str], state: dict[str, Any]) -> int:
    state["users"] = sorted({*state["users"], argv[-1]})
    return 0


def userdel(argv: list[str], state: dict[str, Any]) -> int:
    state["users"] = [u for u in state["users"] if u != argv[-1]]
    return 0


def apt_get(argv: list[str], state: dict[str, Any]) -> int:
    if "install" in argv:
        names = [a for a in argv[argv.index("install") + 1:] if not a.startswith("-")]
        state["packages"] = sorted({*state["packages"], *names})
    return 0


def python_system(argv: list[str], state: dict[str, Any]) -> int:
    """python3.10 -m venv DIR: a venv whose python/edgecloud are fakes too."""
    if argv[:2] != ["-m", "venv"]:
        return 2
    bindir = Path(argv[2]) / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for name, fake in (("python", "venv-python"), ("edgecloud", "venv-edgecloud")):
        script = bindir / name
        script.write_text(f'#!/bin/sh\nexec "{os.environ["FAKE_REAL_PYTHON"]}" -S "{__file__}" {fake} "$@"\n')
        script.chmod(0o755)
    return 0


def fallocate(argv: list[str], state: dict[str, Any]) -> int:
    Path(argv[-1]).write_bytes(b"swap")
    return 0


def jetson_clocks(argv: list[str], state: dict[str, Any]) -> int:
    store = _arg_after(argv, "--store")
    if store:
        Path(store).write_text("saved clocks\n")
    return 0


def quiet(argv: list[str], state: dict[str, Any]) -> int:
    return 0


HANDLERS = {
    "nvpmodel": nvpmodel,
    "jetson_clocks": jetson_clocks,
    "systemctl": systemctl,
    "dpkg-query": dpkg_query,
    "apt-get": apt_get,
    "add-apt-repository": quiet,
    "getent": getent,
    "useradd": useradd,
    "userdel": userdel,
    "python3.10": python_system,
    "venv-python": venv_python,
    "venv-edgecloud": venv_edgecloud,
    "curl": curl,
    "tegrastats": tegrastats,
    "df": df,
    "fallocate": fallocate,
    "mkswap": quiet,
    "swapon": quiet,
    "swapoff": quiet,
    "journalctl": quiet,
}

# The build environment pip sees: what proves CUDA was set up for the llama.cpp build.
LOGGED_ENV = ("CMAKE_ARGS", "CUDACXX", "CUDA_HOME", "FORCE_CMAKE", "CMAKE_BUILD_PARALLEL_LEVEL")


def main() -> int:
    name, argv = sys.argv[1], sys.argv[2:]
    env = {k: os.environ[k] for k in LOGGED_ENV if k in os.environ}
    if name == "venv-python" and argv[:3] == ["-m", "pip", "install"]:
        env["PATH"] = os.environ.get("PATH", "")
    log_call(name, argv, env=env)
    state = load_state()
    with contextlib.suppress(KeyboardInterrupt):
        rc = HANDLERS[name](argv, state)
        if name != "tegrastats":
            save_state(state)
        return rc
    return 130


if __name__ == "__main__":
    sys.exit(main())
