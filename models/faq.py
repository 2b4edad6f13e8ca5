"""The operator FAQ-pack format: question -> answer pairs (with paraphrases) as JSON or CSV.

A mall puts its own opening hours on every kiosk by shipping an FAQ pack, either next to the
gateway's settings or inside a signed model bundle. Two readers need the same rules: the gateway's
answer cache (which serves the answers) and the fleet update agent (which smoke-tests a bundle's
pack before it activates the bundle). So the parser lives here, pure and free of any ``edge``
import, and it rejects a bad pack with one clear ``ValueError`` instead of half-loading it: a
kiosk answering with a truncated or mis-columned pack would state wrong facts with confidence.

JSON::

    {"format": "edgecloud-faq", "version": 1, "name": "mall",
     "entries": [{"id": "hours", "lang": "en", "question": "When does the mall open?",
                  "answer": "...", "paraphrases": ["What time does the mall open?"]}]}

(a bare list of entry objects is accepted too). CSV: a header row with ``question`` and
``answer`` and optional ``paraphrases`` (separated by ``|``), ``id`` and ``lang`` columns.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT_NAME = "edgecloud-faq"
FORMAT_VERSION = 1
MAX_PACK_BYTES = 4 * 1024 * 1024
MAX_ENTRIES = 10_000
MAX_QUESTION_CHARS = 500
MAX_ANSWER_CHARS = 8_000
MAX_PARAPHRASES = 50
PARAPHRASE_SEPARATOR = "|"
_ENTRY_FIELDS = {"id", "lang", "question", "answer", "paraphrases"}


@dataclass
class FaqEntry:
    """One operator answer and every phrasing of the question it answers."""

    question: str
    answer: str
    paraphrases: list[str] = field(default_factory=list)
    id: str | None = None
    lang: str | None = None

    def questions(self) -> list[str]:
        """The question first, then its paraphrases: every text that should get this answer."""
        return [self.question, *self.paraphrases]


def load_faq_pack(path: Path) -> list[FaqEntry]:
    """Read and validate a pack; ``.csv`` files are CSV, everything else JSON.

    Raises ``ValueError`` naming the file and the entry at fault.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ValueError(f"FAQ pack {path}: cannot be read ({exc.strerror or exc})") from exc
    if size > MAX_PACK_BYTES:
        raise ValueError(f"FAQ pack {path}: {size} bytes, larger than the {MAX_PACK_BYTES}-byte limit")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"FAQ pack {path}: cannot be read ({exc.strerror or exc})") from exc
    kind = "csv" if path.suffix.lower() == ".csv" else "json"
    return parse_faq_pack(data, kind, source=str(path))


