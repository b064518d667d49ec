"""The small interface every trace format implements, and helpers readers share.

A format is one module in `tracedb.formats` with:

    NAME: str                                   # e.g. "tf_stepstats"
    DESCRIPTION: str                            # one line, for `tracedb formats`
    def sniff(head: bytes) -> bool              # cheap, from the first bytes (gunzipped)
    def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]

`read` streams (table name, record batch) pairs; batches need only the columns the
reader knows (the store fills the rest with NULLs and adds run_id, source_file and
source_format). Every row must carry `device` (canonical TYPE:INDEX) so it can be
partitioned. Problems raise `TraceFormatError` with a message that says what is wrong;
the caller adds the file name.

Bounded input. Every reader opens its file through `open_trace` / `read_all`, which cap
what one file may decompress to, so a gzip bomb (an 18 MB `.gz` of 18 GB) stops with an
error naming the limit instead of filling memory:

- `TRACEDB_MAX_DECOMPRESSED_BYTES` (default 16 GiB): decompressed bytes of any gzipped
  trace. Every reader streams (Chrome trace, Kineto, node dumps and lists through
  bounded buffers; TF binary and XSpace walked on the wire by `pbwire`, one run of
  elements at a time; TF text fed to `pbtext` 1 MiB at a time, one DeviceStepStats
  held; MegEngine JSON entry by entry by `jsonstream.ObjectStream`), so this bounds
  only time: a 40 MB XSpace or an 80 MB TF StepStats reads in the memory of a 10 MB one
  (tests/test_streaming.py; bench/bench_stream.py for 100 MB).
- `TRACEDB_MAX_WHOLE_FILE_BYTES` (default 2 GiB): what `read_all` reads into memory,
  compressed or not. Only TF text outside `pbtext`'s subset (`<...>`, `[...]` lists,
  hex numbers, separators...: `text_format.Parse`, its fallback, needs the whole text)
  is read whole; a larger such file is an error naming the limit.
- Line readers read at most `MAX_LINE_BYTES` (16 MiB) per line (`lines`).

Sizes are bytes, optionally with a K/M/G/T suffix (powers of 1024): `TRACEDB_MAX_WHOLE_FILE_BYTES=8G`.

Rows to batches: `BatchBuilder` takes a row at a time (a dict, or a tuple of its
columns); `ColumnBuilder` takes a run of rows a column at a time (one sequence per
column), for a reader that reads each field of a run of messages in one comprehension.
Both give batches of the table's schema, `batch_rows` rows each but the last, and the same
message for a value Arrow refuses (the row's index in the file and its column).
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

import pyarrow as pa

from tracedb import schema
from tracedb.errors import TracedbError, TraceFormatError

HEAD_BYTES = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"
MAX_DECOMPRESSED_ENV = "TRACEDB_MAX_DECOMPRESSED_BYTES"
MAX_WHOLE_FILE_ENV = "TRACEDB_MAX_WHOLE_FILE_BYTES"
DEFAULT_MAX_DECOMPRESSED = 16 << 30
DEFAULT_MAX_WHOLE_FILE = 2 << 30
MAX_LINE_BYTES = 16 << 20
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)i?B?\s*$", re.I)


@dataclass
class ReadContext:
    """What a reader knows about the file beyond its bytes."""

    run_id: str
    source_file: str
    # Ordinal of this file among the run's files of the same format (sorted by name):
    # formats with one step per file (TF RunMetadata) use it as `step`.
    file_ordinal: int = 0
    # Readers put run-level facts here (device properties, distributed info, rank).
    metadata: dict[str, Any] = field(default_factory=dict)
    # Validation warnings of this file, by kind (`tracedb.validate`, and readers' `warn`):
    # how many rows had an impossible value or an unknown category, and what was done.
    warnings: dict[str, int] = field(default_factory=dict)
    # Set by `formats.read`: the format that actually read the file (after any fallback).
    format: str | None = None

    def warn(self, what: str, n: int = 1) -> None:
        """Count a problem that did not stop the read (an unknown event category, ...);
        the counts land in the file's `files.warnings`."""
        self.warnings[what] = self.warnings.get(what, 0) + n


def size_limit(env: str, default: int) -> int:
    """A byte limit from the environment (`8G`, `512M`, `1000000`), else the default."""
    raw = os.environ.get(env)
    if raw is None or not raw.strip():
        return default
    m = _SIZE.match(raw)
    if not m or int(m[1]) <= 0:
        raise TracedbError(f"{env}={raw!r}: expected a positive size in bytes, like 4G or 500M")
    return int(m[1]) << (10 * " KMGT".index(m[2].upper() or " "))


