"""Streaming reader for Chrome-trace JSON (Kineto, TF timeline, any `traceEvents` file).

A profiler trace can be a gigabyte of JSON; `json.load` would build every event as a
Python dict at once (several times the file's size). `EventStream` instead decodes the
document top-down from a bounded text buffer: top-level keys are decoded whole (they are
small metadata), and the `traceEvents` array a buffer at a time: the text up to the
buffer's last complete-looking event is wrapped in `[...]` and decoded in one C call
(`_bulk`), no Python-level call per event; where that fails (an event longer than the
buffer, a cut that falls inside an event, malformed JSON) events are decoded one at a
time with `raw_decode`, which also gives the exact error. The buffer holds one or two
chunks plus the events decoded from one, so memory stays flat whatever the file size.
Chunks are small (64K chars) on purpose: the events of one then stay in the CPU cache
while the reader turns them into rows (1M-char chunks measured 40% slower).

`ObjectStream` walks any document the same way down to a given depth (MegEngine's
`profiler.host.<opr>`), yielding each value at that depth decoded whole, and markers for
the containers above; an object of such values is decoded many entries per C call where
a cut of the buffer works (`_bulk`), one entry at a time where its cuts keep failing
(entries with nested objects). 1.29 s CPU for a 77.8 MB MegEngine profile (315,822
entries); ijson (yajl2_c) needs 1.57 s for its raw parse events alone
(bench/bench_stream.py).

Numbers with a fraction decode to `JNum`, a float that also keeps its source text, so
`us_to_ns` converts `ts`/`dur` to integer ns exactly: a float has ~16 significant digits,
and absolute epoch µs (1.7e15) with a 3-digit fraction does not fit. Being a float, a JNum
serializes (json.dumps) and compares like any other number. Building a JNum is a
Python-level call per number, a third of the decoding time of a Kineto trace, so a reader
may ask for cheaper event numbers (top-level keys always decode to JNum):
`floats="text"`, the source text as a plain str (for a pass that only reads `ts`/`dur`),
or `floats="decimal"`, an exact `Decimal` (C) that `us_to_ns` and `num` accept; the
reader then turns Decimals into floats where a value leaves it (`plain`,
`json_default`).

Decoder: msgspec where it accepts the text, the standard library where it does not.
msgspec's `float_hook` gets a number's source text as json's `parse_float` does, so
JNum, text and Decimal numbers come out the same; what msgspec refuses (NaN, Infinity,
lone surrogates, raw control characters, invalid UTF-8, a BOM) or decodes only in part
is decoded by `json`, which also words the errors as before. On the 4.1 MB H200 fixture
(GC off, best of 7): `json` 40-44 ms, msgspec 25-32 ms (32 with Decimal floats); orjson
takes 27 ms but has no float hook, and its floats cannot give exact ns (16-digit
timestamps); a msgspec Struct of only the fields pass 1 reads decodes in 8 ms, but would
need a second decoding of every event for the rows. `decode_whole` decodes a document of
up to WHOLE_DECODE_BYTES in one call, so a reader's two passes walk the same events
(each event decoded once); larger documents stream as above (`_bulk` uses msgspec too).
`StructStream` streams a document's events into msgspec Structs of
the fields a reader reads, a buffer's cut at a time (the Kineto reader: `ts`/`dur` as
`msgspec.Raw` source text, other numbers native), with `EventStream`'s errors and its
standard-library fallback for what msgspec refuses.
"""

from __future__ import annotations

import codecs
import gc
import json
import re
from contextlib import contextmanager
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from json.encoder import c_make_encoder, encode_basestring_ascii
from pathlib import Path
from typing import Any, Callable, Iterator

import msgspec

from tracedb import process
from tracedb.errors import TraceFormatError
from tracedb.formats.base import open_trace

CHUNK_CHARS = 1 << 16
# A single event (or top-level value) larger than this is taken as malformed JSON rather
# than read on to the end of a huge file looking for its end.
MAX_VALUE_CHARS = 256 << 20

