"""Parquet data files of the lake: `<table>/part-<ingest>-<n>.parquet`.

Readers stream batches; `FileWriter` writes each source file's rows into one parquet file
per table, in the lake's table folder (see `tracedb.lake`): a file is not live until the
lake's Delta commit adds it, so a failed or crashed ingest never leaves anything visible.
Every row carries its run_id, device and `ingest_id`. Pages carry CRC checksums.

An ingest group's files are then merged (`merge_group`), before the commit lock, into one
file a table ordered by run_id: a table gains a file a group, not a file a run, source
file and device (~17 a run in schema 7; docs/scale.md). A table still in the partitioned
layout of schema <= 7 (a lake whose older migrations run, `partitioned`) gets a file a
(table, device) in its run's partition folder, without the partition columns, as then.
"""

from __future__ import annotations

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


PLAIN_COLUMNS = lake.PLAIN_COLUMNS
dictionary_columns = lake.dictionary_columns


@dataclass
class FileWriter:
    """Writes one source file's batches into the lake, one parquet file per (table, device)."""

    root: Path | str | storage.Storage  # the warehouse (`storage.open_storage`: its storage is handed down)
    run_id: str
    ingest_id: str
    file_tag: str  # unique within the ingest: keeps several source files from colliding
    fill: dict[str, object] = field(default_factory=dict)  # constant columns, e.g. source_file
    partitioned: frozenset[str] = frozenset()  # tables in the partitioned layout (`Lake.partitioned_tables`)
    _writers: dict[tuple[str, str], pq.ParquetWriter] = field(default_factory=dict)
    _rows: dict[tuple[str, str], int] = field(default_factory=dict)
    _paths: dict[tuple[str, str], str] = field(default_factory=dict)
    _sinks: dict[tuple[str, str], object] = field(default_factory=dict)  # where each file goes (`storage.sink`)
    _devices: dict[tuple[str, str], set] = field(default_factory=dict)  # a file's devices (unpartitioned)

    def __post_init__(self) -> None:
        self.fill = {**self.fill, "run_id": self.run_id}
        self._store = storage.open_storage(self.root)
        self.root = self._store.root

    def _open(self, key: tuple[str, str], rel: str) -> pq.ParquetWriter:
        """A folder: the file's path; object storage: an upload that hashes as it goes."""
        where = self._sinks[key] = self._store.sink(rel)
        return pq.ParquetWriter(where, lake.file_schema(key[0], key[0] in self.partitioned), compression="zstd",
                                write_page_checksum=True, use_dictionary=dictionary_columns(key[0]))

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        data = conform(batch, table, self.fill)
        if data.num_rows == 0:
            return
        if data.column("device").null_count:
            raise TraceFormatError(f"reader produced {table} rows without a device")
        if table not in self.partitioned:  # one file a table, every device in it
            self._write(table, "", data.append_column(lake.INGEST_ID, pa.repeat(pa.scalar(self.ingest_id), data.num_rows)),
                        f"{table}/part-{self.file_tag}-{_safe(self.run_id)}.parquet")
            return
        devices = pc.unique(data.column("device")).to_pylist()
        for device in devices:
            part = data if len(devices) == 1 else data.filter(pc.equal(data.column("device"), device))
            out = part.drop_columns(lake.PARTITIONS).append_column(
                lake.INGEST_ID, pa.repeat(pa.scalar(self.ingest_id), part.num_rows))
            self._write(table, device, out, f"{partition_dir(table, self.run_id, device)}/part-{self.file_tag}.parquet")

    def _write(self, table: str, device: str, out: pa.Table, rel: str) -> None:
        key = (table, device)
        if key not in self._writers:
            self._paths[key] = rel
            self._rows[key] = 0
            self._devices[key] = set()
            self._writers[key] = self._open(key, rel)
        self._writers[key].write_table(out)
        self._rows[key] += out.num_rows
        if not device:
            self._devices[key].update(pc.unique(out.column("device")).to_pylist())

    def close(self) -> list[lake.DataFile]:
        for w in self._writers.values():
            w.close()
        out = [lake.DataFile(t, self.run_id, d or min(self._devices[(t, d)]), rel, self._rows[(t, d)],
                             *self._store.finish(rel, self._sinks[(t, d)]), ingest_id=self.ingest_id,
                             device_hi="" if d else max(self._devices[(t, d)]), partitioned=bool(d))
               for (t, d), rel in self._paths.items()]
        self._writers.clear()
        return out

    def abort(self) -> None:
        for w in self._writers.values():
            try:
                w.close()
            except Exception:  # noqa: BLE001 - best effort cleanup of a failed file
                pass
        for sink in self._sinks.values():
            self._store.drop_sink(sink)
        for rel in self._paths.values():
            self._store.unlink(rel)
        self._writers.clear()


def _safe(run_id: str) -> str:
    """A short tag of a run id for a file name (several runs' files share a table folder)."""
    import hashlib

    return hashlib.sha256(run_id.encode()).hexdigest()[:12]


# A merge holds its files' rows in memory (a sort): the group's files of a table are merged
# in chunks of at most this many bytes (compressed, ~5-10x in memory), in run order, and a
# file this large or larger stays as it is (a big run's file is no small-file problem).
MERGE_BYTES = 32 << 20


def _chunks(files: list[lake.DataFile]) -> list[list[lake.DataFile]]:
    """Files in run order, cut into chunks of at most MERGE_BYTES; a big file alone."""
    return lake.chunk_by_bytes(sorted(files, key=lambda f: (f.run_id, f.rel)), lambda f: f.size, MERGE_BYTES)


def merge_group(store: storage.Storage, files: list[lake.DataFile], ingest_id: str) -> list[lake.DataFile]:
    """An ingest group's files merged into one file a table (`lake.write_merged`: rows
    ordered by run_id; one a chunk of MERGE_BYTES, `_chunks`), written beside them under the
    ingest's id; the originals are then deleted (never logged). Files of a table in the
    partitioned layout are left as they are. Tables are merged in threads (pyarrow's reads,
    sorts and writes release the GIL)."""
    import secrets

    by_table: dict[str, list[lake.DataFile]] = {}
    kept = []
    for f in files:
        if f.partitioned:
            kept.append(f)
        else:
            by_table.setdefault(f.table, []).append(f)

    def merge(table: str, mine: list[lake.DataFile]) -> list[lake.DataFile]:
        out = []
        for chunk in _chunks(mine):
            if len(chunk) == 1:
                out += chunk
                continue
            sch = lake.file_schema(table)
            parts = [pq.read_table(store.parquet_source(f.rel), schema=sch) for f in chunk]
            merged = lake.write_merged(store, table, parts,
                                       f"{table}/part-{ingest_id}-g{secrets.token_hex(4)}.parquet", ingest_id)
            out += [merged] if merged is not None else []
            for f in chunk:
                store.unlink(f.rel)
        return out

    tables = list(by_table)
    out = lake.concurrently([lambda t=t: merge(t, by_table[t]) for t in tables])
    return kept + [f for group in out for f in group]


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
