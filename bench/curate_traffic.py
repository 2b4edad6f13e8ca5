"""Write the kiosk benchmark's shipped traffic (``bench/data/routing``) from the public routing data.

Run once by a maintainer (``python -m bench.curate_traffic --source DIR``, DIR the shared routing data);
the output is committed, so the benchmark and its tests run in a fresh clone without the source.
Rules, so that the traffic measures the router on text it never learned from:

* single-turn rows only from the intent classifier's dev split (``models.intent.dataset.is_dev``):
  the shipped classifier was trained on the other 85%;
* never a text of the classifier's threshold split or held-out sets (``models/intent/data/threshold``,
  ``models/intent/data/heldout``, ``models/intent/data/heldout_v5``), compared after the classifier's own
  normalisation;
* rows the benchmark would drop anyway are left out (over ``MAX_CHARS`` characters);
* per kind and language a fixed quota, spread over the sources in proportion to what each offers,
  picked by a seeded random sample (stable for the same source files);
* a multi-turn row keeps its messages up to the last user turn the benchmark sends
  (``MAX_TURNS``); every text is copied verbatim.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

from models.intent.dataset import is_dev, text_key

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = REPO_ROOT / "bench" / "data" / "routing"
EXCLUDED_DIRS = (REPO_ROOT / "models" / "intent" / "data" / "threshold",
                 REPO_ROOT / "models" / "intent" / "data" / "heldout",
                 REPO_ROOT / "models" / "intent" / "data" / "heldout_v5")
MAX_CHARS = 1200
MAX_TURNS = 3
SEED = 18
# (kind, lang) -> rows. kind: "simple" (label edge), "complex" (label cloud), "multi" (with messages).
QUOTAS: dict[tuple[str, str], int] = {
    ("simple", "en"): 200, ("simple", "zh"): 150,
    ("complex", "en"): 200, ("complex", "zh"): 136,
    ("multi", "en"): 100, ("multi", "zh"): 80,
}


def excluded_keys(dirs: tuple[Path, ...] = EXCLUDED_DIRS) -> set[str]:
    """Normalised keys of every text in the classifier's threshold and held-out sets."""
    keys: set[str] = set()
    for folder in dirs:
        for path in sorted(folder.glob("*.jsonl")):
            for line in _lines(path):
                if line.strip():
                    keys.add(text_key(json.loads(line)["text"]))
    return keys


def _lines(path: Path) -> list[str]:
    """JSON lines split on "\\n" only (``str.splitlines`` would also split at U+2028 inside a string)."""
    return path.read_text(encoding="utf-8").split("\n")


def _kind(row: dict[str, Any]) -> str:
    if row.get("messages"):
        return "multi"
    return "simple" if row.get("label") == "edge" else "complex"


def _trim(row: dict[str, Any]) -> dict[str, Any] | None:
    """The row as the benchmark uses it, or None if it would be dropped."""
    if row.get("messages"):
        kept, users = [], 0
        for message in row["messages"]:
            if message.get("role") == "user":
                if users == MAX_TURNS:
                    break
                users += 1
            kept.append(message)
        while kept and kept[-1].get("role") != "user":
            kept.pop()
        if any(len(m.get("content", "")) > MAX_CHARS for m in kept if m.get("role") == "user"):
            return None
        return {**row, "messages": kept}
    text = row.get("text", "")
    if not text or len(text) > MAX_CHARS or not is_dev(text):
        return None
    return row


def curate(source_dir: Path, quotas: dict[tuple[str, str], int] = QUOTAS, seed: int = SEED,
           ) -> dict[str, list[dict[str, Any]]]:
    """Rows per source file name, each file's rows in the source's order."""
    excluded = excluded_keys()
    candidates: dict[tuple[str, str], dict[str, list[tuple[int, dict[str, Any]]]]] = defaultdict(
        lambda: defaultdict(list))
    for path in sorted(Path(source_dir).glob("*.jsonl")):
        for n, line in enumerate(_lines(path)):
            if not line.strip():
                continue
            row = _trim(json.loads(line))
            if row is None or text_key(row["text"]) in excluded:
                continue
            candidates[(_kind(row), row.get("lang", "en"))][path.name].append((n, row))
    rng = random.Random(seed)
    picked: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for key, quota in sorted(quotas.items()):
        by_file = candidates.get(key, {})
        total = sum(len(v) for v in by_file.values())
        if not total:
            continue
        remaining = min(quota, total)
        files = sorted(by_file)
        for i, name in enumerate(files):
            share = remaining if i == len(files) - 1 else min(
                len(by_file[name]), round(min(quota, total) * len(by_file[name]) / total))
            share = min(share, len(by_file[name]))
            picked[name] += rng.sample(by_file[name], share)
            remaining -= share
    return {name: [row for _, row in sorted(rows, key=lambda item: item[0])] for name, rows in picked.items()}


def json_line(row: dict[str, Any]) -> str:
    """One JSON line, UTF-8 text kept readable, with every character that ``str.splitlines`` would break
    on escaped (readers of these files split them either way)."""
    line = json.dumps(row, ensure_ascii=False)
    for char in ("\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"):
        line = line.replace(char, f"\\u{ord(char):04x}")
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write bench/data/routing from the public routing data")
    parser.add_argument("--source", type=Path, required=True, help="folder of the routing *.jsonl files")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in sorted(curate(args.source).items()):
        with open(args.out / name, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json_line(row) + "\n")
        print(f"{name}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
