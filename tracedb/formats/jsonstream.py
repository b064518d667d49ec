"""Streaming reader for Chrome-trace JSON (Kineto, TF timeline, any `traceEvents` file).

A profiler trace can be a gigabyte of JSON; `json.load` would build every event as a
Python dict at once (several times the file's size). `EventStream` instead decodes the
document top-down from a bounded text buffer: top-level keys are decoded whole (they are
small metadata), and the `traceEvents` array is yielded one event at a time with
`JSONDecoder.raw_decode` (C speed). The buffer holds one chunk plus the event being
decoded, so memory stays flat whatever the file size.

Numbers with a fraction decode to `JNum`, a float that also keeps its source text, so
`us_to_ns` converts `ts`/`dur` to integer ns exactly: a float has ~16 significant digits,
and absolute epoch µs (1.7e15) with a 3-digit fraction does not fit. Being a float, a JNum
serializes (json.dumps) and compares like any other number.
"""

from __future__ import annotations

import codecs
import json
import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Iterator

from tracedb.errors import TraceFormatError
from tracedb.formats.base import open_trace

CHUNK_CHARS = 1 << 20
# A single event (or top-level value) larger than this is taken as malformed JSON rather
# than read on to the end of a huge file looking for its end.
MAX_VALUE_CHARS = 256 << 20

_WS = re.compile(r"[ \t\n\r]*")


class JNum(float):
    """A JSON number with a fraction or exponent; `.text` is its source text."""

    def __new__(cls, text: str) -> "JNum":
        obj = float.__new__(cls, text)
        obj.text = text
        return obj


def us_to_ns(v: Any) -> int:
    """Chrome-trace microseconds (int, JNum text or float) -> integer ns, exactly."""
    if type(v) is int:
        return v * 1000
    if type(v) is JNum:
        v = v.text
    if isinstance(v, str):
        whole, _, frac = v.partition(".")
        if len(frac) <= 3 and frac.isdigit() and whole.lstrip("-").isdigit():
            return int(whole + frac.ljust(3, "0"))
        try:
            return int((Decimal(v) * 1000).to_integral_value(ROUND_HALF_EVEN))
        except InvalidOperation:
            raise TraceFormatError(f"not a number: {v!r}") from None
    if isinstance(v, float):
        return round(v * 1000)
    raise TraceFormatError(f"not a number: {v!r}")


def num(v: Any) -> float | int | None:
    """A decoded number as int/float; None when absent or not numeric."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v
    return None


class EventStream:
    """Iterate the events of a Chrome-trace JSON file without loading it.

    Accepts `{"traceEvents": [...], ...}` (other top-level keys before or after the array
    go to `meta`) and a bare array of events. `meta` holds the keys seen so far: those
    before `traceEvents` are there when the first event is yielded, the rest once the
    iteration is over. Raises TraceFormatError for malformed or truncated JSON, a document
    that is not a trace, and events that are not objects.
    """

    def __init__(self, path: Path, chunk_chars: int = CHUNK_CHARS):
        self.path = path
        self.chunk_chars = chunk_chars
        self.meta: dict[str, Any] = {}
        self._decode = json.JSONDecoder(parse_float=JNum).raw_decode

    # -- buffer -------------------------------------------------------------------------
    def _fill(self, want: int) -> None:
        """Append at least `want` more chars (fewer only at EOF) and drop consumed text."""
        self._consumed += self._pos
        parts = [self._buf[self._pos:]]
        got = 0
        while got < want and not self._eof:
            try:
                raw = self._f.read(max(want - got, self.chunk_chars))
            except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
                raise TraceFormatError(f"truncated or corrupt gzip: {e}") from e
            try:
                text = self._utf8.decode(raw, final=not raw)
            except UnicodeDecodeError as e:
                raise TraceFormatError(f"not UTF-8 text: {e}") from e
            if not raw:
                self._eof = True
            parts.append(text)
            got += len(text)
        self._buf = "".join(parts)
        self._pos = 0

    def _peek(self) -> str:
        """Next non-whitespace char (consumed whitespace), '' at EOF."""
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if self._eof:
                return ""
            self._fill(self.chunk_chars)

    def _where(self) -> str:
        return f"at char {self._consumed + self._pos}"

    def _expect(self, chars: str, what: str) -> str:
        c = self._peek()
        if not c:
            raise TraceFormatError(f"truncated JSON: expected {what} {self._where()}, got end of file")
        if c not in chars:
            raise TraceFormatError(f"invalid JSON: expected {what} {self._where()}, got {c!r}")
        self._pos += 1
        return c

    def _value(self) -> Any:
        """Decode the JSON value at the cursor, reading more text until it is complete."""
        self._peek()
        while True:
            try:
                val, end = self._decode(self._buf, self._pos)
                # A number or literal ending exactly at the buffer's end may be cut short.
                if end < len(self._buf) or self._eof:
                    self._pos = end
                    return val
                msg, at = None, end
            except json.JSONDecodeError as e:
                # Keep plain values only: the exception's traceback -> this frame -> the
                # exception is a cycle that would pin each old buffer until a GC pass.
                msg, at = e.msg, e.pos
            if self._eof:
                cut = msg is None or at >= len(self._buf) - 1 or msg.startswith("Unterminated")
                raise TraceFormatError(
                    f"truncated JSON: value starting {self._where()} is cut off by the end of file"
                    if cut else f"invalid JSON {self._where()}: {msg} (char {self._consumed + at})"
                )
            pending = len(self._buf) - self._pos
            if pending > MAX_VALUE_CHARS:
                raise TraceFormatError(
                    f"invalid JSON {self._where()}: no complete value within {MAX_VALUE_CHARS} chars"
                    + (f" ({msg})" if msg else "")
                )
            self._fill(max(self.chunk_chars, pending))  # doubling: linear time for big values

    # -- document -----------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict]:
        self._buf, self._pos, self._consumed, self._eof = "", 0, 0, False
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        with open_trace(self.path) as self._f:
            c = self._peek()
            if c == "[":
                self._pos += 1
                yield from self._events()
            elif c == "{":
                self._pos += 1
                seen_events = False
                if self._peek() == "}":
                    self._pos += 1
                else:
                    while True:
                        if self._peek() != '"':
                            self._expect('"', "a key")
                        key = self._value()
                        self._expect(":", "':'")
                        if key == "traceEvents":
                            self._expect("[", "the traceEvents array '['")
                            seen_events = True
                            yield from self._events()
                        else:
                            self.meta[key] = self._value()
                        if self._expect(",}", "',' or '}'") == "}":
                            break
                if not seen_events:
                    raise TraceFormatError("not a Chrome trace: the JSON object has no 'traceEvents' array")
            elif not c:
                raise TraceFormatError("empty file")
            else:
                raise TraceFormatError(f"not a Chrome trace: expected a JSON object or array, got {c!r}")
            if self._peek():
                raise TraceFormatError(f"invalid JSON: extra data after the document {self._where()}")

    def _events(self) -> Iterator[dict]:
        if self._peek() == "]":
            self._pos += 1
            return
        i = 0
        while True:
            ev = self._value()
            if not isinstance(ev, dict):
                raise TraceFormatError(f"trace event #{i} is not a JSON object")
            yield ev
            i += 1
            if self._expect(",]", "',' or ']' in traceEvents") == "]":
                return
