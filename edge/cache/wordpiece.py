"""BERT's uncased WordPiece tokenizer in plain Python, for the semantic cache's embedding model.

The ONNX model ships without a tokenizer, and the ``tokenizers``/``transformers`` packages would
bring far more than a kiosk needs for 20-token questions. This is the reference algorithm
(basic tokenisation: clean, split CJK characters, lower-case, strip accents, split punctuation;
then greedy longest-match WordPiece) over the model's own vocabulary.
"""

from __future__ import annotations

import json
import unicodedata
from functools import lru_cache
from pathlib import Path

VOCAB_PATH = Path(__file__).with_name("minilm_vocab.json")
MAX_WORD_CHARS = 100


def _is_cjk(code: int) -> bool:
    return (
        0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0x20000 <= code <= 0x2A6DF
        or 0x2A700 <= code <= 0x2B73F or 0x2B740 <= code <= 0x2B81F or 0x2B820 <= code <= 0x2CEAF
        or 0xF900 <= code <= 0xFAFF or 0x2F800 <= code <= 0x2FA1F
    )


def _is_punctuation(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _basic_tokens(text: str) -> list[str]:
    out: list[str] = []
    for char in text:
        code = ord(char)
        if code == 0 or code == 0xFFFD or (unicodedata.category(char) in ("Cc", "Cf") and char not in "\t\n\r"):
            continue
        if char.isspace():
            out.append(" ")
        elif _is_cjk(code):
            out.extend((" ", char, " "))
        else:
            out.append(char)
    tokens: list[str] = []
    for word in "".join(out).split():
        word = unicodedata.normalize("NFD", word.lower())
        word = "".join(c for c in word if unicodedata.category(c) != "Mn")
        current = ""
        for char in word:
            if _is_punctuation(char):
                if current:
                    tokens.append(current)
                tokens.append(char)
                current = ""
            else:
                current += char
        if current:
            tokens.append(current)
    return tokens


class WordPiece:
    """``encode(text) -> ids`` with ``[CLS]`` and ``[SEP]``, truncated to ``max_length``."""

    def __init__(self, vocab: list[str], max_length: int = 128) -> None:
        self.vocab = {token: index for index, token in enumerate(vocab)}
        self.unk = self.vocab["[UNK]"]
        self.cls = self.vocab["[CLS]"]
        self.sep = self.vocab["[SEP]"]
        self.max_length = max_length

    @classmethod
    def load(cls, path: Path = VOCAB_PATH, max_length: int = 128) -> WordPiece:
        with open(path, encoding="utf-8") as fh:
            return cls(json.load(fh)["tokens"], max_length)

    def _word_ids(self, word: str) -> list[int]:
        if len(word) > MAX_WORD_CHARS:
            return [self.unk]
        ids: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    found = self.vocab[piece]
                    break
                end -= 1
            if found is None:
                return [self.unk]
            ids.append(found)
            start = end
        return ids

    def encode(self, text: str) -> list[int]:
        ids = [self.cls]
        for word in _basic_tokens(text):
            ids.extend(self._cached_word_ids(word))
            if len(ids) >= self.max_length - 1:
                ids = ids[: self.max_length - 1]
                break
        ids.append(self.sep)
        return ids

    @lru_cache(maxsize=8192)  # noqa: B019 - one tokenizer per process, words repeat all day
    def _cached_word_ids(self, word: str) -> tuple[int, ...]:
        return tuple(self._word_ids(word))


__all__ = ["VOCAB_PATH", "WordPiece"]