_WS = re.compile(r"[ \t\n\r]*")
_DICT = {dict}  # the types of a batch of events that are all objects
_NESTED = {Decimal, list, dict}  # what `plain` has to look inside
# Cuts tried per bulk decode (from the buffer's end back) before decoding one at a time.
_BULK_TRIES = 3
# Failed bulk decodes after which `ObjectStream` reads a container one entry at a time.
_BULK_MISSES = 2
# A document of at most this many (decompressed) bytes is decoded whole, once, by
# `decode_whole`; a larger one streams. Measured peak RSS of the reader
# (bench/bench_kineto_memory.py): 8.2 MB decoded whole 189 MB, 12.2 MB streamed 164 MB,
# 16 MB decoded whole 248 MB (json.load: 116 / 141 / 167 MB); the streaming reader's peak
# on a 258 MB trace is ~215 MB. So 8 MiB: one rank of the H200 fixture (4.1 MB) is read
# once, and no read peaks above the streaming reader's bound.
WHOLE_DECODE_BYTES = 8 << 20
_JSON_WS = re.compile(rb"[ \t\n\r]*")


class JNum(float):
    """A JSON number with a fraction or exponent; `.text` is its source text."""

    def __new__(cls, text: str) -> "JNum":
        obj = float.__new__(cls, text)
        obj.text = text
        return obj


class BadNumber(TraceFormatError):
    """A time that is no number of nanoseconds (NaN, infinity); `event_error` names its field."""

    def __init__(self, value: Any):
        super().__init__(f"not a finite number: {value!r}")
        self.value = value


class Ns(int):
    """A time a reader has converted to ns already, in bulk (exactly, as
    `us_to_ns` would): `us_to_ns` gives its value back."""

    __slots__ = ()


def us_to_ns(v: Any) -> int:
    """Chrome-trace microseconds (int, JNum, text, Decimal or float) -> integer ns, exactly."""
    if type(v) is int:
        return v * 1000
    if type(v) is Ns:
        return int(v)
    if type(v) is Decimal:
        if not v.is_finite():
            raise BadNumber(v)
        # The text path's arithmetic: exact for up to 3 decimals, else rounded half-even
        # (both round to context precision first, which only bites past int64 ns).
        n = v.scaleb(3)
        i = int(n)
        return i if i == n else int(n.to_integral_value(ROUND_HALF_EVEN))
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
        except (ValueError, OverflowError):  # Decimal('NaN'), Decimal('Infinity')
            raise BadNumber(v) from None
    if isinstance(v, float):
        if v != v or v in (_INF, -_INF):
            raise BadNumber(v)
        return round(v * 1000)
    raise TraceFormatError(f"not a number: {v!r}")


_INF = float("inf")


def event_error(e: Exception, ev: Any, i: int) -> TraceFormatError:
    """A one-line error for `e`, raised while turning event #i into a row: names the event
    (cat or ph, name) and, where a value of the event explains it, the field."""
    if not isinstance(ev, dict):
        return TraceFormatError(f"trace event #{i}: {e}")
    kind = ev.get("cat") or ev.get("ph")
    field = _field_of(ev, getattr(e, "value", None)) if isinstance(e, BadNumber) else _odd_field(ev)
    where = f" field {field}" if field else ""
    return TraceFormatError(f"{kind} event #{i} ({str(ev.get('name'))[:60]!r}){where}: "
                            f"{type(e).__name__ + ': ' if not isinstance(e, TraceFormatError) else ''}{e}")


def located(items: Iterator[Any]) -> Iterator[Any]:
    """Run a reader's generator, turning a ValueError / OverflowError / TypeError / BadNumber
    (NaN, a number past int64 where Python needs a C long) into a TraceFormatError that names
    the event: the innermost frame of the traceback holding an event `ev` and its index `i`.
    Zero cost until something fails; readers need no try blocks of their own."""
    it = iter(items)
    while True:
        try:
            item = next(it)
        except StopIteration:
            return
        except (ValueError, OverflowError, TypeError, BadNumber) as e:
            ev, i = _event_in(e.__traceback__)
            if i is None:
                raise TraceFormatError(f"{type(e).__name__}: {e}") from e
            raise event_error(e, ev, i) from e
        yield item


def _event_in(tb: Any) -> tuple[Any, int | None]:
    found: tuple[Any, int | None] = (None, None)
    while tb is not None:
        f_locals = tb.tb_frame.f_locals
        if type(f_locals.get("ev")) is dict and type(f_locals.get("i")) is int:
            found = (f_locals["ev"], f_locals["i"])
        tb = tb.tb_next
    return found


