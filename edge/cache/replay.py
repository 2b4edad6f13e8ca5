"""Cut a cached answer into the chunks a streaming model would have sent.

A kiosk UI that streams expects many small deltas; one blob arrives as a jump and some SDKs
render it without the typing effect the UI designer planned. Latin text goes out a word at a
time (with its leading space, as model tokens carry it), Chinese, Japanese and Korean text one
to two characters at a time. The chunks always join back to exactly the stored text.
"""

from __future__ import annotations

import re

_CJK = "\u3000-\u303f\uff00-\uffef\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
# Leading whitespace + (1-2 CJK characters | a run of anything else that is not a space), or a
# trailing run of whitespace. Together the alternatives cover every character of any string.
_CHUNK = re.compile(rf"\s*(?:[{_CJK}]{{1,2}}|[^\s{_CJK}]+)|\s+")


def replay_chunks(text: str) -> list[str]:
    """Word groups for Latin text, 1-2 character groups for CJK; ``"".join(result) == text``."""
    if not text:
        return []
    chunks = _CHUNK.findall(text)
    # A trailing whitespace run matched on its own is folded into the previous chunk.
    if len(chunks) > 1 and not chunks[-1].strip():
        tail = chunks.pop()
        chunks[-1] += tail
    return chunks


__all__ = ["replay_chunks"]