def _human(n: int) -> str:
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


class _LimitedGzip(gzip.GzipFile):
    """A GzipFile that refuses to decompress more than `limit` bytes (a gzip bomb)."""

    def __init__(self, path: Path, limit: int, env: str):
        super().__init__(path, "rb")
        self._limit, self._env, self._count = limit, env, 0

    def _take(self, data: bytes) -> bytes:
        self._count += len(data)
        if self._count > self._limit:
            raise TraceFormatError(
                f"decompresses to more than {_human(self._limit)} (a gzip bomb?); "
                f"stopped after {self._count} bytes; raise {self._env} to read it"
            )
        return data

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:  # read all, a MiB at a time so the limit bites early
            chunks = []
            while chunk := self.read(1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        try:
            return self._take(super().read(min(size, self._limit - self._count + 1)))
        except zlib.error as e:  # corrupt deflate data: an OSError like the other gzip faults
            raise gzip.BadGzipFile(f"corrupt deflate data: {e}") from e

    def read1(self, size: int = -1) -> bytes:
        try:
            return self._take(super().read1(size if size >= 0 else 1 << 20))
        except zlib.error as e:
            raise gzip.BadGzipFile(f"corrupt deflate data: {e}") from e

    def readline(self, size: int | None = -1) -> bytes:
        cap = self._limit - self._count + 1
        try:
            return self._take(super().readline(cap if size is None or size < 0 else min(size, cap)))
        except zlib.error as e:
            raise gzip.BadGzipFile(f"corrupt deflate data: {e}") from e


def open_trace(path: Path, limit: int | None = None, env: str = MAX_DECOMPRESSED_ENV) -> IO[bytes]:
    """Open a trace for reading, gunzipping transparently (detected from the magic bytes).

    A gzipped trace decompresses to at most `limit` bytes (default
    $TRACEDB_MAX_DECOMPRESSED_BYTES, 16 GiB); past it a read raises TraceFormatError.
    """
    f = open(path, "rb")
    if f.read(2) == GZIP_MAGIC:
        f.close()
        if limit is None:
            limit = size_limit(MAX_DECOMPRESSED_ENV, DEFAULT_MAX_DECOMPRESSED)
        return _LimitedGzip(path, limit, env)
    f.seek(0)
    return f


def lines(f: IO[bytes]) -> Iterator[bytes]:
    """The lines of an open trace, each at most MAX_LINE_BYTES (else TraceFormatError)."""
    lineno = 0
    while raw := f.readline(MAX_LINE_BYTES + 1):
        lineno += 1
        if len(raw) > MAX_LINE_BYTES:
            raise TraceFormatError(f"line {lineno} is longer than {_human(MAX_LINE_BYTES)}")
        yield raw


def read_head(path: Path, n: int = HEAD_BYTES) -> bytes:
    """The first n bytes of the (decompressed) trace; what `sniff` sees."""
    try:
        with open_trace(path) as f:
            return f.read(n)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        # A truncated gzip may fail even on the head; let sniffers see what we have.
        raise TraceFormatError(f"cannot read: {e}") from e


def read_all(path: Path) -> bytes:
    """The whole decompressed trace, for a parser that needs one document in memory (TF
    text outside `pbtext`'s subset, for `text_format.Parse`); a truncated gzip is an error, not a short read. At most
    $TRACEDB_MAX_WHOLE_FILE_BYTES (2 GiB), and at most $TRACEDB_MAX_DECOMPRESSED_BYTES
    decompressed."""
    whole = size_limit(MAX_WHOLE_FILE_ENV, DEFAULT_MAX_WHOLE_FILE)
    gz = size_limit(MAX_DECOMPRESSED_ENV, DEFAULT_MAX_DECOMPRESSED)
    limit, env = (whole, MAX_WHOLE_FILE_ENV) if whole <= gz else (gz, MAX_DECOMPRESSED_ENV)
    try:
        with open_trace(path, limit, env) as f:
            size = None if isinstance(f, gzip.GzipFile) else os.fstat(f.fileno()).st_size
            if size is not None and size > whole:
                raise TraceFormatError(f"{size} bytes is more than the {_human(whole)} this format "
                                       f"reads into memory; raise {MAX_WHOLE_FILE_ENV} to read it")
            return f.read()
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise TraceFormatError(f"truncated or corrupt gzip: {e}") from e


def text_head(head: bytes) -> str:
    """The head as text (tolerating a multi-byte char cut at the end), or '' if binary."""
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start >= len(head) - 4:
            return head[: e.start].decode("utf-8", errors="strict")
        return ""


# ---------------------------------------------------------------- copy kinds
# `kernels.copy_kind` values, and the one table of how traces spell them: CUPTI's
# CUpti_ActivityMemcpyKind numbers (Nsight Systems' `copyKind`; 11-13 are unified-memory
# migrations), names (`HtoD`, XSpace's `H2D`, MTIA's `HOST_TO_DEVICE`), and names inside a
# label (Kineto `Memcpy HtoD (Pageable -> Device)`, TF `MEMCPYDtoH`, `memcpy_H2D`).

COPY_KINDS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA")
CUPTI_COPY_KINDS = {0: None, 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
                    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
_COPY_SPELLINGS = {
    **{k.lower(): k for k in COPY_KINDS},
    "h2d": "HtoD", "d2h": "DtoH", "d2d": "DtoD", "h2h": "HtoH", "p2p": "PtoP",
    "host_to_device": "HtoD", "device_to_host": "DtoH", "device_to_device": "DtoD", "host_to_host": "HtoH",
    "peer_to_peer": "PtoP",
}
_COPY_IN_TEXT = re.compile("|".join(sorted((k for k in _COPY_SPELLINGS if "_" not in k), key=len, reverse=True)),
                           re.IGNORECASE)
_HOST_MEMORY = {"pageable", "pinned", "managed"}


def copy_kind(text: Any) -> str | None:
    """The copy kind (`HtoD`, ...) a name, a label or a CUPTI number spells; None if none."""
    if isinstance(text, int) and not isinstance(text, bool):
        return CUPTI_COPY_KINDS.get(text)
    if not isinstance(text, str) or not text:
        return None
    exact = _COPY_SPELLINGS.get(text.strip().lower())
    if exact is not None:
        return exact
    m = _COPY_IN_TEXT.search(text)
    return _COPY_SPELLINGS[m[0].lower()] if m else None


def copy_kind_of_sides(src: Any, dst: Any) -> str | None:
    """A copy kind from its source and destination memory kinds (`pageable` -> `device`: HtoD)."""
    if not isinstance(src, str) or not isinstance(dst, str) or not src or not dst:
        return None
    side = lambda k: "H" if k.lower() in _HOST_MEMORY else "D"  # noqa: E731
    return f"{side(src)}to{side(dst)}"


# ---------------------------------------------------------------- protobuf wire format
# The one varint decoder of the readers: sniffers (XSpace, TF binary) read their heads with
# it, and `wire_fields` walks a small message held in memory (an XSpace `Hlo Proto` stat).
# Files too big for memory are walked by `pbwire`, whose buffered reader decodes the same
# encoding from a stream.

WIRE_VARINT, WIRE_I64, WIRE_LEN, WIRE_I32 = 0, 1, 2, 5


def varint(buf: bytes, i: int) -> tuple[int, int]:
    """The protobuf varint at `buf[i]` -> (value, index after it). IndexError when `buf`
    ends inside it or it is longer than 10 bytes (what a sniffer treats as 'not this format')."""
    value = shift = 0
    for _ in range(10):
        b = buf[i]  # IndexError past the end
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
    raise IndexError("varint longer than 10 bytes")


def wire_fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of each field of one encoded message: an int for
    a varint, bytes for a length-delimited field and for fixed 32/64-bit ones. Raises
    ValueError on a truncated or corrupt encoding (groups are not supported)."""
    i, n = 0, len(buf)
    try:
        while i < n:
            key, i = varint(buf, i)
            fn, wt = key >> 3, key & 7
            if wt == WIRE_VARINT:
                value, i = varint(buf, i)
            elif wt == WIRE_LEN:
                size, i = varint(buf, i)
                if i + size > n:
                    raise ValueError(f"field {fn} runs past the end of its message")
                value, i = buf[i:i + size], i + size
            elif wt in (WIRE_I64, WIRE_I32):
                size = 8 if wt == WIRE_I64 else 4
                if i + size > n:
                    raise ValueError(f"field {fn} runs past the end of its message")
                value, i = buf[i:i + size], i + size
            else:
                raise ValueError(f"unsupported wire type {wt} (field {fn})")
            if fn == 0:
                raise ValueError("field number 0")
            yield fn, wt, value
    except IndexError:
        raise ValueError("truncated varint") from None


def packed_ints(wt: int, value: Any) -> list[int]:
    """A repeated integer field's occurrence as a list: packed (length-delimited) or one varint."""
    if wt == WIRE_VARINT:
        return [value]
    out, i = [], 0
    try:
        while i < len(value):
            v, i = varint(value, i)
            out.append(v)
    except IndexError:
        raise ValueError("truncated packed varints") from None
    return out


def signed64(v: int) -> int:
    """A varint read as int64 (negative numbers are encoded as 10-byte two's complement)."""
    return v - (1 << 64) if v >= 1 << 63 else v


def _short(value: Any, n: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


class BatchBuilder:
    """Collects rows for one table and emits Arrow batches in the table's schema.

    Rows are dicts that need only the keys the reader knows (missing columns become
    NULL), or, with `columns=`, tuples of those columns' values in that order: no dict
    per row, and the batch is built column by column (`zip(*rows)`), which is what a
    reader emitting millions of rows wants.
    """

    def __init__(self, table: str, batch_rows: int = 65536, columns: tuple[str, ...] | None = None,
                 annotate: bool = True):
        self.table = table
        # False: node rows already hold their FLOPs columns (tracedb's own export), which
        # `annotate_nodes` must not derive again (a TF rule finds inputs' shapes in the batch).
        self.annotate = annotate
        self.schema = schema.TABLES[table]
        self.batch_rows = batch_rows
        self.rows: list[Any] = []
        self.emitted = 0  # rows already flushed, so errors give the row's index in the file
        self.columns = columns
        if columns is not None:
            unknown = set(columns) - set(self.schema.names)
            if unknown:
                raise ValueError(f"table {table} has no columns {sorted(unknown)}")
            self._slot = {name: i for i, name in enumerate(columns)}

    def append(self, row: Any) -> Iterable[tuple[str, pa.RecordBatch]]:
        """Add a row; the full batch when one is ready, else nothing: every reader's idiom is
        `yield from builder.append(row)`, then `yield from flush(*builders)` at the end. A
        plain call, not a generator: a row costs a list append and a length check."""
        rows = self.rows
        rows.append(row)
        if len(rows) >= self.batch_rows:
            return list(self.flush())
        return ()

    def add(self, row: Any) -> None:
        """Add a row without flushing (kept for callers that flush themselves)."""
        self.rows.append(row)

    def flush(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        if self.rows:
            try:
                if self.columns is None:
                    batch = pa.RecordBatch.from_pylist(self.rows, schema=self.schema)
                else:
                    batch = self._from_tuples()
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError) as e:
                raise TraceFormatError(self._bad_value(e)) from e
            n, self.rows = len(self.rows), []
            yield self._finished(batch, n)

    def _finished(self, batch: pa.RecordBatch, n: int) -> tuple[str, pa.RecordBatch]:
        """A converted batch of `n` rows as the reader hands it on: counted (error messages
        give a row's index in the file), kernels classified, nodes annotated."""
        self.emitted += n
        if self.table == "kernels":
            batch = classify_kernels(batch)
        elif self.table == "nodes" and self.annotate:
            batch = annotate_nodes(batch)
        return self.table, batch

    def _bad_value(self, error: Exception) -> str:
        """Which row and column of the batch Arrow refused, and why (error path only)."""
        names = self.columns or self.schema.names
        for col, name in enumerate(names):
            typ = self.schema.field(name).type
            for r, row in enumerate(self.rows):
                value = row[col] if self.columns else row.get(name) if isinstance(row, dict) else None
                try:
                    pa.array([value], type=typ)
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError) as e:
                    return (f"{self.table} row #{self.emitted + r}{self._row_label(row)}: field {name} = "
                            f"{_short(value)} is not a valid {typ} ({type(e).__name__}: {str(e)[:120]})")
        return f"wrong value type for table {self.table}: {error}"

    def _row_label(self, row: Any) -> str:
        get = (lambda k: row.get(k)) if isinstance(row, dict) else (
            lambda k: row[self._slot[k]] if k in self._slot else None)
        parts = [f"{k} {_short(v)}" for k in ("seq", "node_name", "name") if (v := get(k)) is not None]
        return f" ({', '.join(parts)})" if parts else ""

    def _from_tuples(self) -> pa.RecordBatch:
        return self._from_columns(list(zip(*self.rows)), len(self.rows))

    def _from_columns(self, cols: list[Any], n: int) -> pa.RecordBatch:
        """A batch of `n` rows from one sequence or array per column of `columns`, in that
        order. Same conversion as from_pylist: each converted to its schema column's type
        by from_arrays; columns the reader lacks are all-null arrays."""
        return pa.RecordBatch.from_arrays(
            [cols[self._slot[f.name]] if f.name in self._slot else pa.nulls(n, f.type)
             for f in self.schema],
            schema=self.schema,
        )

    def __len__(self) -> int:
        return len(self.rows)


class ColumnBuilder(BatchBuilder):
    """A BatchBuilder fed a column at a time: `extend` takes one sequence per column of
    `columns` (all of one length) for a run of rows, so a reader that reads each field of a
    run of messages in one comprehension builds no tuple per row. Batches hold exactly
    `batch_rows` rows but the last, each column converted by one `pa.array` call; a value
    Arrow refuses gets `BatchBuilder`'s message (its row's index in the file, its column)."""

    def __init__(self, table: str, batch_rows: int, columns: tuple[str, ...], annotate: bool = True):
        super().__init__(table, batch_rows, columns, annotate)
        self.cols: list[list[Any]] = [[] for _ in columns]
        self._types = [self.schema.field(name).type for name in columns]

    def extend(self, cols: Iterable[Iterable[Any]]) -> Iterable[tuple[str, pa.RecordBatch]]:
        """Add a run of rows, one sequence per column; the full batches when some are ready."""
        for have, new in zip(self.cols, cols):
            have += new
        if len(self.cols[0]) >= self.batch_rows:
            return list(self._batches(full_only=True))
        return ()

    def append(self, row: Any) -> Iterable[tuple[str, pa.RecordBatch]]:
        return self.extend([value] for value in row)

    def add(self, row: Any) -> None:
        for have, value in zip(self.cols, row):
            have.append(value)

    def flush(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        return self._batches(full_only=False)

    def _batches(self, full_only: bool) -> Iterator[tuple[str, pa.RecordBatch]]:
        k = self.batch_rows
        while len(self.cols[0]) >= k or (not full_only and self.cols[0]):
            cut = min(k, len(self.cols[0]))
            part = [c[:cut] for c in self.cols] if cut < len(self.cols[0]) else self.cols
            self.cols = [c[cut:] for c in self.cols] if part is not self.cols else [[] for _ in self.cols]
            yield from self._emit(part)

    def _emit(self, part: list[list[Any]]) -> Iterator[tuple[str, pa.RecordBatch]]:
        n = len(part[0])
        try:
            batch = self._from_columns([pa.array(col, typ) for col, typ in zip(part, self._types)], n)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError) as e:
            self.rows = list(zip(*part))  # error path: BatchBuilder's message names the row
            raise TraceFormatError(self._bad_value(e)) from e
        yield self._finished(batch, n)

    def __len__(self) -> int:
        return len(self.cols[0])


def flush(*builders: BatchBuilder) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The rows the builders still hold, as batches: a reader's last step."""
    for b in builders:
        yield from b.flush()


def annotate_nodes(batch: pa.RecordBatch) -> pa.RecordBatch:
    """FLOPs, bytes and their rule per op (`tracedb.flops`), where a rule or the source gives them."""
    from tracedb.flops import annotate_nodes as annotate

    return annotate(batch)


def classify_kernels(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Fill `kernel_type` / `kernel_category` (where the reader left them NULL) by the
    name rules of `tracedb.kernel_types`, one lookup per distinct (name, kind)."""
    from tracedb.kernel_types import classify

    ti, ci = batch.schema.get_field_index("kernel_type"), batch.schema.get_field_index("kernel_category")
    if batch.column(ti).null_count == 0 and batch.column(ci).null_count == 0:
        return batch
    pairs = [classify(n, k) for n, k in zip(batch.column("name").to_pylist(), batch.column("kind").to_pylist())]
    types = [t if t0 is None else t0 for (t, _), t0 in zip(pairs, batch.column(ti).to_pylist())]
    cats = [c if c0 is None else c0 for (_, c), c0 in zip(pairs, batch.column(ci).to_pylist())]
    batch = batch.set_column(ti, "kernel_type", pa.array(types, pa.string()))
    return batch.set_column(ci, "kernel_category", pa.array(cats, pa.string()))