def _items(ev: dict) -> Iterator[tuple[str, Any]]:
    yield from ev.items()
    if isinstance(ev.get("args"), dict):
        for k, v in ev["args"].items():
            yield f"args.{k}", v


def _field_of(ev: dict, value: Any) -> str | None:
    return next((k for k, v in _items(ev) if v is value), None) or _odd_field(ev)


def _odd_field(ev: dict) -> str | None:
    """The first field holding a value no column can take: NaN, infinity, a number past int64."""
    for k, v in _items(ev):
        if isinstance(v, float) and (v != v or v in (_INF, -_INF)):
            return k
        if type(v) is Decimal and not v.is_finite():
            return k
        if type(v) is int and not -(1 << 63) <= v < 1 << 63:
            return k
        if isinstance(v, str) and v.strip().lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
            return k
    return None


def need(ev: dict, key: str, i: int, kind: Any = None) -> Any:
    """ev[key], or a one-line error naming the event (`kind`, default its `ph`) and key."""
    val = ev.get(key)
    if val is None:
        kind = kind or ev.get("ph")
        raise TraceFormatError(f"{kind} event #{i} ({str(ev.get('name'))[:60]!r}) has no '{key}'")
    return val


def num(v: Any) -> float | int | None:
    """A decoded number as int/float; None when absent or not numeric."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v
    if type(v) is Decimal:
        return float(v)
    return None


def plain(v: Any) -> Any:
    """A decoded value with every Decimal turned into the float JNum would have been."""
    t = type(v)
    if t is Decimal:
        return float(v)
    if t is list:
        for x in v:
            if type(x) in _NESTED:
                return [plain(x) for x in v]
        return v
    if t is dict:
        return {k: plain(x) for k, x in v.items()}
    return v


def json_default(o: Any) -> float:
    """`default=` for json encoders of decoded values: a Decimal encodes as its float."""
    if type(o) is Decimal:
        return float(o)
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


# `json.dumps(obj, separators=(",", ":"))` (Decimals as their floats) without building an
# encoder per call, which is most of the cost of dumping one small params dict.
if c_make_encoder is not None:
    _ENCODE = c_make_encoder(None, json_default, encode_basestring_ascii, None, ":", ",",
                             False, False, True)
    _ENCODE_SPACED = c_make_encoder(None, json_default, encode_basestring_ascii, None, ": ", ", ",
                                    False, False, True)

    def dumps_compact(obj: Any) -> str:
        return "".join(_ENCODE(obj, 0))

    def dumps(obj: Any) -> str:
        """`json.dumps(obj)` (its default separators), likewise without an encoder per call."""
        return "".join(_ENCODE_SPACED(obj, 0))
else:  # pragma: no cover - CPython always has the C encoder
    dumps_compact = json.JSONEncoder(separators=(",", ":"), default=json_default).encode
    dumps = json.JSONEncoder(default=json_default).encode


def gc_paused(items: Iterator[Any]) -> Iterator[Any]:
    """Run a generator with the cyclic GC paused while it computes, on while its consumer runs
    (only where the process is tracedb's own, `tracedb.process`; elsewhere the generator as it is).

    A reader holds a batch of rows (tuples of lists) for a while, long enough for the GC to
    promote them to the oldest generation; every full collection then walks the pending
    rows again: 3.2 s of a 14 s read of a 258 MB Kineto trace. Readers make no reference
    cycles, so nothing is lost by pausing; the GC is back (if it was on) at every yield and
    on any exception.
    """
    if not process.OWN:
        yield from items
        return
    it = iter(items)
    while True:
        was = gc.isenabled()
        gc.disable()
        try:
            item = next(it)
        except StopIteration:
            return
        finally:
            if was:
                gc.enable()
        yield item


@contextmanager
def gc_frozen() -> Iterator[None]:
    """Keep the objects alive now (a trace's decoded events) out of the GC's collections
    until the block ends (`gc.freeze`). A reader walks a decoded-once trace's events until
    its last row, and its consumer (parquet writing) runs with the GC on: every full
    collection walked the whole event list again, 45 of 245 ms of a 4.1 MB Kineto file's
    ingest. Frozen objects are still freed when unreferenced; nothing else changes. If
    something else froze objects already (a pre-fork server), or the process is not
    tracedb's own (`tracedb.process`), the GC is left alone."""
    if not process.OWN or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class JsonCursor:
    """A bounded text buffer over a (maybe gzipped) JSON file and a cursor in it: the
    helpers `EventStream` and `ObjectStream` walk a document with. Values are decoded
    whole with `raw_decode` (C), reading on until one is complete."""

    _fast = None  # a msgspec decode for `_bulk`'s cuts, where the subclass has one

    def __init__(self, path: Path, chunk_chars: int = CHUNK_CHARS):
        self.path = path
        self.chunk_chars = chunk_chars
        self._decode = json.JSONDecoder(parse_float=JNum).raw_decode

    def _open(self) -> Any:
        self._buf, self._pos, self._consumed, self._eof = "", 0, 0, False
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        return open_trace(self.path)

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

    def _value(self, decode=None) -> Any:
        """Decode the JSON value at the cursor, reading more text until it is complete."""
        decode = decode or self._decode
        self._peek()
        while True:
            try:
                val, end = decode(self._buf, self._pos)
                # A number or literal ending exactly at the buffer's end may be cut short.
                if end < len(self._buf) or self._eof:
                    self._pos = end
                    return val
                msg, at = None, end
            except json.JSONDecodeError as e:
                # Keep plain values only: the exception's traceback -> this frame -> the
                # exception is a cycle that would pin each old buffer until a GC pass.
                msg, at = e.msg, e.pos
            except RecursionError:
                raise TraceFormatError(
                    f"invalid JSON: value starting {self._where()} is nested too deeply") from None
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

    def _bulk(self, close: str = "]") -> Any:
        """Decode the elements of the array (close="]") or the entries of the object
        (close="}") from the cursor to the buffer's last complete one in one call: a
        list or a dict, None when no cut worked. Elements and entry values must be
        objects (a cut is tried after a `}`).

        Wrapping a cut of the container's text in `[...]` / `{...}` decodes to the whole
        cut only when the cut ends between two elements: cut inside an element, the
        brackets do not balance (or the closer lands in a string), so a wrong guess
        fails and costs one wasted decode, never a wrong element.
        """
        if len(self._buf) - self._pos < self.chunk_chars // 2 and not self._eof:
            self._fill(self.chunk_chars)
        buf, pos = self._buf, self._pos
        if self._consumed + pos < self._bad_until:
            return None
        cut, tries = len(buf), 0
        while tries < _BULK_TRIES:
            cut = buf.rfind("}", pos, cut)
            if cut < 0:
                cut = len(buf)
                break
            after = _WS.match(buf, cut + 1).end()
            if after < len(buf) and buf[after] in "," + close:
                tries += 1
                text = ("[" if close == "]" else "{") + buf[pos:cut + 1] + close
                if self._fast is not None:
                    try:  # msgspec first (module docstring), then the standard library's scanner
                        self._pos = cut + 1
                        return self._fast(text)
                    except (msgspec.DecodeError, RecursionError):
                        self._pos = pos
                try:
                    events, end = self._scan(text, 0)
                    if end == len(text):
                        self._pos = cut + 1
                        return events
                except (StopIteration, ValueError, RecursionError):
                    pass  # decoded one at a time below, which names the position
        # Decode up to the last cut tried one event at a time, then try again.
        self._bad_until = self._consumed + cut
        return None


class EventStream(JsonCursor):
    """Iterate the events of a Chrome-trace JSON file without loading it.

    Accepts `{"traceEvents": [...], ...}` (other top-level keys before or after the array
    go to `meta`) and a bare array of events. `meta` holds the keys seen so far: those
    before `traceEvents` are there when the first event is yielded, the rest once the
    iteration is over. Raises TraceFormatError for malformed or truncated JSON, a document
    that is not a trace, and events that are not objects.
    """

    def __init__(self, path: Path, chunk_chars: int = CHUNK_CHARS, floats: str = "exact"):
        super().__init__(path, chunk_chars)
        self.meta: dict[str, Any] = {}
        parse_float = _float_type(floats)
        events = json.JSONDecoder(parse_float=parse_float)
        self._decode_event = events.raw_decode
        self._scan = json.scanner.make_scanner(events)
        self._fast = _msgspec_decoder(parse_float)

    # -- document -----------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict]:
        with self._open() as self._f:
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
        self._bad_until = 0
        while True:
            events = self._bulk()
            if events is None:
                events = [self._value(self._decode_event)]
            if set(map(type, events)) == _DICT:  # checked in C; then yielded in C
                yield from events
                i += len(events)
            else:
                for ev in events:
                    if type(ev) is not dict:
                        raise TraceFormatError(f"trace event #{i} is not a JSON object")
                    yield ev
                    i += 1
            if self._expect(",]", "',' or ']' in traceEvents") == "]":
                return


class StructStream(EventStream):
    """`EventStream` whose events are msgspec Structs of `event_type` (the fields a
    reader reads; the others skipped), yielded a list at a time: each list is the
    events of one bulk decode of the buffer (`_bulk`, ~CHUNK_CHARS of text), decoded in
    one C call into Structs, so a reader walks them while they are in the CPU cache and
    holds one list at a time, whatever the file's size. Untyped floats decode to
    `float_hook(text)`. Where msgspec refuses a piece (NaN, lone surrogates, control
    characters, a cut inside a string) the standard library decodes it as `EventStream`
    does (floats as JNum) and `from_dict(event)` makes each dict a Struct; errors
    (truncated or invalid JSON, an event that is no object) are `EventStream`'s.
    `meta` as `EventStream.meta`."""

    def __init__(self, path: Path, event_type: type, float_hook: type, from_dict: Callable[[dict], Any],
                 chunk_chars: int = CHUNK_CHARS):
        super().__init__(path, chunk_chars, floats="exact")
        self._float_hook = float_hook
        self.retype(event_type, from_dict)

    def position(self) -> int:
        """Chars of the document consumed so far."""
        return self._consumed + self._pos

    def retype(self, event_type: type, from_dict: Callable[[dict], Any]) -> None:
        """Decode the events from the next piece on as `event_type` (a reader that learns,
        part way through, that it needs fewer fields of them)."""
        self._kind, self._from_dict = event_type, from_dict
        self._fast = _msgspec_decoder(self._float_hook, list[event_type])

    def _events(self) -> Iterator[list]:  # type: ignore[override]
        if self._peek() == "]":
            self._pos += 1
            return
        i = 0
        self._bad_until = 0
        while True:
            events = self._bulk()
            if events is None:
                events = [self._value(self._decode_event)]
            if set(map(type, events)) != {self._kind}:  # (checked in C) dicts from the standard library
                events = [self._struct(ev, i + k) for k, ev in enumerate(events)]
            yield events
            i += len(events)
            if self._expect(",]", "',' or ']' in traceEvents") == "]":
                return

    def _struct(self, ev: Any, i: int) -> Any:
        if type(ev) is self._kind:
            return ev
        if type(ev) is not dict:
            raise TraceFormatError(f"trace event #{i} is not a JSON object")
        return self._from_dict(ev)


class _Marker:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


# Markers `ObjectStream` yields for a container it walks into, and at its end.
OBJECT, ARRAY, END = _Marker("OBJECT"), _Marker("ARRAY"), _Marker("END")


class ObjectStream(JsonCursor):
    """Walk a JSON document's containers down to `depth` levels, yielding `(path, value)`
    for each value at that depth (decoded whole), `(path, OBJECT | ARRAY)` where a
    container opens and `(path, END)` where it closes; `path` is the tuple of keys (str)
    and indexes (int) from the top. A scalar above `depth` is yielded as a value.
    Memory: the buffer and one value, whatever the document's size."""

    def __init__(self, path: Path, depth: int, chunk_chars: int = CHUNK_CHARS):
        super().__init__(path, chunk_chars)
        self.depth = depth
        plain = json.JSONDecoder()  # plain floats: no JNum per number
        self._decode, self._scan = plain.raw_decode, json.scanner.make_scanner(plain)

    def __iter__(self) -> Iterator[tuple[tuple, Any]]:
        self._bad_until = 0
        with self._open() as self._f:
            if not self._peek():
                raise TraceFormatError("empty file")
            yield from self._walk((), self.depth)
            if self._peek():
                raise TraceFormatError(f"invalid JSON: extra data after the document {self._where()}")

    def _walk(self, path: tuple, depth: int) -> Iterator[tuple[tuple, Any]]:
        c = self._peek()
        if depth == 0 or c not in "{[":
            yield path, self._value()
            return
        self._pos += 1
        yield path, OBJECT if c == "{" else ARRAY
        close = "}" if c == "{" else "]"
        if self._peek() == close:
            self._pos += 1
            yield path, END
            return
        i = misses = 0
        while True:
            # Entries of an object of leaves: many decoded in one call (C) where a cut of
            # the buffer works; a container whose cuts keep failing (nested entries:
            # MegEngine's vars) is read one entry at a time, which is then cheaper.
            if c == "{" and depth == 1 and misses < _BULK_MISSES:
                entries = self._bulk("}")
                if entries:
                    for key, value in entries.items():
                        yield path + (key,), value
                    if self._expect(",}", "',' or '}'") == "}":
                        yield path, END
                        return
                    continue
                misses += 1
            if c == "{":
                if self._peek() != '"':
                    self._expect('"', "a key")
                key = self._value()
                self._expect(":", "':'")
            else:
                key, i = i, i + 1
            yield from self._walk(path + (key,), depth - 1)
            if self._expect("," + close, f"',' or '{close}'") == close:
                yield path, END
                return


def _float_type(floats: str) -> type:
    parse_float = {"exact": JNum, "text": str, "decimal": Decimal}.get(floats)
    if parse_float is None:
        raise ValueError(f"floats must be 'exact', 'text' or 'decimal', not {floats!r}")
    return parse_float


def _msgspec_decoder(parse_float: type, kind: Any = Any) -> Any:
    """msgspec's decode (of values of `kind`) with `parse_float`'s meaning: its float_hook
    gets the number's source text, as json's parse_float does."""
    return msgspec.json.Decoder(kind, float_hook=parse_float).decode


_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


class DecodedTrace:
    """A whole Chrome-trace document decoded once (`decode_whole`): iterates its events
    as often as asked; `meta` as `EventStream.meta` has it after a full pass."""

    def __init__(self, events: list[dict], meta: dict[str, Any]):
        self.events = events
        self.meta = meta

    def __iter__(self) -> Iterator[dict]:
        return iter(self.events)


def decode_whole(path: Path, floats: str = "exact", limit: int | None = None) -> DecodedTrace | None:
    """The document decoded in one msgspec call when it is at most `limit` bytes and
    well-formed, with exactly what `EventStream(path, floats=floats)` would yield (events'
    fractional numbers as `floats` says, top-level keys as JNum); else None, and the caller
    streams, which also gives the exact error. msgspec refuses what the standard library
    decodes differently or not at all (NaN, lone surrogates, control characters, invalid
    UTF-8, a BOM): those documents stream too. `limit` defaults to WHOLE_DECODE_BYTES."""
    data = _small_document(path, limit)
    if data is None:
        return None
    try:
        return _decode_doc(data, _msgspec_decoder(_float_type(floats)))
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


def _small_document(path: Path, limit: int | None) -> bytes | None:
    """The (decompressed) bytes of a document of at most `limit` (WHOLE_DECODE_BYTES)."""
    limit = WHOLE_DECODE_BYTES if limit is None else limit
    try:
        with open_trace(path) as f:
            data = f.read(limit + 1)
    except Exception:  # noqa: BLE001 - the stream reads it again and reports it
        return None
    return None if len(data) > limit else data


def rows_decoded_once(path: Path, floats: str, rows: Callable[[DecodedTrace | None], Iterator[Any]]) -> Iterator[Any]:
    """A reader's rows from its trace decoded once (`decode_whole`; the decoded events live,
    kept out of the GC's collections by `gc_frozen`, until the last row), or from
    `rows(None)`, which streams, when the trace is too large or odd for that."""
    whole = decode_whole(path, floats=floats)
    if whole is None:
        yield from rows(None)
        return
    with gc_frozen():
        yield from rows(whole)


def _decode_doc(data: bytes, decode: Any, kind: type = dict) -> DecodedTrace | None:
    start = _JSON_WS.match(data).end()
    first = data[start:start + 1]
    if first == b"[":
        events, meta = decode(data), {}
    elif first == b"{" and data.count(b'"traceEvents"') == 1:  # a repeated key streams
        top = _TOP(data)
        raw = top.pop("traceEvents", None)
        if raw is None:
            return None
        meta = {k: json.loads(bytes(v), parse_float=JNum) for k, v in top.items()}
        events = decode(raw)
    else:
        return None
    if type(events) is not list or (events and set(map(type, events)) != {kind}):
        return None
    return DecodedTrace(events, meta)
