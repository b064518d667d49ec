"""Parquet storage: `<table>/run_id=<id>/device=<dev>/<file>.parquet`, Hive style.

Readers stream batches; `FileWriter` routes them by device into one parquet file per
(table, device) in a staging folder. Nothing under the warehouse's table folders is
touched until the catalog commits (see `catalog.commit_runs`), so a failed or crashed
ingest never leaves half a run visible.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracedb import schema
from tracedb.errors import TraceFormatError

STAGING = "_staging"


def partition_dir(table: str, run_id: str, device: str) -> Path:
    """Relative partition folder; values URL-encoded (contract)."""
    enc = lambda v: urllib.parse.quote(v, safe="")  # noqa: E731
    return Path(table) / f"run_id={enc(run_id)}" / f"device={enc(device)}"


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


@dataclass
class WrittenFile:
    table: str
    device: str
    path: Path  # relative to the staging root
    rows: int


@dataclass
class FileWriter:
    """Writes one source file's batches into staging, one parquet file per (table, device)."""

    staging_root: Path
    run_id: str
    file_tag: str  # unique within the run: keeps several source files from colliding
    fill: dict[str, object] = field(default_factory=dict)  # constant columns, e.g. source_file
    _writers: dict[tuple[str, str], pq.ParquetWriter] = field(default_factory=dict)
    _rows: dict[tuple[str, str], int] = field(default_factory=dict)
    _paths: dict[tuple[str, str], Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.fill = {**self.fill, "run_id": self.run_id}

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
                rel = partition_dir(table, self.run_id, device) / f"part-{self.file_tag}.parquet"
                (self.staging_root / rel).parent.mkdir(parents=True, exist_ok=True)
                self._paths[key] = rel
                self._rows[key] = 0
                self._writers[key] = pq.ParquetWriter(
                    self.staging_root / rel, schema.TABLES[table], compression="zstd"
                )
            self._writers[key].write_table(part)
            self._rows[key] += part.num_rows

    def close(self) -> list[WrittenFile]:
        for w in self._writers.values():
            w.close()
        out = [WrittenFile(t, d, self._paths[(t, d)], self._rows[(t, d)]) for (t, d) in self._writers]
        self._writers.clear()
        return out

    def abort(self) -> None:
        for w in self._writers.values():
            try:
                w.close()
            except Exception:  # noqa: BLE001 - best effort cleanup of a failed file
                pass
        for rel in self._paths.values():
            (self.staging_root / rel).unlink(missing_ok=True)
        self._writers.clear()
