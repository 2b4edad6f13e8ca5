"""Which of the encoder's 250,002 pieces the device keeps: those English and Chinese text uses.

``multilingual-e5-small`` spends 96 of its 118 million weights on a vocabulary for a hundred languages. A kiosk
reads English and Chinese, so the exporter keeps the pieces that tokenizing English and Chinese text reaches:
- the commonest words of each language (``wordfreq``'s lists: Apache-2.0 code, CC BY-SA 4.0 data; read at export
  time only, never shipped), each English word also capitalised;
- every text the router was trained on;
- every single-character piece of Latin, general punctuation, CJK and full-width forms, so that any word of
  those scripts can still be spelled;
- the four special pieces, first, in their own order (``<s>``, ``<pad>``, ``</s>``, ``<unk>``).
Text outside the kept pieces is still tokenized (``unigram.py``: smaller pieces, then ``<unk>``), so the cut
costs accuracy only where a dropped piece was the best segmentation; the export's check measures that.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from models.encoder.unigram import METASPACE, UnigramTokenizer


def _kept_char(ch: str) -> bool:
    c = ord(ch)
    return (c < 0x250 or 0x2000 <= c < 0x2070 or 0x3000 <= c < 0x3040 or 0x3400 <= c < 0x4DC0
            or 0x4E00 <= c < 0xA000 or 0xFF00 <= c < 0xFFF0)


def wordfreq_words(path: str | Path, limit: int) -> list[str]:
    """The ``limit`` commonest words of one ``wordfreq`` list (``large_en.msgpack.gz``: a header, then lists of
    words by falling frequency)."""
    import msgpack  # export-time only

    data = msgpack.loads(gzip.decompress(Path(path).read_bytes()), raw=False)
    return [w for bucket in data[1:] for w in bucket][:limit]


def kept_pieces(tokenizer: UnigramTokenizer, pieces: list[str], specials: Iterable[int],
                english: Iterable[str], chinese: Iterable[str], texts: Iterable[str]) -> np.ndarray:
    """Original ids of the kept pieces, specials first, the rest ascending."""
    used: set[int] = set()
    for word in english:
        used.update(tokenizer.content_ids(word))
        used.update(tokenizer.content_ids(word.capitalize()))
    for word in chinese:
        used.update(tokenizer.content_ids(word))
    for text in texts:
        used.update(tokenizer.content_ids("query: " + text))
    for i, piece in enumerate(pieces):
        bare = piece.replace(METASPACE, "")
        if len(bare) == 1 and _kept_char(bare):
            used.add(i)
    first = list(specials)
    return np.asarray(first + sorted(used - set(first) - {tokenizer.unk}), np.int64)