def parse_faq_pack(data: bytes | str, kind: str = "json", source: str = "<pack>") -> list[FaqEntry]:
    """Validate a pack held in memory (an admin upload); ``kind`` is ``json`` or ``csv``."""
    if isinstance(data, bytes):
        if len(data) > MAX_PACK_BYTES:
            raise ValueError(f"FAQ pack {source}: larger than the {MAX_PACK_BYTES}-byte limit")
        try:
            text = data.decode("utf-8-sig")  # Excel writes CSV with a BOM
        except UnicodeDecodeError as exc:
            raise ValueError(f"FAQ pack {source}: not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    else:
        text = data.removeprefix("\ufeff")
    if kind == "csv":
        raw_entries = _csv_rows(text, source)
    elif kind == "json":
        raw_entries = _json_entries(text, source)
    else:
        raise ValueError(f"FAQ pack {source}: unknown format {kind!r} (use json or csv)")
    if not raw_entries:
        raise ValueError(f"FAQ pack {source}: no entries")
    if len(raw_entries) > MAX_ENTRIES:
        raise ValueError(f"FAQ pack {source}: {len(raw_entries)} entries, more than {MAX_ENTRIES}")
    entries = [_entry(raw, index, source) for index, raw in enumerate(raw_entries, start=1)]
    _check_unique_ids(entries, source)
    return entries


def _json_entries(text: str, source: str) -> list[Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"FAQ pack {source}: invalid JSON ({exc.msg} at line {exc.lineno})") from exc
    if isinstance(doc, list):
        return doc
    if not isinstance(doc, dict):
        raise ValueError(f"FAQ pack {source}: expected an object with 'entries' or a list of entries")
    fmt = doc.get("format", FORMAT_NAME)
    if fmt != FORMAT_NAME:
        raise ValueError(f"FAQ pack {source}: format {fmt!r} is not {FORMAT_NAME!r}")
    version = doc.get("version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise ValueError(f"FAQ pack {source}: version {version!r} is not supported (only {FORMAT_VERSION})")
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise ValueError(f"FAQ pack {source}: 'entries' must be a list")
    return entries


def _csv_rows(text: str, source: str) -> list[Any]:
    reader = csv.DictReader(io.StringIO(text))
    header = [name.strip().lower() for name in (reader.fieldnames or [])]
    if "question" not in header or "answer" not in header:
        raise ValueError(f"FAQ pack {source}: the CSV header must name 'question' and 'answer' columns")
    unknown = set(header) - _ENTRY_FIELDS
    if unknown:
        raise ValueError(f"FAQ pack {source}: unknown CSV columns {sorted(unknown)}")
    rows: list[Any] = []
    try:
        for row in reader:
            if None in row:  # more cells than header columns: a comma inside an unquoted answer
                raise ValueError(
                    f"FAQ pack {source}: line {reader.line_num} has more cells than the header "
                    "(quote answers that contain commas)"
                )
            clean = {(k or "").strip().lower(): (v or "").strip() for k, v in row.items()}
            if not any(clean.values()):
                continue  # blank line
            paraphrases = clean.get("paraphrases", "")
            clean["paraphrases"] = [p.strip() for p in paraphrases.split(PARAPHRASE_SEPARATOR) if p.strip()]
            for optional in ("id", "lang"):
                if not clean.get(optional):
                    clean.pop(optional, None)
            rows.append(clean)
    except csv.Error as exc:
        raise ValueError(f"FAQ pack {source}: bad CSV at line {reader.line_num} ({exc})") from exc
    return rows


def _text(value: Any, what: str, where: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: '{what}' must be a non-empty string")
    value = value.strip()
    if len(value) > limit:
        raise ValueError(f"{where}: '{what}' is {len(value)} characters, more than {limit}")
    return value


def _entry(raw: Any, index: int, source: str) -> FaqEntry:
    where = f"FAQ pack {source}: entry {index}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: must be an object")
    unknown = set(raw) - _ENTRY_FIELDS
    if unknown:
        raise ValueError(f"{where}: unknown fields {sorted(unknown)}")
    question = _text(raw.get("question"), "question", where, MAX_QUESTION_CHARS)
    answer = _text(raw.get("answer"), "answer", where, MAX_ANSWER_CHARS)
    paraphrases_raw = raw.get("paraphrases", [])
    if not isinstance(paraphrases_raw, list):
        raise ValueError(f"{where}: 'paraphrases' must be a list of strings")
    if len(paraphrases_raw) > MAX_PARAPHRASES:
        raise ValueError(f"{where}: more than {MAX_PARAPHRASES} paraphrases")
    paraphrases = [_text(p, "paraphrases[]", where, MAX_QUESTION_CHARS) for p in paraphrases_raw]
    entry_id = raw.get("id")
    if entry_id is not None:
        entry_id = _text(entry_id, "id", where, 100)
    lang = raw.get("lang")
    if lang is not None:
        lang = _text(lang, "lang", where, 20)
    return FaqEntry(question=question, answer=answer, paraphrases=paraphrases, id=entry_id, lang=lang)


def _check_unique_ids(entries: list[FaqEntry], source: str) -> None:
    seen: set[str] = set()
    for entry in entries:
        if entry.id is None:
            continue
        if entry.id in seen:
            raise ValueError(f"FAQ pack {source}: the id {entry.id!r} is used twice")
        seen.add(entry.id)


__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "FaqEntry", "load_faq_pack", "parse_faq_pack"]
