"""The operator's venue knowledge pack: facts (floors, hours, prices, policies) in Markdown or JSON.

A kiosk answers venue questions from these facts instead of from a model's weights, which know
nothing about this mall. Two readers need the same rules, the gateway (which indexes the facts)
and the fleet update agent (which smoke-tests a bundle's pack before activating it), so the parser
lives here, pure and free of any ``edge`` import. A bad pack is refused whole with one
``ValueError`` naming the file and the line: a half-loaded pack would make the kiosk state wrong
facts with confidence, and "entry 37" is useless to an operator editing a Markdown file.

Markdown (what an operator writes by hand)::

    ---
    name: harbourview-mall
    version: 2026.12.1
    refusal.en: Sorry, I don't know. Please ask at the Information Desk on L1.
    refusal.zh: 抱歉，我不知道。请到L1服务台咨询。
    ---
    ## restroom-l1 (en)
    keywords: toilet, washroom, WC
    faq: Where is the restroom?
    Restrooms are behind the central escalators on every level.

Each ``## id (lang)`` heading starts one fact; ``keywords:`` adds words visitors use that the text
does not; ``faq:`` lists questions (``|``-separated) answered with the fact's text word for word by
the answer cache. Text before the first heading is commentary.

JSON::

    {"format": "edgecloud-knowledge", "version": 1, "name": "harbourview-mall",
     "pack_version": "2026.12.1", "refusal": {"en": "...", "zh": "..."},
     "facts": [{"id": "restroom-l1", "lang": "en", "text": "...", "keywords": ["toilet"],
                "faq": ["Where is the restroom?"]}],
     "faq": [{"question": "...", "answer": "...", "paraphrases": [...]}]}

(``faq`` entries follow ``models.faq``'s format: one file carries both.) The pack's identity for
cache invalidation is ``name@pack_version#digest``: the digest covers the content, so an edited
pack whose operator forgot to bump the version still invalidates the answers built on the old one.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.faq import FaqEntry, parse_faq_pack

FORMAT_NAME = "edgecloud-knowledge"
FORMAT_VERSION = 1
MAX_PACK_BYTES = 8 * 1024 * 1024
MAX_FACTS = 20_000
MAX_FACT_CHARS = 2_000  # a chunk must fit a grounded prompt's budget several times over
MAX_KEYWORDS_CHARS = 500
MAX_REFUSAL_CHARS = 500
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$")
_LANG_RE = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$")
_HEADING_RE = re.compile(r"^##\s+(\S+)(?:\s+\(([^)]*)\))?\s*$")
_FACT_FIELDS = {"id", "lang", "text", "keywords", "faq", "title"}
_TOP_FIELDS = {"format", "version", "name", "pack_version", "refusal", "facts", "faq", "title"}


@dataclass(frozen=True)
class Fact:
    """One retrievable chunk: a fact in one language, with the line it came from."""

    id: str
    lang: str
    text: str
    keywords: tuple[str, ...] = ()
    faq: tuple[str, ...] = ()
    line: int = 0  # 1-based line in a Markdown pack; 0 for JSON

    @property
    def key(self) -> str:
        """Unique within a pack: the same fact id may exist once per language."""
        return f"{self.id}/{self.lang}"


@dataclass(frozen=True)
class KnowledgePack:
    name: str
    pack_version: str
    facts: tuple[Fact, ...]
    refusal: dict[str, str] = field(default_factory=dict)
    faq: tuple[FaqEntry, ...] = ()
    digest: str = ""
    title: str = ""
    source: str = ""

    @property
    def version(self) -> str:
        """What the answer cache keys on: operator version plus content digest."""
        return f"{self.name}@{self.pack_version}#{self.digest[:12]}"

    @property
    def languages(self) -> list[str]:
        return sorted({f.lang for f in self.facts})

    def faq_entries(self) -> list[FaqEntry]:
        """The pack's FAQ entries, plus one per fact that lists ``faq`` questions (its text answers)."""
        out = list(self.faq)
        for fact in self.facts:
            if fact.faq:
                out.append(FaqEntry(question=fact.faq[0], answer=fact.text, paraphrases=list(fact.faq[1:]),
                                    id=f"{fact.id}/{fact.lang}", lang=fact.lang))
        return out


