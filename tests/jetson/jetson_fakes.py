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

import json
import os
import sys

# pathlib, subprocess, signal and time are imported by the fakes that use them, and typing not at all:
# the installer calls the fakes ~40 times per run, each call is a fresh interpreter, and pathlib and
# typing alone cost as much as the interpreter's start (about 30 ms a call).

State = dict  # the fake board's state, as JSON

LLAMA_LAYERS = 29


def load_state() -> State:
    with open(os.environ["FAKE_STATE"], encoding="utf-8") as fh:
        return json.load(fh)


def save_state(state: State) -> None:
    path = os.environ["FAKE_STATE"]
    tmp = os.path.splitext(path)[0] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(state, indent=1, sort_keys=True))
    os.replace(tmp, path)


def log_call(name: str, argv: list[str], **extra: object) -> None:
    record = {"cmd": name, "argv": argv, **extra}
    with open(os.environ["FAKE_LOG"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def _arg_after(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _root():  # -> pathlib.Path (imported here: see above)
    from pathlib import Path

    return Path(os.environ["FAKE_ROOT"])


def set_power_mode(state: State, mode: int) -> None:
    """What a mode change does on an Orin: its cores come online (or go), its clocks apply."""
    state["power_mode"] = mode
    state["clocks"] = f"mode{mode}-dvfs"
    cpus = state["mode_cpus"].get(str(mode), state["max_cpus"])
    (_root() / "proc/cpuinfo").write_text("".join(f"processor\t: {i}\n\n" for i in range(cpus)))


def nvpmodel(argv: list[str], state: State) -> int:
    """nvpmodel as on JetPack: a mode change that needs a reboot asks first; no YES, no change."""
    if argv[:1] == ["-q"]:
        mode = state["power_mode"]
        print(f"NV Power Mode: {state['power_mode_names'].get(str(mode), 'MODE')}\n{mode}")
        return 0
    if argv[:1] == ["-m"]:
        mode = int(argv[1])
        if mode in state.get("reboot_modes", []):
            print(f"NVPM WARN: Reboot required for changing to this power mode: {mode}")
            print("NVPM WARN: DO YOU WANT TO REBOOT NOW? enter YES/yes to confirm:")
            answer = sys.stdin.readline().strip() if not sys.stdin.isatty() else ""
            if answer.lower() != "yes":
                print("NVPM WARN: power mode is not changed")
                return 0
            state["pending_reboot_mode"] = mode
            state["reboot_requested"] = True
            return 0
        set_power_mode(state, mode)
        return 0
    return 2


def systemctl(argv: list[str], state: State) -> int:
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


def dpkg_query(argv: list[str], state: State) -> int:
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


def venv_python(argv: list[str], state: State) -> int:
    """The venv's python: pip and gpu_check.py are faked, health_probe.py runs for real."""
    from pathlib import Path

    if argv[:2] == ["-m", "pip"]:
        return pip(argv[2:], state)
    if argv and argv[0].endswith(".whl/pip"):  # pip run from its own wheel (a venv without pip)
        state["pip"] = sorted({*state["pip"], "pip"})
        return pip(argv[1:], state)
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


def requirement_lines(argv: list[str]) -> list[str]:
    """The requirement lines of every ``-r FILE`` in a pip command line (continuations joined)."""
    from pathlib import Path

    lines: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "-r" and i + 1 < len(argv):
            text = Path(argv[i + 1]).read_text().replace("\\\n", " ")
            lines += [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return lines


def pip(argv: list[str], state: State) -> int:
    from pathlib import Path

    installed = set(state["pip"])
    verb, rest = argv[0], argv[1:]
    if verb == "show":
        return 0 if rest[0] in installed else 1
    reqs = requirement_lines(rest)
    if verb == "uninstall":
        installed.difference_update(a for a in rest if not a.startswith("-"))
    elif verb == "download":
        dest = Path(_arg_after(rest, "--dest") or ".")
        for line in reqs:
            if line.startswith("onnxruntime-gpu @"):
                url = line.split("@", 1)[1].split()[0]
                if url.startswith("file://") and Path(url[7:]).is_file():
                    (dest / url.rsplit("/", 1)[1]).write_bytes(Path(url[7:]).read_bytes())
                    continue
                if offline() or os.environ.get("FAKE_ORT_GPU") != "1":
                    print("ERROR: Could not install requirement onnxruntime-gpu: network unreachable", file=sys.stderr)
                    return 1
                (dest / url.rsplit("/", 1)[1]).write_bytes(b"wheel")
            elif "==" in line:  # a locked package from PyPI: its wheel for this platform
                if offline():
                    return 1
                name, version = line.split()[0].split("==")
                (dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"wheel")
    elif verb == "wheel":  # pip wheel: the CUDA build of llama-cpp-python into --wheel-dir
        wheel_dir = Path(_arg_after(rest, "--wheel-dir") or ".")
        for line in reqs:
            if line.startswith("llama-cpp-python=="):
                if not ("-DGGML_CUDA=on" in os.environ.get("CMAKE_ARGS", "")
                        and Path(os.environ.get("CUDACXX", "")).is_file()):
                    return 1
                version = line.split()[0].split("==")[1]
                (wheel_dir / f"llama_cpp_python-{version}-cp310-cp310-linux_aarch64.whl").write_bytes(b"cuda")
    elif verb == "install":
        find_links = _arg_after(rest, "--find-links")
        if offline() and "--no-index" not in rest:
            print("ERROR: Could not find a version (network unreachable)", file=sys.stderr)
            return 1
        for line in reqs:
            name = line.split("==")[0].split(" @")[0].strip()
            if name == "llama-cpp-python":
                version = line.split("==", 1)[1].split()[0]
                if "--no-binary" in rest:  # built here from the source package
                    cmake_args = os.environ.get("CMAKE_ARGS", "")
                    cudacxx = os.environ.get("CUDACXX", "")
                    path_has_cuda = any(
                        p.endswith("/cuda/bin") and Path(p, "nvcc").exists()
                        for p in os.environ.get("PATH", "").split(":")
                    )
                    cuda = ("-DGGML_CUDA=on" in cmake_args and "-DCMAKE_CUDA_ARCHITECTURES=87" in cmake_args
                            and Path(cudacxx).is_file() and path_has_cuda)
                else:  # the CUDA wheel of a wheelhouse
                    cuda = bool(find_links) and any(Path(find_links).glob("llama_cpp_python-*.whl"))
                state["llama"] = {"version": version, "cuda": cuda}
            installed.add(name)
        for arg in rest:
            if Path(arg).is_dir() and arg != find_links:  # the project itself
                installed.add("edgecloud")
    state["pip"] = sorted(installed)
    return 0


def gpu_check(argv: list[str], state: State) -> int:
    """The CUDA load as gpu_check.py reports it; as the service user it may fall back to the CPU."""
    from pathlib import Path

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
    if os.environ.get("FAKE_RUN_AS") == "edgecloud" and not state.get("service_user_gpu", True):
        # e.g. the user cannot open /dev/nvhost-*: CUDA fails to initialise, llama.cpp uses the CPU
        print(f"offloaded=0\nlayers={LLAMA_LAYERS}\nverdict=layers-not-on-gpu")
        return 4
    print(f"offloaded={LLAMA_LAYERS}\nlayers={LLAMA_LAYERS}\nverdict=gpu")
    return 0


def systemd_run(argv: list[str], state: State) -> int:
    """systemd-run --wait --pipe ... -p User=... -- CMD: runs CMD as that unit would (user recorded)."""
    cut = argv.index("--")
    props = [a.split("=", 1)[1] for a in argv[:cut] if a.startswith("--property=")]
    user = next((p.split("=", 1)[1] for p in props if p.startswith("User=")), "root")
    state.setdefault("systemd_runs", []).append({"user": user, "properties": props})
    save_state(state)
    env = {**os.environ, "FAKE_RUN_AS": user}
    import subprocess

    return subprocess.run(argv[cut + 1:], env=env, check=False).returncode


def venv_edgecloud(argv: list[str], state: State) -> int:
    from pathlib import Path

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


def offline() -> bool:
    return os.environ.get("FAKE_OFFLINE") == "1"


def curl(argv: list[str], state: State) -> int:
    from pathlib import Path

    if offline():
        print("curl: (6) Could not resolve host: huggingface.co", file=sys.stderr)
        return 6
    out = _arg_after(argv, "-o")
    if not out:
        return 2
    Path(out).write_bytes(os.environ.get("FAKE_MODEL_CONTENT", "fake gguf").encode())
    state["downloads"] = state.get("downloads", 0) + 1
    return 0


def tegrastats(argv: list[str], state: State) -> int:
    """JetPack 6 tegrastats lines (Orin NX: tj junction sensor, VDD_IN module input power)."""
    import signal
    import time

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if os.environ.get("FAKE_OC") == "1":  # the module hits its current limit while tegrastats runs
        for counter in (_root() / "sys/class/hwmon").glob("hwmon*/oc*_event_cnt"):
            counter.write_text(f"{int(counter.read_text()) + 2}\n")
    gr3d = os.environ.get("FAKE_GR3D", "87")
    tj = os.environ.get("FAKE_TJ", "61.4")
    for _ in range(600):
        print("RAM 6120/15388MB (lfb 2x4MB) SWAP 0/7694MB CPU [12%@1984,8%@1984] "
              f"EMC_FREQ 40%@3199 GR3D_FREQ {gr3d}%@[918] cpu@48C soc2@47.6C gpu@50C tj@{tj}C "
              "VDD_IN 14210mW/9800mW VDD_CPU_GPU_CV 6120mW/3300mW VDD_SOC 2890mW/2700mW", flush=True)
        time.sleep(0.2)
    return 0


def df(argv: list[str], state: State) -> int:
    avail = int(os.environ.get("FAKE_DF_AVAIL_KB", str(200 * 1024 * 1024)))
    print("Filesystem 1024-blocks Used Available Capacity Mounted on")
    print(f"/dev/nvme0n1p1 {avail * 2} {avail} {avail} 50% /")
    return 0


def getent(argv: list[str], state: State) -> int:
    if argv[:1] == ["passwd"] and argv[1] in state["users"]:
        uid = 4242 if argv[1] == "edgecloud" else 0
        print(f"{argv[1]}:x:{uid}:{uid}::/var/lib/{argv[1]}:/usr/sbin/nologin")
        return 0
    return 2


def useradd(argv: list[str], state: State) -> int:
    state["users"] = sorted({*state["users"], argv[-1]})
    return 0


def userdel(argv: list[str], state: State) -> int:
    state["users"] = [u for u in state["users"] if u != argv[-1]]
    return 0


def apt_get(argv: list[str], state: State) -> int:
    if offline():
        print("E: Failed to fetch: Temporary failure resolving 'ports.ubuntu.com'", file=sys.stderr)
        return 100
    if "install" in argv:
        names = [a for a in argv[argv.index("install") + 1:] if not a.startswith("-")]
        state["packages"] = sorted({*state["packages"], *names})
    return 0


def python_system(argv: list[str], state: State) -> int:
    """python3.10 -m venv DIR: a venv whose python/edgecloud are fakes too."""
    from pathlib import Path

    if argv[:2] != ["-m", "venv"]:
        return 2
    bindir = Path(argv[-1]) / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for name, fake in (("python", "venv-python"), ("edgecloud", "venv-edgecloud")):
        script = bindir / name
        script.write_text(f'#!/bin/sh\nexec "{os.environ["FAKE_REAL_PYTHON"]}" -S "{__file__}" {fake} "$@"\n')
        script.chmod(0o755)
    return 0


def fallocate(argv: list[str], state: State) -> int:
    from pathlib import Path

    Path(argv[-1]).write_bytes(b"swap")
    return 0


def jetson_clocks(argv: list[str], state: State) -> int:
    """--store FILE saves the clocks as they are, --restore FILE puts them back, no args pins them."""
    from pathlib import Path

    store, restore = _arg_after(argv, "--store"), _arg_after(argv, "--restore")
    if store:
        Path(store).write_text(state["clocks"] + "\n")
    elif restore:
        state["clocks"] = Path(restore).read_text().strip()
    elif not argv:
        state["clocks"] = "max"
    return 0


def quiet(argv: list[str], state: State) -> int:
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
    "systemd-run": systemd_run,
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
    try:
        rc = HANDLERS[name](argv, state)
    except KeyboardInterrupt:
        return 130
    if name == "systemd-run":
        state = load_state()  # the command it ran saved its own changes
    if name != "tegrastats":
        save_state(state)
    return rc


if __name__ == "__main__":
    sys.exit(main())
