"""Binary protobuf read incrementally: the outer messages walked on the wire, each element
of one repeated field parsed by the generated class, never the whole document at once.

`ParseFromString` needs the whole file in memory and builds every message of it (a
100 MB XSpace is ~100 MB of bytes plus its upb messages). Readers of TF RunMetadata /
StepStats and XSpace instead describe the outer structure with a `Spec` (which length-
delimited fields to walk into, which repeated field to stream), and read the file twice
from a buffered (maybe gzipped) stream:

1. `index`: walk the outer messages, parse each one's other fields (device names, line
   names, the metadata maps) with its class, skip the streamed elements, count them.
   Needed first because protobuf writes fields in field-number order: an XPlane's
   `lines` (3) come before its `event_metadata` (4), an XLine's events (4) before its
   `display_name` (11), a DeviceStepStats' `node_stats` (2) before `thread_names` (3).
2. `stream`: walk again and yield the streamed elements, parsed a run of consecutive
   elements at a time: the raw bytes of up to `CHUNK_BYTES` of them, parsed as their
   container message (the concatenated encodings of a repeated field's elements are a
   valid encoding of that field), so upb builds them in one C call.

Memory is the metadata plus one run (`CHUNK_BYTES`, or one element if bigger), whatever
the file size. The result is exactly what `ParseFromString` gives, field by field: the
same classes parse the same bytes, repeated elements in order, the other fields of a
container in one parse (last value wins, maps by key, as protobuf merges). A plain file
is skipped through with seeks; a gzipped one is decompressed twice (cheap next to
building messages). Errors name the file's byte offset and the field path
(`planes[0].lines[3].events`); a length running past its message or the end of the file
reads as "truncated".

Cost (bench/bench_stream.py, 2-core machine), against `ParseFromString` + the same row
code, 100 MB gzipped: XSpace events 1.00-1.02x CPU, peak RSS 0.23x; TF node_stats
1.13-1.21x CPU, 0.60x RSS. The per-element walk is `_Reader.run`, a tight loop over the
buffer for a run of the streamed field; through the `_fields` generator alone TF was 1.35x.

Fields outside the spec that are walked past unparsed (e.g. RunMetadata's graphs, with
`keep=False`) are only checked for framing, not for content.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterator, NoReturn

from google.protobuf.message import DecodeError, Message

from tracedb.errors import TraceFormatError
from tracedb.formats.base import varint

CHUNK_BYTES = 256 << 10  # streamed elements parsed per C call (bench/bench_stream.py)
_READ_BYTES = 1 << 20


@dataclass
class Spec:
    """How to walk one message type: `nested` fields are walked into (each occurrence a
    child `Node`), `stream` is the repeated message field whose elements are streamed
    (its name in `cls`), the other fields are parsed into the node's `header` when `keep`."""

    cls: type[Message]
    name: str = ""
    nested: dict[int, "Spec"] = field(default_factory=dict)
    stream: tuple[int, str] | None = None
    keep: bool = True
    # A lighter class of the same wire format to parse the streamed runs with (XSpace:
    # events whose stats stay undecoded bytes); `stream` then yields each run as a `Run`,
    # whose `check()` raises the error `cls` gives for its bytes.
    elements: type[Message] | None = None


class Run:
    """A run of streamed elements parsed by a Spec's `elements` class: iterate it; a reader
    that finds a part `elements` left undecoded to be bad calls `check()`, which raises the
    error the full class gives for the run (the element's index and offset)."""

    __slots__ = ("items", "check")

    def __init__(self, items: Any, check: Callable[[], Any]):
        self.items, self.check = items, check

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


@dataclass
class Node:
    """One container message met by `index`: its other fields, its walked children, and
    how many streamed elements it holds."""

    path: str
    header: Message
    children: list["Node"] = field(default_factory=list)
    count: int = 0


