"""Parquet data files of the lake: `<table>/run_id=<id>/device=<dev>/part-<ingest>-<n>.parquet`.

Readers stream batches; `FileWriter` routes them by device into one parquet file per
(table, device), written straight into its final partition folder of the lake (see
`tracedb.lake`): a file is not live until the lake's Delta commit adds it, so a failed
or crashed ingest never leaves anything visible, and nothing is written twice. As Delta
Lake wants, the partition columns (run_id, device) are in the path and the log, not in
the file; every row carries its `ingest_id`. Pages carry CRC checksums.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracedb import lake, schema, storage
from tracedb.errors import TraceFormatError

partition_dir = lake.partition_dir


def conform(batch: pa.RecordBatch | pa.Table, table: str, fill: dict[str, object]) -> pa.Table:
    """Give a reader's batch (or an old file's table) the full table schema: missing
    columns NULL, constants filled, types cast."""
    target = schema.TABLES[table]
    n = batch.num_rows
    cols = []
    for f in target:
        if f.name in fill and (f.name not in batch.schema.names or batch.column(f.name).null_count == n):
            cols.append(pa.repeat(pa.scalar(fill[f.name], type=f.type), n))
        elif f.name in batch.schema.names:
            col = batch.column(f.name)
            if col.type != f.type:
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise TraceFormatError(f"column {table}.{f.name}: {e}") from e
            cols.append(col)
        else:
            cols.append(pa.nulls(n, type=f.type))
    return pa.Table.from_arrays(cols, schema=target)


# Numeric columns whose values are (nearly) all distinct: written plain, not dictionary-encoded.
PLAIN_COLUMNS = ("seq", "node_seq", "correlation_id", "external_id", "address")


@functools.lru_cache(maxsize=None)
def dictionary_columns(table: str) -> list[str]:
    """The Parquet columns written dictionary-encoded: all but timestamps and durations
    (`*_ns`) and ids (PLAIN_COLUMNS), which are nearly all distinct. pyarrow's default
    dictionary-encodes every column and spent the time building dictionaries of those:
    one rank of the Kineto H200 fixture writes in ~13 instead of ~14.5 ms of CPU, into
    ~20% smaller files (best of 11). Repeating columns (names, devices, steps, streams,
    threads) keep their dictionaries, which DuckDB's scans and groupings use."""
    out = []
    for f in lake.file_schema(table):
        if f.name.endswith("_ns") or f.name in PLAIN_COLUMNS:
            continue
        out.append(f.name)
        t = f.type
        while pa.types.is_list(t):  # a nested column's leaf
            out[-1] += ".list.element"
            t = t.value_type
    return out


@dataclass
class FileWriter:
    """Writes one source file's batches into the lake, one parquet file per (table, device)."""

    root: Path | str  # the warehouse: a folder or an object-storage URL (tracedb.storage)
    run_id: str
    ingest_id: str
    file_tag: str  # unique within the ingest: keeps several source files from colliding
    fill: dict[str, object] = field(default_factory=dict)  # constant columns, e.g. source_file
    _writers: dict[tuple[str, str], pq.ParquetWriter] = field(default_factory=dict)
    _rows: dict[tuple[str, str], int] = field(default_factory=dict)
    _paths: dict[tuple[str, str], str] = field(default_factory=dict)
    _sinks: dict[tuple[str, str], storage.HashingFile] = field(default_factory=dict)  # object storage

    def __post_init__(self) -> None:
        self.fill = {**self.fill, "run_id": self.run_id}
        self.root = storage.location(self.root)
        self._store = storage.open_storage(self.root) if storage.is_remote(self.root) else None

    def _open(self, key: tuple[str, str], rel: str) -> pq.ParquetWriter:
        """A folder: the file's path; object storage: an upload that hashes as it goes."""
        if self._store is None:
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            where = self.root / rel
        else:
            where = self._sinks[key] = self._store.open_write(rel)
        return pq.ParquetWriter(where, lake.file_schema(key[0]), compression="zstd", write_page_checksum=True,
                                use_dictionary=dictionary_columns(key[0]))

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        data = conform(batch, table, self.fill)
        if data.num_rows == 0:
            return
        if data.column("device").null_count:
            raise TraceFormatError(f"reader produced {table} rows without a device")
        devices = pc.unique(data.column("device")).to_pylist()
        for device in devices:
            part = data if len(devices) == 1 else data.filter(pc.equal(data.column("device"), device))
            key = (table, device)
            if key not in self._writers:
                rel = f"{partition_dir(table, self.run_id, device)}/part-{self.file_tag}.parquet"
                self._paths[key] = rel
                self._rows[key] = 0
                self._writers[key] = self._open(key, rel)
            out = part.drop_columns(lake.PARTITIONS).append_column(
                lake.INGEST_ID, pa.repeat(pa.scalar(self.ingest_id), part.num_rows))
            self._writers[key].write_table(out)
            self._rows[key] += part.num_rows

    def close(self) -> list[lake.DataFile]:
        for w in self._writers.values():
            w.close()
        for sink in self._sinks.values():
            sink.close()  # the upload completes here
        out = [lake.DataFile(t, self.run_id, d, rel, self._rows[(t, d)], *self._size_and_hash((t, d), rel),
                             ingest_id=self.ingest_id) for (t, d), rel in self._paths.items()]
        self._writers.clear()
        return out

    def _size_and_hash(self, key: tuple[str, str], rel: str) -> tuple[int, str]:
        if key in self._sinks:
            return self._sinks[key].size, self._sinks[key].sha256
        return lake.size_and_hash(self.root / rel)

    def abort(self) -> None:
        for w in self._writers.values():
            try:
                w.close()
            except Exception:  # noqa: BLE001 - best effort cleanup of a failed file
                pass
        for sink in self._sinks.values():
            sink.discard()
        for rel in self._paths.values():
            if self._store is None:
                (self.root / rel).unlink(missing_ok=True)
            else:
                self._store.unlink(rel)
        self._writers.clear()


@dataclass
class FileResult:
    """What reading one source file gave: its record in `files`, its rows and the data
    files the `FileWriter` wrote (ingest commits them; etlink adds to them)."""

    path: str  # as shown to the user
    rel: str  # relative to the run root: recorded in the warehouse
    size_bytes: int = 0
    sha256: str = ""
    format: str | None = None
    rows: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0
    written: list[lake.DataFile] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    warnings: dict = field(default_factory=dict)
    warning: str | None = None  # read, but something the user should know (e.g. a guessed rank)
    skipped: str | None = None  # why it was not read: no reader claims it (a README, a log)
    own_rank: int | None = None  # the rank the trace itself names (Kineto's distributedInfo)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def status(self) -> str:
        return "error" if self.error else "skipped" if self.skipped else "ok"
