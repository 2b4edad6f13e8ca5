"""Smoke test of a staged version, run in a child process before anything switches.

A corrupt or hostile-but-signed GGUF can segfault llama.cpp or hang it; in a child process with a
timeout that costs one failed update instead of the agent (or the whole gateway). Checks: the GGUF
loads and generates a token, the intent classifier loads and classifies a probe, the FAQ pack
parses, the config parses. Run as ``python -I -m models.fleet.smoke VERSION_DIR``; prints one JSON line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROBE = "What time does the shop open?"


@dataclass(frozen=True)
class SmokeResult:
    ok: bool
    checks: dict[str, str]
    reason: str = ""


def _check_gguf(path: Path) -> str:
    from models.llama_runtime import open_llama

    llm = open_llama(path, n_ctx=128, n_threads=1, n_batch=16, verbose=False)
    out = llm.create_completion("Hello", max_tokens=1, temperature=0.0)
    text = out["choices"][0]["text"]
    if out["usage"]["completion_tokens"] < 1:
        raise RuntimeError("the model generated no token")
    return f"generated {text!r}"


def _check_intent(model: Path) -> str:
    directory = model.parent if model.is_file() else model
    onnx_files = sorted(directory.glob("*.onnx"))
    if not onnx_files:
        raise RuntimeError("no .onnx file in the intent artifact")
    if (directory / "card.json").exists():
        from models.intent.runtime import IntentClassifier

        result = IntentClassifier.load(directory).classify(PROBE)
        return f"classified probe as {result!r}"
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_files[0]), providers=["CPUExecutionProvider"])
    feeds: dict[str, Any] = {}
    for inp in session.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in inp.shape]
        if "string" in inp.type:
            feeds[inp.name] = np.full(shape, PROBE, dtype=object)
        elif "int" in inp.type:
            feeds[inp.name] = np.zeros(shape, dtype=np.int64)
        else:
            feeds[inp.name] = np.zeros(shape, dtype=np.float32)
    outputs = session.run(None, feeds)
    return f"ran {onnx_files[0].name}: {len(outputs)} outputs"


def _check_faq(path: Path) -> str:
    try:
        from models.faq import load_faq_pack
    except ImportError:  # the FAQ-pack parser not built yet: at least it must be JSON
        json.loads(path.read_text(encoding="utf-8"))
        return "parsed as JSON"
    entries = load_faq_pack(path)
    return f"{len(entries)} entries"


def _check_knowledge(path: Path) -> str:
    from models.knowledge_pack import load_knowledge_pack

    pack = load_knowledge_pack(path)
    return f"{len(pack.facts)} facts ({', '.join(pack.languages)}), version {pack.version}"


def _check_config(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib  # novermin (3.11 branch)
        else:  # pragma: no cover
            import tomli as tomllib
        tomllib.loads(text)
    else:
        json.loads(text)
    return "parsed"


CHECKS = {"gguf": _check_gguf, "intent": _check_intent, "faq": _check_faq, "config": _check_config,
          "knowledge": _check_knowledge}


def check_artifacts(artifacts: dict[str, Path]) -> SmokeResult:
    """Run every check in this process (the child side)."""
    results: dict[str, str] = {}
    for kind, path in artifacts.items():
        try:
            results[kind] = CHECKS[kind](path)
        except Exception as exc:
            results[kind] = f"FAILED: {type(exc).__name__}: {exc}"
            return SmokeResult(False, results, f"{kind} smoke test failed: {type(exc).__name__}: {exc}")
    return SmokeResult(True, results)


def run_smoke_test(version_dir: Path, timeout_s: float = 120.0) -> SmokeResult:
    """Smoke-test a version dir in a child process (the agent side)."""
    # -I (isolated): no working directory or PYTHONPATH on the import path, no user site. Without it a
    # planted models/__init__.py in the service's working directory would run at the next update.
    cmd = [sys.executable, "-I", "-m", "models.fleet.smoke", str(version_dir)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return SmokeResult(False, {}, f"smoke test timed out after {timeout_s:.0f}s")
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    try:
        body = json.loads(last)
        return SmokeResult(bool(body["ok"]), dict(body["checks"]), str(body.get("reason", "")))
    except (ValueError, KeyError):
        tail = proc.stderr.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        return SmokeResult(False, {}, f"smoke test crashed (exit {proc.returncode}): {tail[0][:300]}")


def main(argv: list[str] | None = None) -> int:
    from models.store import read_version_dir

    args = argv if argv is not None else sys.argv[1:]
    version = read_version_dir(Path(args[0]))
    result = check_artifacts(version.artifacts)
    print(json.dumps({"ok": result.ok, "checks": result.checks, "reason": result.reason}))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