class _Reader:
    """A byte stream with a buffer, absolute offsets, and truncation as an error."""

    def __init__(self, f: IO[bytes], what: str):
        self.f, self.what = f, what
        self.buf, self.i, self.base, self.eof = b"", 0, 0, False
        self.field = "the file"  # the length-delimited field being read, for errors
        # A plain file's size bounds every length; a gzip stream's is unknown until its end.
        self.size: int | None = None if isinstance(f, gzip.GzipFile) else os.fstat(f.fileno()).st_size

    @property
    def pos(self) -> int:
        return self.base + self.i

    def error(self, what: str, at: int | None = None) -> TraceFormatError:
        """`what` at byte `at` (default: the cursor); at=-1: `what` names its place."""
        where = "" if at == -1 else f" at byte {self.pos if at is None else at}"
        return TraceFormatError(f"{self.what}: {what}{where}")

    def _fill(self, need: int) -> None:
        """At least `need` bytes from the cursor in the buffer, fewer only at the end."""
        parts, have = [self.buf[self.i:]], len(self.buf) - self.i
        while have < need and not self.eof:
            try:
                data = self.f.read(max(_READ_BYTES, need - have))
            except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
                raise TraceFormatError(f"{self.what}: truncated or corrupt gzip: {e}") from e
            if not data:
                self.eof = True
            parts.append(data)
            have += len(data)
        self.base += self.i
        self.buf, self.i = b"".join(parts), 0

    def at_end(self) -> bool:
        if self.i < len(self.buf):
            return False
        self._fill(1)
        return self.i >= len(self.buf)

    def varint(self) -> int:
        if self.i + 10 > len(self.buf) and not self.eof:
            self._fill(10)
        start = self.i
        try:
            value, self.i = varint(self.buf, start)
        except IndexError:
            what = "varint longer than 10 bytes" if start + 10 <= len(self.buf) else "truncated varint"
            raise self.error(what, self.base + start) from None
        return value

    def take(self, n: int) -> bytes:
        if self.i + n > len(self.buf):
            self._fill(n)
            if self.i + n > len(self.buf):
                raise self.error(f"truncated: the file ends inside {self.field}", -1)
        out = self.buf[self.i:self.i + n]
        self.i += n
        return out

    def run(self, key: int, end: int | None, max_bytes: int, copy: bool = True) -> tuple[int, bytes]:
        """The consecutive length-delimited fields tagged `key` (a one-byte tag) from the
        cursor that lie whole in the buffer and before `end`, up to about `max_bytes`:
        (how many, their encodings, or b"" without `copy`). A tight loop over the buffer: the per-element cost
        of a streamed field (bench/bench_stream.py); anything else is left to `_fields`."""
        if len(self.buf) - self.i < _READ_BYTES // 4 and not self.eof:
            self._fill(_READ_BYTES)
        buf, i = self.buf, self.i
        lim = len(buf) if end is None else min(len(buf), end - self.base)
        start, count, cap = i, 0, i + max_bytes
        lim2 = lim - 2  # a one- or two-byte length read without the general loop below
        while i < cap and i < lim and buf[i] == key:
            # the length varint decoded inline: this loop is the per-element cost of a streamed
            # field (bench/bench_stream.py); everywhere else `base.varint` decodes
            if i < lim2:
                b = buf[i + 1]
                if b < 0x80:
                    if i + 2 + b > lim:
                        break
                    i += 2 + b
                    count += 1
                    continue
                b2 = buf[i + 2]
                if b2 < 0x80:
                    n = (b & 0x7F) | b2 << 7
                    if i + 3 + n > lim:
                        break
                    i += 3 + n
                    count += 1
                    continue
            j, n, shift, ok = i + 1, 0, 0, False
            while j < lim and shift < 64:
                b = buf[j]
                j += 1
                n |= (b & 0x7F) << shift
                if b < 0x80:
                    ok = True
                    break
                shift += 7
            if not ok or j + n > lim:
                break
            i = j + n
            count += 1
        self.i = i
        return count, buf[start:i] if copy else b""

    def skip(self, n: int) -> None:
        left = len(self.buf) - self.i
        if n <= left:
            self.i += n
            return
        self.base, self.buf, self.i = self.base + len(self.buf), b"", 0
        n -= left
        if self.size is not None:  # a plain file: seek, and check against its size
            if self.base + n > self.size:
                raise self.error(f"truncated: the file ends inside {self.field}", -1)
            self.f.seek(n, os.SEEK_CUR)
            self.base += n
            return
        while n > 0:  # gzip: decompress and drop (through the decompressed-bytes limit)
            self._fill(min(n, _READ_BYTES))
            got = min(n, len(self.buf))
            if got == 0:
                raise self.error(f"truncated: the file ends inside {self.field}", -1)
            self.base, self.buf, self.i = self.base + got, self.buf[got:], 0
            n -= got


