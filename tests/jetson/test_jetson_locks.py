"""The pins jetson/setup.sh installs as root: lock files that agree with pyproject.toml, hashes on
every line, and model and onnxruntime-gpu pins that are well formed (jetson/locks/README.md)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.jetson.jetson_harness import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (JetPack 6)
    import tomli as tomllib

LOCKS = REPO / "jetson" / "locks"
JETSON_ENV = {"sys_platform": "linux", "platform_machine": "aarch64", "python_version": "3.10",
              "python_full_version": "3.10.12", "implementation_name": "cpython"}


def parse_lock(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) from a pip-compile style lock (backslash continuations)."""
    text = path.read_text().replace("\\\n", " ")
    entries: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        spec, *opts = line.split()
        name, version = spec.split("==")
        hashes = [o.split(":", 1)[1] for o in opts if o.startswith("--hash=sha256:")]
        entries[canonicalize_name(name)] = (version, hashes)
    return entries


def project_requirements() -> list[Requirement]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return [Requirement(r) for r in pyproject["project"]["dependencies"]]


@pytest.mark.parametrize("lock", ["jp5-py310.txt", "jp6-py310.txt"])
def test_the_jetpack_lock_pins_every_dependency_of_the_project_with_hashes(lock: str) -> None:
    entries = parse_lock(LOCKS / lock)

    for name, (version, hashes) in entries.items():
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), (name, version)
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), name
    for req in project_requirements():
        if req.marker is not None and not req.marker.evaluate(JETSON_ENV):
            continue
        name = canonicalize_name(req.name)
        if name == "llama-cpp-python":
            assert name not in entries  # built from its own lock, with CUDA
            continue
        assert name in entries, f"{lock} lacks {req.name}: regenerate it (jetson/locks/README.md)"
        assert req.specifier.contains(entries[name][0], prereleases=True), (req, entries[name][0])
    # The build tools used with --no-build-isolation are pinned too.
    assert {"scikit-build-core", "setuptools", "wheel"} <= set(entries)


def test_llama_cpp_python_and_the_bootstrap_are_exact_and_hashed() -> None:
    llama = parse_lock(LOCKS / "llama-cpp-python.txt")
    pinned = next(r for r in project_requirements() if r.name == "llama-cpp-python")
    assert list(llama) == ["llama-cpp-python"]
    assert str(pinned.specifier) == f"=={llama['llama-cpp-python'][0]}"
    assert len(llama["llama-cpp-python"][1]) == 1  # the source package only: it is built on the board
    bootstrap = parse_lock(LOCKS / "bootstrap.txt")
    assert {"pip", "wheel"} <= set(bootstrap) and all(h for _, h in bootstrap.values())


def test_onnxruntime_gpu_pins_are_content_addressed_urls_with_their_hash() -> None:
    lines = [ln for ln in (LOCKS / "onnxruntime-gpu.conf").read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines
    for line in lines:
        cuda, url, sha = line.split("|")
        assert re.fullmatch(r"\d+\.\d+", cuda)
        assert re.fullmatch(r"[0-9a-f]{64}", sha)
        # The Jetson AI Lab (devpi) path embeds the start of the file's sha256.
        assert f"/+f/{sha[:3]}/{sha[3:16]}/onnxruntime_gpu-" in url and url.startswith("https://")
        assert url.endswith("-cp310-cp310-linux_aarch64.whl")


def test_model_pins_name_a_revision_and_a_sha256() -> None:
    lines = [ln for ln in (REPO / "jetson" / "models.conf").read_text().splitlines()
             if ln and not ln.startswith("#")]
    assert len(lines) >= 3
    for line in lines:
        name, file, url, sha, size_mb, quant, _params = line.split("|")
        assert re.fullmatch(r"[0-9a-f]{64}", sha), name
        assert re.fullmatch(r"https://huggingface\.co/[^/]+/[^/]+/resolve/[0-9a-f]{40}/" + re.escape(file), url), name
        assert int(size_mb) > 0 and quant in file
    floors = (REPO / "jetson" / "floors.conf").read_text()
    for line in lines:
        assert f"|{line.split('|')[0]}|" in floors  # every pinned model has a decode floor