def load_knowledge_pack(path: Path) -> KnowledgePack:
    """Read and validate a pack file: ``.md``/``.markdown`` is Markdown, everything else JSON."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_PACK_BYTES:
            raise ValueError(f"knowledge pack {path}: {size} bytes, larger than the {MAX_PACK_BYTES}-byte limit")
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"knowledge pack {path}: cannot be read ({exc.strerror or exc})") from exc
    kind = "markdown" if path.suffix.lower() in (".md", ".markdown") else "json"
    return parse_knowledge_pack(data, kind, source=str(path))


def parse_knowledge_pack(data: bytes | str, kind: str = "json", source: str = "<pack>") -> KnowledgePack:
    """Validate a pack held in memory (an admin upload); ``kind`` is ``json`` or ``markdown``."""
    text = _decode(data, source)
    if kind == "markdown":
        pack = _parse_markdown(text, source)
    elif kind == "json":
        pack = _parse_json(text, source)
    else:
        raise ValueError(f"knowledge pack {source}: unknown format {kind!r} (use json or markdown)")
    if not pack.facts:
        raise ValueError(f"knowledge pack {source}: no facts")
    if len(pack.facts) > MAX_FACTS:
        raise ValueError(f"knowledge pack {source}: {len(pack.facts)} facts, more than {MAX_FACTS}")
    seen: dict[str, Fact] = {}
    for fact in pack.facts:
        if fact.key in seen:
            where = f"line {fact.line}" if fact.line else f"fact {fact.id!r}"
            raise ValueError(f"knowledge pack {source}: {where}: the fact {fact.key!r} is defined twice")
        seen[fact.key] = fact
    faq = pack.faq_entries()
    if faq:  # the FAQ rules (question lengths, duplicates) are models.faq's: check them now, not at load
        parse_faq_pack(json.dumps([_faq_json(e) for e in faq], ensure_ascii=False), "json", source=source)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return KnowledgePack(name=pack.name, pack_version=pack.pack_version, facts=pack.facts, refusal=pack.refusal,
                         faq=pack.faq, digest=digest, title=pack.title, source=source)


def _faq_json(entry: FaqEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"question": entry.question, "answer": entry.answer, "paraphrases": entry.paraphrases}
    if entry.id:
        out["id"] = entry.id
    if entry.lang:
        out["lang"] = entry.lang
    return out


def _decode(data: bytes | str, source: str) -> str:
    if isinstance(data, str):
        return data.removeprefix("\ufeff")
    if len(data) > MAX_PACK_BYTES:
        raise ValueError(f"knowledge pack {source}: larger than the {MAX_PACK_BYTES}-byte limit")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ValueError(
            f"knowledge pack {source}: line {line}: not UTF-8 ({exc.reason} at byte {exc.start}); "
            "save the file as UTF-8"
        ) from exc


def _clean(value: str) -> str:
    return unicodedata.normalize("NFC", value).strip()


def _check_text(text: str, where: str) -> str:
    text = _clean(text)
    if not text:
        raise ValueError(f"{where}: the fact has no text")
    if len(text) > MAX_FACT_CHARS:
        raise ValueError(
            f"{where}: the fact is {len(text)} characters, more than {MAX_FACT_CHARS}: split it into smaller facts"
        )
    if any(unicodedata.category(ch) == "Cc" and ch not in "\n\t" for ch in text):
        raise ValueError(f"{where}: the fact contains control characters")
    return text


def _check_id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _ID_RE.match(value):
        raise ValueError(f"{where}: the id {value!r} must be letters, digits, '.', '_', ':' or '-' (at most 100)")
    return value


def _check_lang(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _LANG_RE.match(value):
        raise ValueError(f"{where}: the language {value!r} must be a code such as 'en' or 'zh'")
    return value


def _split_list(value: str, sep: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in value.split(sep) if p.strip())


def _check_meta(name: Any, version: Any, refusal: Any, source: str) -> tuple[str, str, dict[str, str]]:
    if name is None or version is None:
        raise ValueError(f"knowledge pack {source}: no 'name' or 'version' (Markdown: start the file with a "
                         "'---' header holding 'name:' and 'version:' lines; JSON: 'name' and 'pack_version')")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"knowledge pack {source}: 'name' {name!r} must be letters, digits, '.', '_' or '-'")
    if not isinstance(version, str) or not version.strip() or len(version) > 64:
        raise ValueError(f"knowledge pack {source}: 'version' must be a non-empty string (at most 64 characters)")
    if not isinstance(refusal, dict):
        raise ValueError(f"knowledge pack {source}: 'refusal' must map a language to the text")
    clean: dict[str, str] = {}
    for lang, text in refusal.items():
        _check_lang(lang, f"knowledge pack {source}: refusal")
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_REFUSAL_CHARS:
            raise ValueError(f"knowledge pack {source}: refusal.{lang} must be 1-{MAX_REFUSAL_CHARS} characters")
        clean[lang] = _clean(text)
    return name, version.strip(), clean


def _parse_markdown(text: str, source: str) -> KnowledgePack:
    lines = text.splitlines()
    meta: dict[str, str] = {}
    refusal: dict[str, str] = {}
    start = 0
    if lines and lines[0].strip() == "---":
        for number in range(1, len(lines)):
            line = lines[number]
            if line.strip() == "---":
                start = number + 1
                break
            if not line.strip():
                continue
            key, sep, value = line.partition(":")
            if not sep:
                raise ValueError(f"knowledge pack {source}: line {number + 1}: expected 'key: value' in the header")
            key = key.strip().lower()
            if key.startswith("refusal."):
                refusal[key.removeprefix("refusal.")] = value.strip()
            elif key in ("name", "version", "title"):
                meta[key] = value.strip()
            else:
                raise ValueError(f"knowledge pack {source}: line {number + 1}: unknown header field {key!r}")
        else:
            raise ValueError(f"knowledge pack {source}: line 1: the '---' header is not closed")
    name, version, refusal = _check_meta(meta.get("name"), meta.get("version"), refusal, source)

    facts: list[Fact] = []
    current: dict[str, Any] | None = None

    def close() -> None:
        if current is None:
            return
        where = f"knowledge pack {source}: line {current['line']}"
        body = "\n".join(current["body"]).strip()
        text_ = _check_text(body, where)
        facts.append(Fact(id=current["id"], lang=current["lang"], text=text_, keywords=current["keywords"],
                          faq=current["faq"], line=current["line"]))

    for number in range(start, len(lines)):
        line = lines[number]
        match = _HEADING_RE.match(line)
        if match:
            close()
            where = f"knowledge pack {source}: line {number + 1}"
            fact_id = _check_id(match.group(1), where)
            lang = _check_lang((match.group(2) or "").strip(), where)
            current = {"id": fact_id, "lang": lang, "line": number + 1, "body": [], "keywords": (), "faq": ()}
            continue
        if line.startswith("## "):
            raise ValueError(f"knowledge pack {source}: line {number + 1}: a fact heading is '## id (lang)'")
        if current is None:
            continue  # commentary before the first fact
        stripped = line.strip()
        lowered = stripped.lower()
        if not current["body"] and lowered.startswith("keywords:"):
            value = stripped.split(":", 1)[1]
            if len(value) > MAX_KEYWORDS_CHARS:
                raise ValueError(f"knowledge pack {source}: line {number + 1}: keywords longer than "
                                 f"{MAX_KEYWORDS_CHARS} characters")
            current["keywords"] = _split_list(value, ",")
        elif not current["body"] and lowered.startswith("faq:"):
            current["faq"] = _split_list(stripped.split(":", 1)[1], "|")
        else:
            current["body"].append(line)
    close()
    return KnowledgePack(name=name, pack_version=version, facts=tuple(facts), refusal=refusal,
                         title=meta.get("title", ""), source=source)


def _parse_json(text: str, source: str) -> KnowledgePack:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"knowledge pack {source}: line {exc.lineno}: invalid JSON ({exc.msg})") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"knowledge pack {source}: expected an object with 'facts'")
    unknown = set(doc) - _TOP_FIELDS
    if unknown:
        raise ValueError(f"knowledge pack {source}: unknown fields {sorted(unknown)}")
    if doc.get("format", FORMAT_NAME) != FORMAT_NAME:
        raise ValueError(f"knowledge pack {source}: format {doc.get('format')!r} is not {FORMAT_NAME!r}")
    if doc.get("version", FORMAT_VERSION) != FORMAT_VERSION:
        raise ValueError(f"knowledge pack {source}: format version {doc.get('version')!r} is not supported")
    name, version, refusal = _check_meta(doc.get("name"), doc.get("pack_version"), doc.get("refusal", {}), source)
    raw_facts = doc.get("facts")
    if not isinstance(raw_facts, list):
        raise ValueError(f"knowledge pack {source}: 'facts' must be a list")
    facts = [_json_fact(raw, index, source, text) for index, raw in enumerate(raw_facts, start=1)]
    faq: tuple[FaqEntry, ...] = ()
    if doc.get("faq"):
        faq = tuple(parse_faq_pack(json.dumps(doc["faq"], ensure_ascii=False), "json", source=f"{source} (faq)"))
    return KnowledgePack(name=name, pack_version=version, facts=tuple(facts), refusal=refusal, faq=faq,
                         title=str(doc.get("title", "")), source=source)


def _json_line(text: str, fact_id: Any) -> int:
    """Best effort: the line of a fact's id in the JSON text, so an error points into the file."""
    if isinstance(fact_id, str):
        needle = json.dumps(fact_id, ensure_ascii=False)
        position = text.find(needle)
        if position >= 0:
            return text.count("\n", 0, position) + 1
    return 0