def varint_bytes(v: int) -> bytes:
    """`v` as a protobuf varint (the tests' trace builders use it too)."""
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _scalar(r: _Reader, wt: int, fn: int) -> bytes:
    """The payload of a non-length-delimited field (wire types 0, 1, 5; groups skipped)."""
    if wt == 0:
        return varint_bytes(r.varint())
    if wt == 1:
        return r.take(8)
    if wt == 5:
        return r.take(4)
    if wt == 3:
        _skip_group(r, fn)
        return b""
    raise r.error(f"invalid wire type {wt} (field {fn})")


def _skip_group(r: _Reader, fn: int) -> None:
    depth = [fn]
    while depth:
        key = r.varint()
        f, wt = key >> 3, key & 7
        if wt == 4:
            if f != depth.pop():
                raise r.error(f"unmatched end of group {f}")
        elif wt == 3:
            depth.append(f)
        elif wt == 2:
            r.skip(r.varint())
        else:
            _scalar(r, wt, f)


def _fields(r: _Reader, end: int | None, path: str, spec: Spec) -> Iterator[tuple[int, int, int]]:
    """(field number, wire type, start offset) of each field of the message up to `end`
    (None: the end of the file); after a length-delimited field's yield the cursor must be
    at its payload, then anywhere up to its end (the rest is skipped). A length-delimited
    field's payload is bounded: `r.stop`, which a consumer that reads on past it (a run of
    streamed elements, a nested message) moves to where it stopped."""
    seen: dict[int, int] = {}  # occurrences of each field, for naming one in errors
    while (r.pos < end) if end is not None else not r.at_end():
        start = r.pos
        key = r.varint()
        fn, wt = key >> 3, key & 7
        if fn == 0:
            raise r.error(f"invalid field number 0 in {path or 'the top-level message'}", start)
        if wt == 2:
            n = r.varint()
            stop = r.pos + n
            f = spec.cls.DESCRIPTOR.fields_by_number.get(fn)
            k = seen[fn] = seen.get(fn, -1) + 1
            name = (f"{f.name}[{k}]" if f.is_repeated else f.name) if f else f"field {fn}"
            r.field = f"{_join(path, name)} ({n} bytes from byte {start})"
            if end is not None and stop > end:
                raise r.error(f"truncated or corrupt: {r.field} runs past the end of its message", -1)
            if r.size is not None and stop > r.size:
                raise r.error(f"truncated: {r.field} runs past the end of the file ({r.size} bytes)", -1)
            r.stop, r.extra = stop, 0
            yield fn, wt, start
            stop = r.stop
            seen[fn] += r.extra
            if r.pos < stop:
                r.skip(stop - r.pos)
            elif r.pos > stop:
                raise r.error(f"corrupt: a message inside field {fn} of {path} overruns it", start)
        else:
            yield fn, wt, start
    if end is not None and r.pos != end:
        raise r.error(f"corrupt: {path or 'the top-level message'} overruns its length")


def _parse(cls: type[Message], data: bytes, r: _Reader, what: str, at: int) -> Message:
    try:
        return cls.FromString(data)
    except DecodeError as e:
        raise r.error(f"bad or truncated {what} ({e})", at) from e
    except RecursionError:
        raise r.error(f"{what}: messages nested too deeply", at) from None


def index(f: IO[bytes], spec: Spec, what: str) -> Node:
    """Pass 1 over an open trace: the tree of container messages, streamed elements skipped."""
    return _index(_Reader(f, what), spec, None, spec.name)


def _index(r: _Reader, spec: Spec, end: int | None, path: str) -> Node:
    start = r.pos
    parts: list[bytes] = []
    node = Node(path, spec.cls())
    counts: dict[int, int] = {}
    stream_fn = spec.stream[0] if spec.stream else None
    for fn, wt, _ in _fields(r, end, path, spec):
        if wt == 2 and fn in spec.nested:
            sub = spec.nested[fn]
            k = counts[fn] = counts.get(fn, -1) + 1
            node.children.append(_index(r, sub, r.stop, f"{_join(path, sub.name)}[{k}]"))
            r.stop, r.extra = r.pos, 0
        elif wt == 2 and fn == stream_fn:
            r.skip(r.stop - r.pos)
            more, _ = r.run(fn << 3 | 2, end, 1 << 62, copy=False)
            node.count += 1 + more
            r.stop, r.extra = r.pos, more
        elif wt == 2:
            n = r.stop - r.pos
            if spec.keep:
                parts += [varint_bytes(fn << 3 | 2), varint_bytes(n), r.take(n)]
        else:
            payload = _scalar(r, wt, fn)
            if spec.keep and wt != 3:
                parts += [varint_bytes(fn << 3 | wt), payload]
    if parts:
        node.header = _parse(spec.cls, b"".join(parts), r, f"{path or spec.cls.DESCRIPTOR.name}", start)
    return node


