"""Incremental Server-Sent Events parser, written to the WHATWG spec rather than to one vendor.

Upstreams differ: multi-line ``data:`` fields, ``: keep-alive`` comments, CRLF or CR line ends,
events split across TCP reads (or many in one read), ``event: error``. Parsing bytes as they
arrive, instead of line-splitting decoded text per read, is what makes splits harmless.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class SSEEvent:
    data: str
    event: str = "message"
    id: str | None = None


class SSEParser:
    """Feed raw bytes; get complete events. Comments and empty events are dropped."""

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        buf = self._buf + chunk
        if self._pending_cr and buf:  # an empty read keeps the pending CR for the next one
            if buf.startswith(b"\n"):
                buf = buf[1:]  # the LF of a CRLF split across reads
            self._pending_cr = False
        if b"\r" not in buf:  # the common case (LF only): C-level splits instead of a find loop
            if not self._data and not self._event and b"\n\n" in buf:
                return self._feed_blocks(buf)
            lines = buf.split(b"\n")
            self._buf = lines.pop()
            for raw in lines:
                event = self._line(raw.decode("utf-8", errors="replace"))
                if event is not None:
                    events.append(event)
            return events
        start = 0
        length = len(buf)
        while start < length:
            cr = buf.find(b"\r", start)
            lf = buf.find(b"\n", start)
            if cr == -1 and lf == -1:
                break
            if cr == -1 or (lf != -1 and lf < cr):
                end, nxt = lf, lf + 1
            else:
                end = cr
                if cr + 1 < length:
                    nxt = cr + 2 if buf[cr + 1 : cr + 2] == b"\n" else cr + 1
                else:
                    nxt = cr + 1
                    self._pending_cr = True
            event = self._line(buf[start:end].decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
            start = nxt
        self._buf = buf[start:]
        return events

    def _feed_blocks(self, buf: bytes) -> list[SSEEvent]:
        """Whole events at once; a block that is one ``data: `` line (what every LLM API sends)
        becomes an event without the per-line state machine, anything else goes through it."""
        events: list[SSEEvent] = []
        *blocks, self._buf = buf.split(b"\n\n")
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:
                events.append(SSEEvent(block[6:].decode("utf-8", errors="replace"), "message", self._id))
                continue
            for raw in block.split(b"\n"):
                event = self._line(raw.decode("utf-8", errors="replace"))
                if event is not None:
                    events.append(event)
            event = self._dispatch()
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # comment / keep-alive ping
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None  # "retry" and unknown fields are ignored, as the spec says

    def _dispatch(self) -> SSEEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = SSEEvent(data="\n".join(self._data), event=self._event or "message", id=self._id)
        self._data = []
        self._event = ""
        return event

    @property
    def pending_bytes(self) -> int:
        """Bytes held for an unfinished line: a stream that ends with some is truncated."""
        return len(self._buf) + sum(len(d) for d in self._data)