def _json_fact(raw: Any, index: int, source: str, text: str) -> Fact:
    line = _json_line(text, raw.get("id") if isinstance(raw, dict) else None)
    where = f"knowledge pack {source}: " + (f"line {line}: fact {index}" if line else f"fact {index}")
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: must be an object")
    unknown = set(raw) - _FACT_FIELDS
    if unknown:
        raise ValueError(f"{where}: unknown fields {sorted(unknown)}")
    fact_id = _check_id(raw.get("id"), where)
    lang = _check_lang(raw.get("lang"), where)
    body = raw.get("text")
    if not isinstance(body, str):
        raise ValueError(f"{where}: 'text' must be a string")
    text_ = _check_text(body, where)
    keywords = raw.get("keywords", [])
    faq = raw.get("faq", [])
    for value, what in ((keywords, "keywords"), (faq, "faq")):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{where}: '{what}' must be a list of strings")
    if sum(len(k) for k in keywords) > MAX_KEYWORDS_CHARS:
        raise ValueError(f"{where}: keywords longer than {MAX_KEYWORDS_CHARS} characters")
    return Fact(id=fact_id, lang=lang, text=text_, keywords=tuple(k.strip() for k in keywords if k.strip()),
                faq=tuple(q.strip() for q in faq if q.strip()), line=line)


__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "Fact", "KnowledgePack", "load_knowledge_pack", "parse_knowledge_pack"]