def stream(f: IO[bytes], spec: Spec, tree: Node, what: str,
           want: Callable[[Node], bool] | None = None) -> Iterator[tuple[Node, Any]]:
    """Pass 2 over the trace again: (container node, a run of its streamed elements (a
    repeated field of parsed messages)), in file order. Elements of containers that
    `want` refuses are skipped unparsed."""
    yield from _stream(_Reader(f, what), spec, tree, None, want)


def _stream(r: _Reader, spec: Spec, node: Node, end: int | None,
            want: Callable[[Node], bool] | None) -> Iterator[tuple[Node, Any]]:
    stream_fn = spec.stream[0] if spec.stream else None
    skip_fn = None
    if stream_fn is not None and want is not None and not want(node):
        stream_fn, skip_fn = None, stream_fn  # its elements are skipped unparsed, a run at a time
    pending: list[bytes] = []  # encodings of the elements not yet parsed
    size = first = done = k = held = 0  # held: how many elements `pending` encodes
    for fn, wt, start in _fields(r, end, node.path, spec):
        if wt == 2 and fn == skip_fn:  # as `_index` walks past them
            r.skip(r.stop - r.pos)
            extra, _ = r.run(fn << 3 | 2, end, 1 << 62, copy=False)
            r.stop, r.extra = r.pos, extra
        elif wt == 2 and fn in spec.nested:
            if pending:  # keep file order: elements before this child go first
                yield node, _elements(r, spec, node, pending, first, done)
                done, pending, size, held = done + held, [], 0, 0
            yield from _stream(r, spec.nested[fn], node.children[k], r.stop, want)
            r.stop, r.extra = r.pos, 0
            k += 1
        elif wt == 2 and fn == stream_fn:
            n = r.stop - r.pos
            if not pending:
                first = start
            key = fn << 3 | 2
            pending.append(varint_bytes(key) + varint_bytes(n) + r.take(n))
            extra, more = r.run(key, end, CHUNK_BYTES)
            pending.append(more)
            r.stop, r.extra = r.pos, extra
            size += n + len(more)
            held += 1 + extra
            if size >= CHUNK_BYTES:
                yield node, _elements(r, spec, node, pending, first, done)
                done, pending, size, held = done + held, [], 0, 0
        elif wt != 2:
            _scalar(r, wt, fn)
    if pending:
        yield node, _elements(r, spec, node, pending, first, done)


def _split(data: bytes) -> Iterator[bytes]:
    """The field encodings in `data` (well framed: `run` and `_fields` checked them)."""
    i = 0
    while i < len(data):
        _, j = varint(data, i)  # the key
        n, j = varint(data, j)
        yield data[i:j + n]
        i = j + n


def _elements(r: _Reader, spec: Spec, node: Node, pending: list[bytes], at: int, done: int) -> Any:
    """The elements encoded in `pending`, parsed in one call (a `Run` with `spec.elements`);
    on bad input, an error naming the first bad element (its index in the container) and
    its offset."""
    assert spec.stream is not None
    name = spec.stream[1]
    data = b"".join(pending)
    cls = spec.elements or spec.cls
    try:
        items = getattr(cls.FromString(data), name)
    except (DecodeError, RecursionError):
        _bad_element(r, spec, node, data, at, done)
    if spec.elements is None:
        return items
    return Run(items, lambda: _bad_element(r, spec, node, data, at, done))


def _bad_element(r: _Reader, spec: Spec, node: Node, data: bytes, at: int, done: int) -> NoReturn:
    """Raise the error `spec.cls` gives for a run of elements (error path only)."""
    assert spec.stream is not None
    name = spec.stream[1]
    try:
        spec.cls.FromString(data)
    except (DecodeError, RecursionError):
        pass
    else:
        raise r.error(f"bad {_join(node.path, name)} from element {done}", at)
    for i, one in enumerate(_split(data)):  # which element
        try:
            spec.cls.FromString(one)
        except (DecodeError, RecursionError) as e:
            detail = str(e) if isinstance(e, DecodeError) else "messages nested too deeply"
            raise r.error(f"bad or truncated {_join(node.path, name)}[{done + i}] ({detail})", at) from e
        at += len(one)
    raise r.error(f"bad or truncated {_join(node.path, name)}", at)  # pragma: no cover


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
