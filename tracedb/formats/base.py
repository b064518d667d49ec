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
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator

import pyarrow as pa

from tracedb import schema
from tracedb.errors import TraceFormatError

HEAD_BYTES = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"


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
    # Set by `formats.read`: the format that actually read the file (after any fallback).
    format: str | None = None

    def warn(self, what: str, n: int = 1) -> None:
        """Count a problem that did not stop the read (an unknown event category, ...);
        the counts land in the file's metadata as `warnings` (shown in `files.metadata`)."""
        warnings = self.metadata.setdefault("warnings", {})
        warnings[what] = warnings.get(what, 0) + n


def open_trace(path: Path) -> IO[bytes]:
    """Open a trace for reading, gunzipping transparently (detected from the magic bytes)."""
    f = open(path, "rb")
    if f.read(2) == GZIP_MAGIC:
        f.close()
        return gzip.open(path, "rb")
    f.seek(0)
    return f


def read_head(path: Path, n: int = HEAD_BYTES) -> bytes:
    """The first n bytes of the (decompressed) trace; what `sniff` sees."""
    try:
        with open_trace(path) as f:
            return f.read(n)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        # A truncated gzip may fail even on the head; let sniffers see what we have.
        raise TraceFormatError(f"cannot read: {e}") from e


def read_all(path: Path) -> bytes:
    """The whole decompressed trace; a truncated gzip is an error, not a short read."""
    try:
        with open_trace(path) as f:
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


class BatchBuilder:
    """Collects rows for one table and emits Arrow batches in the table's schema.

    Rows are dicts that need only the keys the reader knows (missing columns become
    NULL), or, with `columns=`, tuples of those columns' values in that order: no dict
    per row, and the batch is built column by column (`zip(*rows)`), which is what a
    reader emitting millions of rows wants.
    """

    def __init__(self, table: str, batch_rows: int = 65536, columns: tuple[str, ...] | None = None):
        self.table = table
        self.schema = schema.TABLES[table]
        self.batch_rows = batch_rows
        self.rows: list[Any] = []
        self.columns = columns
        if columns is not None:
            unknown = set(columns) - set(self.schema.names)
            if unknown:
                raise ValueError(f"table {table} has no columns {sorted(unknown)}")
            self._slot = {name: i for i, name in enumerate(columns)}

    def append(self, row: Any) -> Iterator[tuple[str, pa.RecordBatch]]:
        """Add a row; yields a full batch when one is ready (use `yield from`)."""
        self.rows.append(row)
        if len(self.rows) >= self.batch_rows:
            yield from self.flush()

    def add(self, row: Any) -> None:
        """Add a row without flushing (for readers that flush at the end)."""
        self.rows.append(row)

    def flush(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        if self.rows:
            try:
                if self.columns is None:
                    batch = pa.RecordBatch.from_pylist(self.rows, schema=self.schema)
                else:
                    batch = self._from_tuples()
            except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                raise TraceFormatError(f"wrong value type for table {self.table}: {e}") from e
            self.rows = []
            if self.table == "kernels":
                batch = classify_kernels(batch)
            yield self.table, batch

    def _from_tuples(self) -> pa.RecordBatch:
        cols = list(zip(*self.rows))
        n = len(self.rows)
        # Same conversion as from_pylist: one sequence per schema column, converted to
        # that column's type by from_arrays; columns the reader lacks are all-null arrays.
        return pa.RecordBatch.from_arrays(
            [cols[self._slot[f.name]] if f.name in self._slot else pa.nulls(n, f.type)
             for f in self.schema],
            schema=self.schema,
        )

    def __len__(self) -> int:
        return len(self.rows)


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
