"""The lake: every table of a warehouse is a Delta Lake table, written with delta-rs.

Layout (contract):

    <warehouse>/<table>/_delta_log/                      which files are live
    <warehouse>/<table>/part-*.parquet                   data tables: files of many runs
    <warehouse>/runs/, files/, ingest_log/               metadata tables
    <warehouse>/_tracedb/lake.json                       schema version and applied migrations
    <warehouse>/_tracedb/commit.lock                     serialises commits (never reads)

The store owns every file written into or deleted from the lake: the readers' batches
are written by `store.FileWriter` straight into their table folders (no file is live
until a Delta commit adds it), and only this module commits, removes or vacuums.

## The layout (schema 8, issue 22; the figures are in docs/scale.md)

No table is partitioned: `run_id` and `device` are columns of every file. An ingest group's
files are merged before the commit lock into one file a table (`store.merge_group`,
`write_merged`: rows ordered by run_id then device, row groups of 128 k rows), and each
add action carries the min/max of run_id, device and ingest_id as stats, exact (the stats
delta-rs computes truncate long strings). A file is live while it holds a row of a
published run's live ingest (`_live_runs`: the published runs in its run range whose live
ingest is in its ingest range); a re-ingest or `rm` rewrites no file: the views keep
`(run_id, ingest_id) IN runs`, a file left with no live row is removed from the log, and
compaction drops the others' rows (`compaction_plan`: tiers of rows, ten files of a tier
merged into the next, until a file is full at 64-128 MiB or 16-32 M rows; an ingest makes
only the merges that fit its own rows, `ingest_compaction`, and `optimize` the others and
every small file, outside the commit lock). Schema 7 partitioned every data
table by run and device: ~17 files a run, a cost every commit, publish and query paid
per file. A lake migrating from it meets both layouts while its older migrations run
(`partitioned`, `partition_new_tables`); migration 0013 rewrites it.

## The publish protocol: a reader never sees half a run

Every data row carries the `ingest_id` of the ingest that wrote it, and the `runs` table
holds one row per run naming its live ingest. A group of runs is committed, under the
commit lock, in this order:

1. each data table: one Delta commit adding the group's new files (invisible so far:
   no `runs` row names their ingest), once every one is checked to be there as written
   (a commit never publishes a file that is not there);
2. `ingest_log` (appended rows), and the `files` rows of runs that keep their version
   (the errors of a re-ingest that failed);
3. `runs`: one Delta commit replacing the group's rows. **This is the publish point.**
4. `files`: the replaced runs' rows; then each data table: one commit removing the files
   that hold no live row any more (of superseded ingests, and of any ingest that crashed
   before step 3).
5. the caller (ingest) publishes the DuckDB snapshot (`catalog.publish`).

A crash between steps 3 and 4 leaves `files` a version behind for those runs: the
snapshot takes their rows from the ingest log (`live_file_rows`), and `vacuum` rewrites
them (`repair_files`); a crash before step 3 leaves `files` as it was.

## Vacuum and live ingests

An ingest writes its files long before it commits them; to a full vacuum they are
files no log lists. Each ingest holds a mark while it lives (`storage`'s `ingest_mark`),
and `vacuum` spares every file named with a live ingest's id, whatever the retention.

A reader of the views (DuckDB snapshot, `tracedb ddl` views on Spark/Trino) selects each
run's rows of its live ingest only, so at any instant, and after a SIGKILL at any point,
it sees every run wholly old or wholly new. A plain reader of one Delta table sees, for
the moments between steps 1 and 4, both versions of a re-ingested run: join on `runs`
(`WHERE (run_id, ingest_id) IN (SELECT run_id, ingest_id FROM runs)`) as the views do.

Reading traces and writing their parquet files take no lock; only steps 1-5 are
serialised (fcntl lock on `_tracedb/commit.lock`), so several `tracedb ingest`
processes write one lake at once: different runs land in parallel, the same run ends
as exactly one complete version (the last to commit), nothing is duplicated. Within a
commit the lock makes every logged-but-unpublished ingest a crashed one, which step 4
and `vacuum` may remove at once. delta-rs retries its own commit on a version clash.

## On object storage (`s3://bucket/prefix`, see `tracedb.storage`)

The same protocol, the same layout. Data files are uploaded straight into their
partition folders; delta-rs commits each table's log with conditional puts
(`conditional_put=etag`: a log entry is written with `If-None-Match`, so two writers
can never both write version N and the loser retries; chosen over a DynamoDB locking
provider because S3, MinIO, R2 and moto's server support conditional writes natively and
nothing else has to be deployed). The commit lock is a lease object
(`_tracedb/commit.lock`, created with `If-None-Match: *`, renewed and released with
`If-Match` on its ETag, taken over once expired); a writer that lost its lease
(`storage.lock_valid()`) stops before its next write, whatever the step (`_guard`):
before step 3 its runs keep their previous version (a logged-but-unpublished ingest is
still a crashed one), after it the clean-up is left to `vacuum`; `rm`, `optimize` and
`vacuum` hold the lease and stop the same way. `lake.json` is rewritten with one PUT.

Measured (2 cores): one group commit of 50 small runs (4 data tables + 3 metadata
tables) takes ~0.3 s; files are written once (no staging copy).

## The fixed cost of a commit (issue 12)

An ingest's rollups (`tracedb.rollups`) are computed under the lock, in a thread beside
step 1's commit of the files read (the rollup files are invisible until step 3 like the
others, so they are committed after, still in step 1), while this module reads every
other table's log. The lake keeps each table's live files (`add_actions`) and its small
tables' rows (`read_table`) per Delta version: a local table's log listing (~10 us) tells
whether a version is still the latest, so a handle is updated (~0.6 ms at load 1, 1-2 ms
under load) only for a table that changed; after its own commit the lake adds or drops
the files it committed in its record instead of reading the log again, when the listing
shows the one next version. Serial CPU of the tail of one TF StepStats run (1.4 MB) into an
existing lake, medians of 3, load ~7: rollups + commit + publish 510-630 -> 307-335 ms.
"""

from __future__ import annotations

import functools
import json
import time
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa

from tracedb import faults, schema, storage
from tracedb.errors import TracedbError, WarehouseError
from tracedb.storage import concurrently, sql_str  # noqa: F401  (lake.concurrently, lake.sql_str: callers use them)

META_DIR = "_tracedb"
LAKE_JSON = f"{META_DIR}/lake.json"
LOCK_FILE = f"{META_DIR}/commit.lock"
# live data files that may hold rows no longer live (`Lake.whole_files`); schema 9 (0014)
DEAD_ROWS = f"{META_DIR}/dead_rows.json"
INGESTS_DIR = f"{META_DIR}/ingests"  # marks of live ingests (`storage.LocalStorage.ingest_mark`)
CATALOG = "catalog.duckdb"  # the DuckDB snapshot of the lake (tracedb.catalog)
# The partition columns of a data table in the layout of schema <= 7 (one folder a run and
# device); from schema 8 (migration 0013) data tables are unpartitioned and run_id and
# device are columns of the files (see "The layout" above). A lake that migrates from an
# older schema meets both while its older migrations run: `Lake.partitioned` tells a
# table's layout from its Delta metadata.
PARTITIONS = ["run_id", "device"]
# The metadata tables a commit writes (through handles opened beside its step 1)
META_WRITTEN = ("runs", "files", "ingest_log", "checksums")
INGEST_ID = pa.field("ingest_id", pa.string(), metadata={"doc": "ingest that wrote the row; a run's live ingest is runs.ingest_id"})
# Files removed from the log stay on disk this long, so open snapshots keep working.
DEFAULT_RETENTION_HOURS = 168


# How a lost commit lease is reported, by where the writer was (`Lake._guard`)
_BEFORE_PUBLISH = ("before publishing (the runs keep their previous version; `tracedb vacuum` removes what "
                   "was written)")
_AFTER_PUBLISH = "after publishing (the runs were published; their clean-up stopped: `tracedb vacuum` finishes it)"
_MAINTENANCE = "(stopped before its next write; `tracedb vacuum` finishes what is left)"


def delta_schema(table: str) -> pa.Schema:
    """The Delta table's logical schema: the view's columns plus ingest_id."""
    sch = schema.ALL_TABLES[table]
    return sch if "ingest_id" in sch.names or table in schema.NO_INGEST_ID else sch.append(INGEST_ID)


# A data table's Delta properties. Readers find a run's live files by the `ingest_id`
# stats of its add actions (`add_actions`); Delta (and delta-rs reading the log) keeps
# stats only for a table's first 32 columns unless told otherwise, and `ingest_id` is
# the last column: a table of more than 32 columns (nodes from schema 7) would lose
# every file's ingest_id range, so its runs' files would not be live. tracedb writes
# stats of ingest_id alone (`add_action`), so that is the column named.
# From schema 8 the stats name run_id and device too: a file holds many runs, and its
# run_id range is what lets a reader (the snapshot's views, Spark, Trino, delta-rs) skip it.
STATS_COLUMNS = ("run_id", "device", INGEST_ID.name)
DATA_TABLE_PROPERTIES = {"delta.dataSkippingStatsColumns": ",".join(STATS_COLUMNS)}
LEGACY_TABLE_PROPERTIES = {"delta.dataSkippingStatsColumns": INGEST_ID.name}  # schema <= 7, partitioned


def file_schema(table: str, partitioned: bool = False) -> pa.Schema:
    """What a data file holds: every column of the table and ingest_id; in the partitioned
    layout of schema <= 7, not the partition columns (run_id, device: in the path and log)."""
    sch = delta_schema(table)
    return pa.schema([f for f in sch if not (partitioned and f.name in PARTITIONS)])


# Folder names are at most 255 bytes. Percent-encoding every byte of a non-ASCII name
# triples it (a 200-byte Japanese run id became 600 bytes: "File name too long"), so only
# ASCII that is unsafe in a path or a Hive value is encoded; other characters stay as UTF-8
# (DuckDB, Spark and delta-rs decode both forms to the same value).
_UNSAFE = {c for c in range(0x80) if not (chr(c).isalnum() or chr(c) in "-_.~!$&'()+,;@[]^`{}")}
MAX_VALUE_BYTES = 240  # "run_id=" + value within a 255-byte folder name


def creation_commit(table: str, parts: list[str] | None, props: dict | None) -> bytes | None:
    """The first Delta log entry of a new, empty `table`: what delta-rs writes for it
    (protocol 1/2, the schema as delta-rs states it, name, description, partition columns
    and properties: tests/test_lake.py compares the two), with a commit note of tracedb's.
    None where the schema needs a newer protocol (a timestamp without time zone: a table
    feature), which delta-rs then writes."""
    import uuid

    from deltalake import Schema

    from tracedb._version import __version__

    fields = Schema.from_arrow(delta_schema(table)).to_json()
    if '"timestamp_ntz"' in fields:
        return None
    now = int(time.time() * 1000)
    actions = [
        {"commitInfo": {"timestamp": now, "operation": "CREATE TABLE", "operationParameters": {"mode": "Ignore"},
                        "engineInfo": f"tracedb-{__version__}", "clientVersion": f"tracedb-{__version__}"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": str(uuid.uuid4()), "name": table, "description": schema.TABLE_DOCS.get(table),
                      "format": {"provider": "parquet", "options": {}},
                      "schemaString": fields,
                      "partitionColumns": list(parts or []), "createdTime": now, "configuration": dict(props or {})}},
    ]
    return "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions).encode()


# `Lake.add_actions` of a table without files
NO_ACTIONS = pa.schema([("path", pa.string()), ("size", pa.int64()), ("rows", pa.int64()), ("run_id", pa.string()),
                        ("run_hi", pa.string()), ("device", pa.string()), ("min_ingest", pa.string()),
                        ("max_ingest", pa.string()), ("partitioned", pa.bool_())]).empty_table()


def _encode(value: str) -> str:
    return "".join(urllib.parse.quote(ch, safe="") if ord(ch) in _UNSAFE else ch for ch in value)


def partition_dir(table: str, run_id: str, device: str) -> str:
    """Relative partition folder; values URL-encoded (contract) where a path needs it."""
    enc_run = _encode(run_id)
    if len(enc_run.encode()) > MAX_VALUE_BYTES:
        raise TracedbError(f"run id {run_id[:40]!r}... is too long for a folder name "
                           f"({len(enc_run.encode())} bytes encoded, at most {MAX_VALUE_BYTES}); use --run-id")
    return f"{table}/run_id={enc_run}/device={_encode(device)}"


def size_and_hash(path: Path) -> tuple[int, str]:
    with open(path, "rb") as f:
        return storage.sha256_of(f)


@dataclass
class DataFile:
    """A parquet file written into the lake, not yet committed."""

    table: str
    run_id: str
    device: str
    rel: str  # relative to the warehouse
    rows: int
    size: int
    sha256: str
    ingest_id: str
    logged: bool = False  # added to the Delta log: only remove_unpublished + vacuum may delete it
    run_hi: str = ""  # the file's last run (its rows are ordered by run_id); "": run_id alone
    device_hi: str = ""  # its greatest device; "": device alone
    partitioned: bool = False  # a file of a table in the partitioned layout of schema <= 7
    ingest_hi: str = ""  # a merged file's greatest ingest_id; "": ingest_id alone

    def __post_init__(self) -> None:
        self.run_hi = self.run_hi or self.run_id
        self.device_hi = self.device_hi or self.device
        self.ingest_hi = self.ingest_hi or self.ingest_id


def add_action(f: DataFile, now_ms: int, ingest_range: tuple[str, str] | None = None):
    """The Delta add action of a file we wrote: row count and the min/max of run_id, device
    and ingest_id as stats (readers skip other runs' files and select live ones by them);
    in the partitioned layout of schema <= 7, partition values and ingest_id's stats."""
    from deltalake.transaction import AddAction

    lo, hi = ingest_range or (f.ingest_id, f.ingest_hi)
    if f.partitioned:
        parts = {"run_id": f.run_id, "device": f.device}
        stats = {"numRecords": f.rows, "minValues": {"ingest_id": lo}, "maxValues": {"ingest_id": hi},
                 "nullCount": {"ingest_id": 0}}
    else:
        parts = {}
        stats = {"numRecords": f.rows,
                 "minValues": {"run_id": f.run_id, "device": f.device, "ingest_id": lo},
                 "maxValues": {"run_id": f.run_hi, "device": f.device_hi, "ingest_id": hi},
                 "nullCount": {"run_id": 0, "device": 0, "ingest_id": 0}}
    # delta-rs URL-encodes the path for the log; it takes the path as on disk, table-relative.
    return AddAction(f.rel.split("/", 1)[1], f.size, parts, now_ms, True, json.dumps(stats))


def remove_action(r: dict, now_ms: int):
    """The Delta remove action of a live file (a row of `Lake.add_actions`)."""
    from deltalake.transaction import RemoveAction

    parts = {"run_id": r["run_id"], "device": r["device"]} if r.get("partitioned") else {}
    return RemoveAction(r["path"].split("/", 1)[1], True, now_ms, r["size"], parts)


# A merged file's row groups: rows ordered by run_id, so each row group's run_id min/max
# (Parquet statistics) is a narrow range and a one-run read skips the others.
ROW_GROUP_ROWS = 128 * 1024


def write_merged(storage_: storage.Storage, table: str, parts: list[pa.Table],
                 rel: str, ingest_id: str) -> DataFile | None:
    """Write these rows of `table` (each in the lake's file schema, run_id and device
    included) as one file at `rel`, ordered by run_id then device (a stable sort: a run's
    rows keep their order); None when there are no rows. The file is not live until a
    commit adds it. `ingest_id` names the ingest whose mark spares it from vacuum."""
    import pyarrow.compute as pc

    data = pa.concat_tables(parts) if parts else None
    if data is None or data.num_rows == 0:
        return None
    order = pc.sort_indices(data, [("run_id", "ascending"), ("device", "ascending")])
    return _write_groups(storage_, table, rel, data.schema, _row_groups(data, order))


def write_ordered(storage_: storage.Storage, table: str, data: pa.Table, rel: str) -> DataFile:
    """`write_merged` for rows already in its order (by run_id, then device): the file it
    would write, without the sort (bench/fleet_synthetic.py writes a fleet's files so)."""
    return _write_groups(storage_, table, rel, data.schema, _slices(data))


def write_pieces(storage_: storage.Storage, table: str, pieces: Iterator[pa.Table], rel: str) -> DataFile | None:
    """`write_merged` for rows that come in its order as pieces (each in the lake's file
    schema): the file it would write, holding a row group at a time (migration 0013 reads
    a partitioned lake's files run by run, device by device); None when there are none."""
    return _write_groups(storage_, table, rel, file_schema(table), _regroup(pieces))


def _slices(data: pa.Table) -> Iterator[pa.Table]:
    """`data` a row group (ROW_GROUP_ROWS) at a time, zero-copy."""
    for start in range(0, data.num_rows, ROW_GROUP_ROWS):
        yield data.slice(start, ROW_GROUP_ROWS)


def _write_groups(storage_: storage.Storage, table: str, rel: str, sch: pa.Schema,
                  groups: Iterator[pa.Table]) -> DataFile | None:
    """Rows given as row groups in file order (with schema `sch`), written at `rel` with
    the lake's Parquet options, and the file's DataFile (its run, device and ingest
    ranges); None, and no file, when there are none. A group is let go once written."""
    out = _FileSink(storage_, table, rel, sch)
    try:
        for group in groups:
            out.write(group)
            del group  # not held while the next is made
    except BaseException:
        out.abort()
        raise
    return out.close()


class _FileSink:
    """One file being written at `rel` with the lake's Parquet options, a row group a
    `write`; `close` gives its DataFile (its run, device and ingest ranges), or None, and
    no file, when it got no rows."""

    def __init__(self, storage_: storage.Storage, table: str, rel: str, sch: pa.Schema):
        import pyarrow.parquet as pq

        self.storage, self.table, self.rel = storage_, table, rel
        self.sink = storage_.sink(rel)
        self.rows, self.lo, self.hi = 0, {}, {}
        try:
            self.writer = pq.ParquetWriter(self.sink, sch, compression="zstd", write_page_checksum=True,
                                           use_dictionary=dictionary_columns(table))
        except BaseException:
            storage_.drop_sink(self.sink)
            raise

    def write(self, group: pa.Table) -> None:
        import pyarrow.compute as pc

        self.writer.write_table(group, row_group_size=ROW_GROUP_ROWS)
        self.rows += group.num_rows
        for c in ("run_id", "device", INGEST_ID.name):
            mm = pc.min_max(group.column(c))
            self.lo[c] = min(self.lo.get(c, mm["min"].as_py()), mm["min"].as_py())
            self.hi[c] = max(self.hi.get(c, mm["max"].as_py()), mm["max"].as_py())

    def close(self) -> DataFile | None:
        self.writer.close()
        size, digest = self.storage.finish(self.rel, self.sink)
        if not self.rows:
            self.storage.unlink(self.rel)
            return None
        lo, hi = self.lo, self.hi
        return DataFile(self.table, lo["run_id"], lo["device"], self.rel, self.rows, size, digest,
                        ingest_id=lo[INGEST_ID.name], run_hi=hi["run_id"], device_hi=hi["device"],
                        ingest_hi=hi[INGEST_ID.name])

    def abort(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 - best effort: the file is dropped
            pass
        self.storage.drop_sink(self.sink)
        self.storage.unlink(self.rel)


class OrderedWriter:
    """Rows of `table` handed over in file order (each piece after the last: run order,
    then device), written as they come into files in `write_merged`'s order: row groups of
    `group_rows` rows (pieces held until one is full), a new file once one holds
    `file_rows` rows (a full file, `Lake._full`, which compaction leaves as it is). `rel`
    names each new file. The memory is a row group, whatever the rows' count."""

    def __init__(self, storage_: storage.Storage, table: str, rel: Callable[[], str], file_rows: int,
                 group_rows: int = ROW_GROUP_ROWS):
        self.storage, self.table, self.rel, self.file_rows = storage_, table, rel, file_rows
        self.group_rows = group_rows
        self.held: list[pa.Table] = []
        self.n = 0
        self.file: _FileSink | None = None
        self.done: list[DataFile] = []

    def write(self, rows: pa.Table) -> None:
        while rows.num_rows:
            cut = min(rows.num_rows, self.group_rows - self.n)
            self.held.append(rows.slice(0, cut))
            self.n, rows = self.n + cut, rows.slice(cut)
            if self.n == self.group_rows:
                self._flush()

    def _flush(self) -> None:
        if not self.n:
            return
        if self.file is None:
            self.file = _FileSink(self.storage, self.table, self.rel(), file_schema(self.table))
        self.file.write(_group(self.held, file_schema(self.table)))
        self.held, self.n = [], 0
        if self.file.rows >= self.file_rows:
            self._close_file()

    def _close_file(self) -> None:
        file, self.file = self.file, None
        if file is not None and (f := file.close()) is not None:
            self.done.append(f)

    def close(self) -> list[DataFile]:
        """The files written (none logged)."""
        self._flush()
        self._close_file()
        return self.done

    def abort(self) -> None:
        """Every file written or being written deleted."""
        if self.file is not None:
            self.file.abort()
        for f in self.done:
            self.storage.unlink(f.rel)
        self.done, self.held = [], []


# Above this many bytes of rows a merge gathers its row groups one at a time (`_row_groups`).
GATHER_BYTES = 1 << 30


def _row_groups(data: pa.Table, order: pa.Array) -> Iterator[pa.Table]:
    """The rows of `data` in `order`, a row group (ROW_GROUP_ROWS) at a time. One gather of
    the whole table puts each string column in one array, whose 32-bit offsets overflow
    past 2 GiB ("offset overflow while concatenating arrays"): compaction of 48 MB of
    Parquet holding ~20 M kernel rows, whose names repeat and compress ~50-fold, failed so
    (bench/RESULTS.md, "Session 12"). Past GATHER_BYTES the string columns are made
    64-bit (chunk by chunk) and each row group is gathered and made 32-bit again."""
    if data.nbytes <= GATHER_BYTES:
        yield from _slices(data.take(order))
        return
    wide = {i: f.type for i, f in enumerate(data.schema) if pa.types.is_string(f.type) or pa.types.is_binary(f.type)}
    for i, typ in wide.items():
        large = pa.large_string() if pa.types.is_string(typ) else pa.large_binary()
        data = data.set_column(i, data.schema.field(i).with_type(large),
                               pa.chunked_array([c.cast(large) for c in data.column(i).chunks], large))
    data = data.combine_chunks()
    for start in range(0, data.num_rows, ROW_GROUP_ROWS):
        group = data.take(order.slice(start, ROW_GROUP_ROWS))
        for i, typ in wide.items():
            group = group.set_column(i, data.schema.field(i).with_type(typ), group.column(i).cast(typ))
        yield group


# A streaming merge (`merge_files`) reads each input this many rows at a time: its memory
# is about ten inputs' batches and a row group (ten kernels inputs, peak RSS: 4 k rows
# ~400 MB, 32 k ~670 MB; bench/RESULTS.md "Session 15").
MERGE_BATCH_ROWS = 8 * 1024
# An input not already in run order is read once a (run_id, device) it holds (a run's own
# file: one to a few devices); one holding more keys than this is sorted in memory alone.
MERGE_PASSES = 16
# The columns a merge reads first, whole, to learn an input's order and its runs' ingests.
_KEY_COLUMNS = ("run_id", "device", INGEST_ID.name)


def merge_files(storage_: storage.Storage, table: str, sources: list[str], rel: str,
                keep: pa.Array | None = None) -> DataFile | None:
    """The rows of these live files of `table` (`keep`: only rows whose "run_id\\0ingest_id"
    is in it) written as one file at `rel`, in `write_merged`'s order (run_id, then
    device; ties in the order of `sources`, each file's rows in their order) and row
    groups: the same file, without holding the rows in memory. Compaction merges files
    already in run order (every merged file is), so this is a k-way merge of cursors
    holding a batch of MERGE_BATCH_ROWS each; the memory is the inputs' count times a
    batch, not their rows (ten files of repeated kernel names, 48 MB of Parquet, decoded
    to over 15 GB in the in-memory merge: bench/RESULTS.md "Session 13").

    What it costs is decoding and encoding (bench/RESULTS.md "Session 15"): the string
    columns other than the keys are read dictionary-encoded (repeated kernel and op names
    decode once a column chunk, not once a row) and made plain a row group at a time, just
    before the writer encodes them; `keep` is looked up once for each input's distinct
    (run, ingest) pairs, and an input whose rows are all kept is not filtered at all."""
    import heapq

    target = file_schema(table)
    opened = [storage_.parquet_source(s) for s in sources]
    if _few_rows_a_run(opened):
        return _merge_in_memory(storage_, table, opened, rel, keep)
    cursors = [_Cursor(_sorted_segments(s, table, keep)) for s in opened]
    heap = [(c.key, i) for i, c in enumerate(cursors) if c.key is not None]
    heapq.heapify(heap)

    def rows() -> Iterator[pa.Table]:
        while heap:
            key, i = heapq.heappop(heap)
            yield from cursors[i].take(key)
            if cursors[i].key is not None:
                heapq.heappush(heap, (cursors[i].key, i))

    return _write_groups(storage_, table, rel, target, _regroup(rows(), target))


# A merge of at most MERGE_IN_MEMORY_ROWS rows, fewer than MERGE_IN_MEMORY_RUN_ROWS a run,
# sorts them in memory (`_merge_in_memory`) instead of merging cursors: the k-way merge
# pays Python for each (run, device) key, and the rollup tables, `steps` and `annotations`
# hold a few rows a run (a merge of `steps` at 10,000 runs: ~15 us of CPU a row by
# cursors, ~1-3 in memory), while for kernels' ~2,000 rows a run the cursors cost half
# what the sort and gather do (bench/RESULTS.md "Session 17: compact17").
MERGE_IN_MEMORY_ROWS = 512 * 1024
MERGE_IN_MEMORY_RUN_ROWS = 128


def chunk_rows(chunk: list[dict]) -> int:
    """The rows of a merge's input files (`add_actions` rows)."""
    return sum(r["rows"] or 0 for r in chunk)


def _few_rows_a_run(sources: list) -> bool:
    """Whether these files hold at most MERGE_IN_MEMORY_ROWS rows, fewer than
    MERGE_IN_MEMORY_RUN_ROWS a run (each file's distinct runs counted from its run_id column)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    files = [pq.ParquetFile(s, pre_buffer=False) for s in sources]
    rows = sum(f.metadata.num_rows for f in files)
    if rows > MERGE_IN_MEMORY_ROWS:
        return False
    runs = sum(pc.count_distinct(f.read(columns=["run_id"], use_threads=False).column(0)).as_py() for f in files)
    return rows < MERGE_IN_MEMORY_RUN_ROWS * runs


def _merge_in_memory(storage_: storage.Storage, table: str, sources: list, rel: str,
                     keep: pa.Array | None) -> DataFile | None:
    """`merge_files` for a few rows: the inputs' kept rows read whole (strings other than
    the keys dictionary-encoded), one stable sort by run_id then device (ties in the order
    of the inputs, each input's rows in their order: the merge's order), written a row
    group at a time, made plain as `merge_files` writes them."""
    import pyarrow.compute as pc

    dictionary = _dictionary_schema(file_schema(table))
    parts = []
    for source in sources:
        pf = _dictionary_file(source, dictionary)
        parts += _conformed(pf.iter_batches(MERGE_BATCH_ROWS, use_threads=False), dictionary)
    data = pa.concat_tables(parts).unify_dictionaries().combine_chunks() if parts else None
    if data is not None and keep is not None:  # one lookup of the live keys for the merge
        data = data.filter(pc.is_in(_keys(data, ("run_id", INGEST_ID.name)), value_set=keep))
    if data is None or not data.num_rows:
        return None
    data = data.take(pc.sort_indices(data, [("run_id", "ascending"), ("device", "ascending")]))
    target = file_schema(table)
    return _write_groups(storage_, table, rel, target, _regroup(_slices(data), target))


def _keys(data: pa.Table | pa.RecordBatch, columns: tuple[str, str] = ("run_id", "device")) -> pa.Array:
    """Each row's "a\\0b" of two string columns: ordered as the pairs are (no id holds NUL)."""
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(data.column(columns[0]), data.column(columns[1]), "\x00")


def _conformed(batches: Iterator[pa.RecordBatch], target: pa.Schema) -> Iterator[pa.Table]:
    """Batches as tables of `target` (a column an older file lacks: NULL; a column of
    another type cast to the target's)."""
    for b in batches:
        cols = [(c if (c := b.column(f.name)).type == f.type else c.cast(f.type)) if f.name in b.schema.names
                else pa.nulls(b.num_rows, f.type) for f in target]
        yield pa.Table.from_arrays(cols, schema=target)


def _dictionary_schema(target: pa.Schema) -> pa.Schema:
    """`target` with its string columns, other than the keys, as dictionaries."""
    return pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type))
                      if f.name not in _KEY_COLUMNS and pa.types.is_string(f.type) else f for f in target])


def _dictionary_file(source, target: pa.Schema):
    """A Parquet file opened to read `target`'s dictionary columns (`_dictionary_schema`)
    dictionary-encoded, those it has (read_dictionary refuses a column the file lacks)."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(source, pre_buffer=False)
    present = set(pf.schema_arrow.names)
    return pq.ParquetFile(source, pre_buffer=False, metadata=pf.metadata, read_dictionary=[
        f.name for f in target if pa.types.is_dictionary(f.type) and f.name in present])


def _sorted_segments(source, table: str, keep: pa.Array | None) -> Iterator[tuple[str, pa.Table]]:
    """A file's kept rows as (key, rows) pieces in key order ("run_id\\0device"; a key may
    span pieces), its string columns dictionary-encoded (`_dictionary_schema`). A file in
    run order is read once, a batch at a time; one that is not (a run's file of several
    devices) once a key, or whole past MERGE_PASSES keys."""
    import pyarrow.compute as pc

    target = _dictionary_schema(file_schema(table))
    pf = _dictionary_file(source, target)

    in_order, last, seen, pairs = True, None, set(), set()
    for t in pf.iter_batches(MERGE_BATCH_ROWS, columns=list(_KEY_COLUMNS), use_threads=False):
        if not t.num_rows:
            continue
        k = _keys(t)
        if k[0].as_py() < (last or "") or not pc.all(pc.less_equal(k[:-1], k[1:])).as_py():
            in_order = False
        last = k[-1].as_py()
        if len(seen) <= MERGE_PASSES:
            seen.update(pc.unique(k).to_pylist())
        if keep is not None:
            pairs.update(pc.unique(_keys(t, ("run_id", INGEST_ID.name))).to_pylist())
    kept = None
    if keep is not None:
        found = pa.array(sorted(pairs), pa.string())
        kept = found.filter(pc.is_in(found, value_set=keep))
        if len(kept) == 0:
            return
        if len(kept) == len(found):
            kept = None  # every row kept: nothing to filter

    def batches() -> Iterator[pa.Table]:
        for t in _conformed(pf.iter_batches(MERGE_BATCH_ROWS, use_threads=False), target):
            if kept is not None:
                t = t.filter(pc.is_in(_keys(t, ("run_id", INGEST_ID.name)), value_set=kept))
            if t.num_rows:
                yield t

    if in_order:
        for t in batches():
            yield from _split(t)
    elif len(seen) <= MERGE_PASSES:
        for key in sorted(seen):
            for t in batches():
                part = t.filter(pc.equal(_keys(t), key))
                if part.num_rows:
                    yield key, part
    else:
        whole = pa.concat_tables(batches())
        yield from _split(whole.take(pc.sort_indices(_keys(whole))))


def _split(t: pa.Table, columns: tuple[str, ...] = ("run_id", "device")) -> Iterator[tuple[str, pa.Table]]:
    """Rows in key order (of `columns`, `_keys`) cut where the key changes."""
    import pyarrow.compute as pc

    k = t.column(columns[0]) if len(columns) == 1 else _keys(t, columns)
    starts = [0, *(i + 1 for i in pc.indices_nonzero(pc.not_equal(k[1:], k[:-1])).to_pylist())]
    ends = starts[1:] + [t.num_rows]
    for s, e in zip(starts, ends):
        yield k[s].as_py(), t.slice(s, e - s)


class _Cursor:
    """The head of one input's (key, rows) pieces (`_sorted_segments`)."""

    def __init__(self, pieces: Iterator[tuple[str, pa.Table]]):
        self.pieces = pieces
        self.key, self.rows = next(pieces, (None, None))

    def take(self, key: str) -> Iterator[pa.Table]:
        """Every piece of `key` at the head, in order; the head moves past them."""
        while self.key == key:
            yield self.rows
            self.key, self.rows = next(self.pieces, (None, None))


# `rows_by_run` reads each file this many rows at a time: its cursors are open at once (a
# table's live files, 20-60 of them; each holds a batch and a page of each column read).
RUN_BATCH_ROWS = 2 * 1024


class NotInRunOrder(TracedbError):
    """A file read in run order (`rows_by_run`) whose rows are not."""


def rows_by_run(storage_: storage.Storage, table: str, sources: list[str], columns: tuple[str, ...],
                live: dict[str, str]) -> Iterator[tuple[str, str, pa.Table]]:
    """The rows of these files of `table` of the runs of `live` (run_id -> the ingest_id
    whose rows to give), as (run_id, file, rows) pieces in run order (a run's pieces
    together, in file order within a file), only `columns` (a column a file lacks: NULL;
    ingest_id not included). A k-way merge of the files, each read once, MERGE_BATCH_ROWS
    rows at a time: the memory is the files' count times a batch, not their rows. Every
    file of the unpartitioned layout is in run order (a run's own file, or a merge's);
    one that is not raises NotInRunOrder."""
    import heapq

    target = pa.schema([file_schema(table).field(c) for c in columns])
    cursors = [_RunCursor(storage_, path, target, live) for path in sources]
    heap = [(c.run, i) for i, c in enumerate(cursors) if c.run is not None]
    heapq.heapify(heap)
    while heap:
        run, i = heapq.heappop(heap)
        cursor = cursors[i]
        while cursor.run == run:
            yield run, cursor.path, cursor.rows
            cursor.next()
        if cursor.run is not None:
            heapq.heappush(heap, (cursor.run, i))


class _RunCursor:
    """The head of one file's (run_id, rows) pieces of live runs (`rows_by_run`)."""

    def __init__(self, storage_: storage.Storage, path: str, target: pa.Schema, live: dict[str, str]):
        self.path = path
        self.pieces = self._pieces(storage_.parquet_source(path), target, live)
        self.next()

    def next(self) -> None:
        self.run, self.rows = next(self.pieces, (None, None))

    def _pieces(self, source, target: pa.Schema, live: dict[str, str]) -> Iterator[tuple[str, pa.Table]]:
        import pyarrow.compute as pc

        # string columns other than the keys read dictionary-encoded, as `merge_files` reads
        # them: a batch holds each distinct kernel name once, not once a row (a piece held
        # is a slice of its batch, which it keeps whole)
        target = _dictionary_schema(pa.schema([*target, INGEST_ID]))
        pf = _dictionary_file(source, target)
        present = set(pf.schema_arrow.names)
        wanted = [f.name for f in target if f.name in present]
        last = ""
        for t in _conformed(pf.iter_batches(RUN_BATCH_ROWS, columns=wanted, use_threads=False), target):
            if not t.num_rows:
                continue
            for run, piece in _split(t, ("run_id",)):
                if run < last:
                    raise NotInRunOrder(f"{self.path}: {run!r} after {last!r}")
                last = run
                ingest = live.get(run)
                if ingest is None:
                    continue
                mine = pc.equal(piece.column(INGEST_ID.name), ingest)
                if not pc.all(mine).as_py():
                    piece = piece.filter(mine)
                elif piece.num_rows < t.num_rows // 2:  # its own copy: the caller may hold it
                    piece = piece.take(pa.array(range(piece.num_rows), pa.int32()))
                if piece.num_rows:
                    yield run, piece.drop_columns([INGEST_ID.name])


def _regroup(pieces: Iterator[pa.Table], schema_: pa.Schema | None = None) -> Iterator[pa.Table]:
    """Pieces of rows as row groups of ROW_GROUP_ROWS (the last one shorter), each a table of
    the pieces' chunks (the Parquet writer writes a chunked table as one row group: no copy),
    cast to `schema_` if given (`merge_files`: dictionary columns made plain), combined
    only when made of thousands of pieces (a small table's runs: the writer pays per chunk)."""
    held, n = [], 0
    for p in pieces:
        while p.num_rows:
            cut = min(p.num_rows, ROW_GROUP_ROWS - n)
            held.append(p.slice(0, cut))
            n, p = n + cut, p.slice(cut)
            if n == ROW_GROUP_ROWS:
                yield _group(held, schema_)
                held, n = [], 0
    if n:
        yield _group(held, schema_)


def _group(held: list[pa.Table], schema_: pa.Schema | None) -> pa.Table:
    group = pa.concat_tables(held)
    if schema_ is not None and group.schema != schema_:
        group = group.cast(schema_)
    return group.combine_chunks() if len(held) > 4096 else group


def _row_keys(source, verify: bool = False, keys: bool = True) -> set[tuple[str, str]]:
    """The (run_id, ingest_id) pairs a Parquet file's rows hold (none without `keys`), read
    a row group at a time; with `verify`, every page read with its checksum verified, a
    column of a row group at a time (a 10 MB kernels file of repeated names decodes to
    gigabytes: read whole, `check` took 10.6 GB at 20,000 runs; a row group of its
    kernels, ~260 MB)."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(source, page_checksum_verification=verify, pre_buffer=False)
    wanted = ["run_id", INGEST_ID.name] if keys else []
    others = [n for n in pf.schema_arrow.names if n not in wanted] if verify else []
    out: set[tuple[str, str]] = set()
    for i in range(pf.num_row_groups):
        for name in others:
            pf.read_row_group(i, columns=[name], use_threads=False)
        if wanted:
            pairs = pf.read_row_group(i, columns=wanted, use_threads=False).group_by(wanted).aggregate([])
            out.update(zip(pairs.column("run_id").to_pylist(), pairs.column(INGEST_ID.name).to_pylist()))
    return out


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
    for f in file_schema(table):
        if f.name.endswith("_ns") or f.name in PLAIN_COLUMNS:
            continue
        out.append(f.name)
        t = f.type
        while pa.types.is_list(t):  # a nested column's leaf
            out[-1] += ".list.element"
            t = t.value_type
    return out


@dataclass
class RunCommit:
    """One run's part of a commit. replace=False (a file or run.json failed, without
    --partial) keeps the run's previous data and only records the files' errors."""

    run_row: dict
    files: list[DataFile]
    file_rows: list[dict]
    replace: bool
    ingest_id: str = ""


def chunk_by_bytes(items: list, size: Callable[[object], int | tuple[int, ...]],
                   limit: int | tuple[int, ...]) -> list[list]:
    """Items, in their order, cut into chunks of at most `limit` bytes (`size(item)`; or
    several measures at once, e.g. (bytes, rows) against a tuple of limits, each summed
    and bounded); an item that big is a chunk alone. The ingest group's merge
    (`store.merge_group`) and compaction (`Lake._bounded`) cut their files so."""
    limits = limit if isinstance(limit, tuple) else (limit,)
    out: list[list] = []
    totals = [0] * len(limits)
    for item in items:
        n = size(item)
        n = n if isinstance(n, tuple) else (n,)
        if not out or any(t + k > cap for t, k, cap in zip(totals, n, limits)):
            out.append([])
            totals = [0] * len(limits)
        out[-1].append(item)
        totals = [t + k for t, k in zip(totals, n)]
    return out


class Published(dict):
    """run_id -> its live ingest_id (`Lake.published`), with the sorted lookups
    `Lake._live_runs` makes, built once a read (a commit's clean-up asks for every table's
    files). Not to be changed once read."""

    @classmethod
    def of(cls, published: dict[str, str | None]) -> Published:
        """`published` itself when it is one (its index built once), else a new one."""
        return published if isinstance(published, Published) else cls(published)

    @functools.cached_property
    def index(self) -> tuple[list[str], list[str], pa.Array]:
        """The runs sorted; the distinct live ingest ids sorted; for each sorted run, the
        position of its live ingest id among those (-1: none). String order is UTF-8 byte
        order, as Python's and the add actions' stats."""
        import pyarrow.compute as pc

        runs = sorted(self)
        ingests = sorted({i for i in self.values() if i is not None})
        at = pc.index_in(pa.array([self[r] for r in runs], pa.string()), value_set=pa.array(ingests, pa.string()))
        return runs, ingests, pc.fill_null(at, -1)


@dataclass
class Lake:
    # a folder, an object-storage URL, or the storage a caller opened (`storage.open_storage`:
    # `Warehouse` hands its own down); `root` is then the storage's normalised location
    root: Path | str | storage.Storage
    _tables: dict = field(default_factory=dict, repr=False)
    _actions: dict = field(default_factory=dict, repr=False)  # table -> (version, add_actions)
    _reads: dict = field(default_factory=dict, repr=False)  # (table, columns) -> (version, rows)
    storage: storage.Storage = field(init=False, repr=False)
    _phase: str = field(default=_MAINTENANCE, init=False, repr=False)  # where a lost lease stops us (`_guard`)
    # Data tables this lake creates are partitioned as in schema <= 7: set by the migration
    # runner while a migration older than the layout's (0013) runs, which expects it.
    partition_new_tables: bool = field(default=False, repr=False)
    _partitioned: dict = field(default_factory=dict, repr=False)  # table -> its layout (`partitioned`)
    # Object storage, while this lake holds the commit lease: the tables whose handle was
    # opened or brought up to date since it took the lease (table -> that lease's number,
    # `_lease_no`), and not written since: no other writer can commit then (`table`).
    _current: dict = field(default_factory=dict, init=False, repr=False)
    _lease_no: int = field(default=0, init=False, repr=False)
    _leased: bool = field(default=False, init=False, repr=False)
    _writes: dict = field(default_factory=dict, init=False, repr=False)  # table -> commits through `_written`

    def __post_init__(self) -> None:
        self.storage = storage.open_storage(self.root)
        self.root = self.storage.root
        self._opts = self.storage.delta_options()

    # -- layout -----------------------------------------------------------------------
    def uri(self, table: str) -> str:
        return self.storage.uri(table)

    @property
    def exists(self) -> bool:
        return self.storage.is_file(LAKE_JSON)

    def read_meta(self) -> dict:
        try:
            return json.loads(self.storage.read_bytes(LAKE_JSON))
        except (OSError, ValueError) as e:
            raise TracedbError(f"{self.storage.uri(LAKE_JSON)}: cannot read the lake's metadata: {e}") from e

    def write_meta(self, meta: dict) -> None:
        self.storage.write_atomic(LAKE_JSON, json.dumps(meta, indent=1, sort_keys=True).encode())

    def create(self, migrations: list[dict]) -> None:
        """A new lake at the current schema: empty Delta tables and lake.json."""
        self.storage.makedirs(META_DIR)
        with self.lock():
            self.ensure_tables()
            if not self.exists:
                self.write_meta({"schema_version": schema.SCHEMA_VERSION, "migrations": migrations})

    def ensure_tables(self) -> None:
        """Create every table the lake lacks, empty (Delta version 0): in a folder by
        writing its first log entry (`_create_in_folder`), on object storage with delta-rs."""
        from deltalake import DeltaTable, write_deltalake

        def ensure(table: str) -> None:
            parts, props = self._new_layout(table)
            if not DeltaTable.is_deltatable(self.uri(table), storage_options=self._opts):
                write_deltalake(self.uri(table), delta_schema(table).empty_table(), mode="ignore",
                                partition_by=parts, name=table, storage_options=self._opts,
                                description=schema.TABLE_DOCS.get(table), configuration=props)

        left = [table for table in schema.ALL_TABLES if not self._create_in_folder(table)]
        # in threads (delta-rs releases the GIL): on object storage each table is several requests
        concurrently([lambda t=table: ensure(t) for table in left])
        self._current.clear()  # written by URL, not through the handles (`table`)

    def _new_layout(self, table: str) -> tuple[list[str] | None, dict | None]:
        """A new table's partition columns and Delta properties."""
        data = table in schema.TABLES
        parts = PARTITIONS if data and self.partition_new_tables else None
        return parts, (LEGACY_TABLE_PROPERTIES if parts else DATA_TABLE_PROPERTIES) if data else None

    def _create_in_folder(self, table: str) -> bool:
        """In a folder, `table` created if it has no log yet: its first log entry written
        (`creation_commit`), no other writer's replaced (`storage.LocalStorage.write_new`).
        False on object storage (no write-if-absent: delta-rs creates it). delta-rs's
        `write_deltalake` or `DeltaTable.create` costs ~4 ms of CPU a table (29 tables, a
        new lake's ~0.1 s), a log entry ~1 ms, most of it the two folders and the file
        (bench/RESULTS.md, session 17 fixed17)."""
        log = f"{table}/_delta_log"
        version = self.log_version(table)
        if version is None:
            return False
        if version >= 0 or any("checkpoint" in n for n in self.storage.names(log)):
            return True  # a table already (a log cleaned up below a checkpoint has no entry 0)
        parts, props = self._new_layout(table)
        entry = creation_commit(table, parts, props)
        if entry is None:
            return False
        if self.storage.write_new(f"{log}/{0:020d}.json", entry):
            # ours, so empty: its live files and layout are known without opening it
            self._actions[table] = (0, NO_ACTIONS)
            if table in schema.TABLES:
                self._partitioned[table] = bool(parts)
        return True

    def table(self, table: str):
        """The DeltaTable, loaded once and brought up to date on each call (unless the log
        listing shows it is, `log_version`). On object storage, where that listing is a
        request like the update's own (a LIST and a GET of `_last_checkpoint`), a handle
        opened or updated while this lake holds the commit lease, and not written since
        (`_written`), is taken as it is while the lease is still valid: every commit to
        the lake is made under the lease, so no other writer can have committed. A commit
        reads each table's handle several times (its files, the clean-up, the snapshot)."""
        from deltalake import DeltaTable

        lease = self._lease_no if self._leased else None
        writes = self._writes.get(table, 0)  # a commit meanwhile (another thread's) leaves it unmarked
        dt = self._tables.get(table)
        if dt is None:
            dt = self._tables[table] = DeltaTable(self.uri(table), storage_options=self._opts)
        elif lease is not None and self._current.get(table) == lease and self.storage.lock_valid():
            return dt
        elif dt.version() != self.log_version(table):
            dt.update_incremental()
        if lease is not None and self.storage.local_path() is None and self._writes.get(table, 0) == writes:
            self._current[table] = lease  # a lease taken since (`lock`) has another number
        return dt

    @contextmanager
    def _written(self, table: str) -> Iterator[None]:
        """Around a commit to `table`: its handle is brought up to date on its next use
        (`table`); delta-rs updates it after some writes, not after a write transaction
        nor after a failed commit."""
        try:
            yield
        finally:
            self._writes[table] = self._writes.get(table, 0) + 1
            self._current.pop(table, None)

    def _write_delta(self, table: str, data: pa.Table, **kw) -> None:
        """`write_deltalake` of `data` into `table` through its handle (`table`), as a commit
        of this lake (`_written`)."""
        from deltalake import write_deltalake

        with self._written(table):
            write_deltalake(self.table(table), data, storage_options=self._opts, **kw)

    def compact_table(self, table: str, target_size: int | None = None) -> int:
        """delta-rs's own compaction of `table` (the metadata tables: no live filter, no
        tiers), as a commit of this lake; the number of files it removed."""
        with self._written(table):
            metrics = self.table(table).optimize.compact(target_size=target_size)
        return int(metrics.get("numFilesRemoved", 0))

    def partitioned(self, table: str) -> bool:
        """Whether a data table is in the partitioned layout of schema <= 7 (its Delta
        metadata names partition columns); kept once known, as a table's layout changes
        only by migration 0013's one commit (which calls `forget_layout`)."""
        if table not in self._partitioned:
            from deltalake.exceptions import TableNotFoundError

            try:
                self._partitioned[table] = bool(self.table(table).metadata().partition_columns)
            except TableNotFoundError:
                return self.partition_new_tables  # as `ensure_tables` will create it
        return self._partitioned[table]

    def partitioned_tables(self) -> frozenset[str]:
        """The data tables in the partitioned layout (none once migration 0013 ran)."""
        return frozenset(t for t in schema.TABLES if self.partitioned(t))

    def forget_layout(self, table: str) -> None:
        self._partitioned.pop(table, None)
        self._actions.pop(table, None)

    def versions(self) -> dict[str, int]:
        """Latest Delta version of each table, read from the log folder listing (cheap; on
        object storage a LIST request a table, sent at once: each reader's connect and
        each publish asks, and one after another they were most of a remote query's wait)."""
        def latest(table: str) -> int:
            return storage.latest_log_version(self.storage.names(f"{table}/_delta_log"))

        tables = schema.ALL_TABLES
        if isinstance(self.storage, storage.LocalStorage):  # a folder listing: ~10 us
            return {t: latest(t) for t in tables}
        return dict(zip(tables, concurrently([lambda t=t: latest(t) for t in tables])))

    @contextmanager
    def lock(self, wait: bool = True) -> Iterator[bool]:
        """Serialise commits between processes; yields False when wait=False and it is held.
        A folder: an fcntl lock; object storage: a lease object (tracedb.storage)."""
        with self.storage.lock(LOCK_FILE, wait) as held:
            if not held or self._leased:
                yield held
                return
            self._lease_no += 1
            self._leased = True
            try:
                yield held
            finally:
                self._leased = False
                self._lease_no += 1
                self._current.clear()

    # -- reading the log ----------------------------------------------------------------
    def published(self) -> Published:
        """run_id -> its live ingest_id; one object per version of `runs` (its sorted index
        is built once: `rm` asks four times)."""
        columns = ("run_id", "ingest_id")  # a run's other columns decode to ~1 KB
        hit = self._cached(self._reads, ("runs", "published"), "runs")
        if hit is None:
            t = self.read_table("runs", list(columns))
            hit = Published(zip(t.column("run_id").to_pylist(), t.column("ingest_id").to_pylist()))
            self._reads[("runs", "published")] = (self._reads[("runs", columns)][0], hit)
        return hit

    def log_version(self, table: str) -> int | None:
        """A local table's latest version from its log folder listing (~10 us; the handle's
        `update_incremental` takes ~0.6 ms when nothing changed, 1-2 ms under load); None on
        object storage, where the listing is a request like the update's own."""
        return self.storage.log_version_if_cheap(f"{table}/_delta_log")

    def _cached(self, cache: dict, key, table: str):
        """A value cached for `table`'s version, when the log has no newer one."""
        hit = cache.get(key)
        return hit[1] if hit is not None and hit[0] == self.log_version(table) else None

    def read_table(self, table: str, columns: list[str] | None = None) -> pa.Table:
        """The table's rows (these columns), kept per version like `add_actions`: a commit
        reads `runs` in its clean-up step and the snapshot right after reads it again."""
        key = (table, tuple(columns) if columns is not None else None)
        rows = self._cached(self._reads, key, table)
        if rows is None:
            dt = self.table(table)
            version = dt.version()
            folder = self.storage.local_path()
            if folder is None or table in schema.TABLES or dt.protocol().min_reader_version > 1:
                rows = pa.table(dt.to_pyarrow_table(columns=columns))
            else:
                rows = self._read_live_files(folder, table, dt, columns)
            self._reads[key] = (version, rows)
        return rows

    def _read_live_files(self, folder: Path, table: str, dt, columns: list[str] | None) -> pa.Table:
        """An unpartitioned local table of reader protocol 1 (no deletion vectors, no column
        mapping: its live files hold its rows as they are) read with pyarrow, file by file
        in log order as delta-rs reads them: `runs`, `files`, `ingest_log` (one file per
        commit), 3.5-4.6 ms of CPU each against 9.8-13 ms through `to_pyarrow_table`
        (medians of 10, a 5-run lake, load ~9)."""
        import pyarrow.parquet as pq

        cached = self._actions.get(table)
        actions = cached[1] if cached is not None and cached[0] == dt.version() else self._read_add_actions(table, dt)
        sch = delta_schema(table)
        paths = [str(folder / p) for p in actions.column("path").to_pylist()]
        if not paths:
            empty = sch.empty_table()
            return empty.select(columns) if columns is not None else empty
        return pq.read_table(paths, schema=sch, columns=columns)

    def plain_files(self, table: str) -> list[str] | None:
        """An unpartitioned table's live files (absolute paths or URLs, in log order) when
        they hold its rows as they are (reader protocol 1: no deletion vectors, no column
        mapping), else None."""
        if self.table(table).protocol().min_reader_version > 1:
            return None
        return [self.storage.absolute(p) for p in self.add_actions(table).column("path").to_pylist()]

    def add_actions(self, table: str) -> pa.Table:
        """One row per live file: path (relative, decoded), size, rows, run_id and run_hi
        (the range of runs it holds: one run in the partitioned layout), device (its
        least), min/max ingest_id, partitioned. Kept per table version (a version never changes): the commit's
        clean-up step reads every data table's, and the snapshot right after reads them again;
        a local table's log listing tells that it is unchanged, without updating the handle
        (`log_version`: 20 updates of the snapshot cost ~13 ms)."""
        actions = self._cached(self._actions, table, table)
        if actions is not None:
            return actions
        dt = self.table(table)
        version = dt.version()
        cached = self._actions.get(table)
        if cached is not None and cached[0] == version:
            return cached[1]
        out = self._actions[table] = (version, self._read_add_actions(table, dt))
        return out[1]

    @staticmethod
    def _read_add_actions(table: str, dt) -> pa.Table:
        a = pa.table(dt.get_add_actions(flatten=True))
        n = a.num_rows

        import pyarrow.compute as pc

        def col(name, typ=pa.string()):
            return a.column(name).cast(typ) if name in a.column_names else pa.nulls(n, typ)

        paths = [urllib.parse.unquote(p) for p in a.column("path").to_pylist()]
        part = col("partition.run_id")  # the partitioned layout (schema <= 7): a file a run
        return pa.table({
            "path": pa.array([f"{table}/{p}" for p in paths], pa.string()),
            "size": a.column("size_bytes"),
            "rows": col("num_records", pa.int64()),
            "run_id": pc.coalesce(part, col("min.run_id")),
            "run_hi": pc.coalesce(part, col("max.run_id")),
            "device": pc.coalesce(col("partition.device"), col("min.device")),
            "min_ingest": col("min.ingest_id"),
            "max_ingest": col("max.ingest_id"),
            "partitioned": pc.is_valid(part),
        })

    def live_files(self, table: str, published: dict[str, str] | None = None) -> tuple[list[str], bool]:
        """Files holding the live rows of `table` (relative paths, sorted), and whether any
        of them may also hold rows that are not live (always, from schema 8: a file holds
        many runs, some of them re-ingested or removed since; readers filter on
        `(run_id, ingest_id)` in `runs`, as every view does)."""
        live = self.live_file_ranges(table, published)
        return sorted(live.column("path").to_pylist()), True

    def live_file_ranges(self, table: str, published: dict[str, str] | None = None) -> pa.Table:
        """The live files of `table` (`add_actions` rows), with `runs`: how many published
        runs have their live rows there (`_live_runs`)."""
        published = self.published() if published is None else published
        actions = self.add_actions(table)
        counts = self._live_counts(actions, published)
        return actions.append_column("runs", pa.array(counts, pa.int64())).filter(
            pa.array([c > 0 for c in counts], pa.bool_()))

    def live_files_by_run(self, table: str, published: dict[str, str] | None = None) -> tuple[list[tuple[str, str]], bool]:
        """`live_files` as (run_id, relative path) pairs, one for each published run whose
        live rows a file may hold (a file of many runs is in many pairs), unsorted."""
        published = self.published() if published is None else published
        actions = self.add_actions(table)
        paths = actions.column("path").to_pylist()
        return [(run, path) for path, runs in zip(paths, self._live_runs(actions, published)) for run in runs], True

    @staticmethod
    def _live_runs(actions: pa.Table, published: dict[str, str | None]) -> list[list[str]]:
        """For each file (a row of `add_actions`): the published runs in its run range whose
        live ingest is in its ingest_id range, in run order. A file that none names holds
        no live row (remove it); one that some do may hold their live rows (and others:
        readers filter)."""
        import pyarrow.compute as pc

        published = Published.of(published)
        runs = published.index[0]
        return [[runs[i + k] for k in pc.indices_nonzero(mask).to_pylist()] if mask is not None else []
                for i, mask in Lake._live_masks(actions, published)]

    @staticmethod
    def _live_counts(actions: pa.Table, published: dict[str, str | None]) -> list[int]:
        """`_live_runs`, counted only (what `live_file_ranges` needs)."""
        import pyarrow.compute as pc

        published = Published.of(published)
        return [(pc.sum(mask).as_py() or 0) if mask is not None else 0 for _, mask in Lake._live_masks(actions, published)]

    @staticmethod
    def _live_masks(actions: pa.Table, published: dict[str, str | None]) -> Iterator[tuple[int, pa.Array | None]]:
        """For each file: (i, mask) over the sorted runs from the i-th, those of its run
        range (two bisections; string order is UTF-8 byte order, as the stats' min and max),
        true where the run's live ingest is in its ingest_id range; None for a file with no
        stats (of no run we know). Vectorised over the runs of the range: runs named
        `<model>-<night>` put every run in a nightly file's run range, so a range is
        often the whole fleet (bench/RESULTS.md "Session 14: publish")."""
        import bisect

        import pyarrow.compute as pc

        runs, ingests, at = Published.of(published).index
        cols = (actions.column(c).to_pylist() for c in ("run_id", "run_hi", "min_ingest", "max_ingest"))
        for lo, hi, first, last in zip(*cols):
            if lo is None or hi is None or first is None or last is None:
                yield 0, None
                continue
            i, j = bisect.bisect_left(runs, lo), bisect.bisect_right(runs, hi)
            a, b = bisect.bisect_left(ingests, first), bisect.bisect_right(ingests, last)
            part = at.slice(i, j - i)
            yield i, pc.and_(pc.greater_equal(part, a), pc.less(part, b))

    def whole_files(self, files: pa.Table, named: set[str]) -> list[bool]:
        """For each live file (`add_actions` rows): True when every row it holds is live, so
        a reader needs no `(run_id, ingest_id)` filter on it (the filter is a semi-join over
        every row: 2.3x a fleet-wide scan's time at 1,000 runs, issue 22). A file is written
        with live rows only (an ingest group's merge, whose runs the commit adding it
        publishes; a compaction; migration 0013), and its rows die only when a commit
        supersedes or removes one of its runs: that commit names the file in
        `DEAD_ROWS` first (`_mark_dead_rows`). `named`: `dead_row_files()`, read after
        `runs`: a run unpublished after that read has its files named already (the
        snapshot's filter then keeps its rows, as that `runs` does)."""
        cols = (files.column(c).to_pylist() for c in ("path", "run_id", "run_hi", "min_ingest", "max_ingest"))
        return [None not in (lo, hi, first, last) and path not in named for path, lo, hi, first, last in zip(*cols)]

    def dead_row_files(self) -> set[str]:
        """The live data files that may hold rows no longer live (relative paths)."""
        try:
            raw = self.storage.read_bytes(DEAD_ROWS)
        except FileNotFoundError:
            return set()
        except OSError as e:
            raise TracedbError(f"{self.storage.uri(DEAD_ROWS)}: cannot read the list of files with dead rows: {e}") from e
        try:
            return set(json.loads(raw)["files"])
        except (ValueError, KeyError, TypeError) as e:
            raise TracedbError(f"{self.storage.uri(DEAD_ROWS)}: not a list of files with dead rows ({e}); "
                               "`tracedb migrate` cannot rebuild it: restore it or remove it and run `tracedb optimize`") from e

    def _mark_dead_rows(self, dying: list[tuple[str, str]], extra: set[str] = frozenset()) -> None:
        """Name in `DEAD_ROWS` every live data file that may hold rows of these (run_id,
        ingest_id) pairs (its run and ingest ranges hold one), and `extra`; call under
        `lock()`, before the commit that kills them. Files no longer live leave the list."""
        import bisect

        dying = sorted(dying)
        runs = [r for r, _ in dying]
        marked = self.dead_row_files()
        live = set()
        add = set(extra)
        for table in schema.TABLES:
            a = self.add_actions(table)
            cols = (a.column(c).to_pylist() for c in ("path", "run_id", "run_hi", "min_ingest", "max_ingest"))
            for path, lo, hi, first, last in zip(*cols):
                live.add(path)
                if None in (lo, hi, first, last):
                    continue
                i, j = bisect.bisect_left(runs, lo), bisect.bisect_right(runs, hi)
                if any(first <= ing <= last for _, ing in dying[i:j]):
                    add.add(path)
        keep = (marked & live) | add
        if keep != marked:
            self._guard()
            self.storage.write_atomic(DEAD_ROWS, json.dumps({"files": sorted(keep)}, indent=0).encode())

    def mark_dead_rows_by_reading(self) -> int:
        """Name every live data file holding a row that is not live, found by reading its
        `run_id` and `ingest_id` columns (migration 0014: the files written before the
        lake kept this list). Returns how many."""
        published = self.published()
        found = {r["path"] for table in schema.TABLES if not self.partitioned(table)
                 for r in self.add_actions(table).to_pylist() if self._has_dead_rows(r, published)}
        self._mark_dead_rows([], found)
        return len(found)

    # -- committing ---------------------------------------------------------------------
    def commit(self, runs: list[RunCommit], beside: Callable[[], object] | None = None) -> None:
        """Steps 1-4 of the publish protocol for a group of runs; call under `lock()`.

        `beside` (the ingest's rollups) is called in a thread while step 1 commits the files
        the runs have (and this lake reads every table's log for steps 4-5); files it adds
        to the runs are committed after it returns, still in step 1 (one commit a table, the
        checksums of all in one). Such a file is invisible until step 3 like any other, so
        its order against the others' does not matter; should `beside` fail, the runs stay
        unpublished (their logged files are a crashed ingest's, see `remove_unpublished`)."""
        replaced = [r for r in runs if r.replace]
        first = [f for r in replaced for f in r.files]
        self._phase = _BEFORE_PUBLISH
        try:
            self._commit(runs, replaced, first, beside)
        finally:
            self._phase = _MAINTENANCE

    def _commit(self, runs: list[RunCommit], replaced: list[RunCommit], first: list[DataFile],
                beside: Callable[[], object] | None) -> None:
        from deltalake.exceptions import DeltaError

        self._guard()
        self._require_present(first)  # under the lock: nothing can delete them from here on
        if beside is None:
            self._add_files(first)
        else:
            busy = {f.table for f in first}  # a handle is used by one thread at a time
            concurrently([beside, lambda: self._add_files(first, checksums=False),
                          lambda: self._read_logs([t for t in schema.TABLES if t not in busy])])
            self._add_files([f for r in replaced for f in r.files if not f.logged],
                            checksums=[f for r in replaced for f in r.files])
        # Step 2 writes the ingest log and the `files` rows of runs that keep their version
        # (their failed files' errors); a replaced run's `files` rows follow its publish, so
        # a crash or a lost lease before it leaves `files` describing the live version.
        faults.step("ingest_after_add")
        self._guard()
        self._write_file_rows(runs)
        faults.step("ingest_after_files")
        if replaced:
            rows = [{**r.run_row, "ingest_id": r.ingest_id} for r in replaced]
            data = pa.Table.from_pylist(rows, schema=delta_schema("runs"))
            pred = f"run_id IN ({', '.join(sql_str(r.run_row['run_id']) for r in replaced)})"
            published = self.published()  # the runs' old versions die at the publish: their files first
            self._mark_dead_rows([(r.run_row["run_id"], published[r.run_row["run_id"]]) for r in replaced
                                  if published.get(r.run_row["run_id"]) is not None])
            self._guard()  # object storage: the lease ran out under us
            self._write_delta("runs", data, mode="overwrite", predicate=pred)
            faults.step("ingest_after_publish")
            self._phase = _AFTER_PUBLISH
            try:  # one step after the other, each guarded: a writer paused here stops at the next
                self._guard()
                self._write_file_rows(replaced, replaced=True)
                self.remove_unpublished({r.run_row["run_id"] for r in replaced})
            except (DeltaError, OSError) as e:
                raise WarehouseError(f"the runs were published to {self.root}, but their clean-up failed "
                                     f"(`tracedb vacuum` finishes it): {' '.join(str(e).split())}") from e
            faults.step("ingest_after_cleanup")

    def _guard(self, when: str | None = None) -> None:
        """Stop before a write once the commit lease is lost (object storage: a writer
        paused past its lease, whose lock another now holds); a no-op on a folder. The
        message says where the writer stopped (`when`, else the commit's phase)."""
        if not self.storage.lock_valid():
            raise WarehouseError(f"lost the commit lease on {self.root} {when or self._phase}")

    def _require_present(self, files: list[DataFile]) -> None:
        """Refuse to commit files that are not in the lake as written (a commit must never
        publish a file that is not there)."""
        if not files:
            return
        found = self.storage.sizes([f.rel for f in files])  # object storage: one listing a folder
        missing = [f for f in files if found[f.rel] != f.size]
        if missing:
            runs = sorted({f.run_id for f in missing})
            raise WarehouseError(
                f"{len(missing)} file(s) this ingest wrote into {self.root} are gone or changed before its commit "
                f"(first: {missing[0].rel}; deleted by another process?); run(s) {', '.join(runs)} keep their "
                "previous version")

    def preload(self) -> None:
        """Open every table's handle and read the data tables' live files now (an ingest
        calls it in a thread while its files are read): a commit then only brings them up
        to date (`table`, `add_actions`: one log listing a table when nothing changed).
        Opening the ~20 handles is ~60 ms of delta-rs CPU (8-rank Kineto job, 2 cores); at
        the commit it ran beside the rollups' first statements (bench/RESULTS.md, "Session
        7: rollcost")."""
        self._read_logs(list(schema.TABLES))

    def _read_logs(self, tables: list[str]) -> None:
        """These tables' live files, read now (in threads) so that the clean-up step and
        the snapshot only update the tables a commit changed (a fresh process opens each
        table's log here: ~3 ms a table at load 1; a table this lake just created is known
        without it, `_create_in_folder`, and opened only if a commit writes it)."""
        concurrently([lambda t=t: self.add_actions(t) for t in tables] +
                     [lambda t=t: self.table(t) for t in META_WRITTEN])

    def _record_checksums(self, files: list[DataFile]) -> None:
        if files:
            self._guard()
            rows = [{"table_name": f.table, "run_id": f.run_id, "path": f.rel, "size_bytes": f.size,
                     "sha256": f.sha256, "ingest_id": f.ingest_id} for f in files]
            self._write_delta("checksums", pa.Table.from_pylist(rows, schema=delta_schema("checksums")), mode="append")

    def _add_files(self, files: list[DataFile], checksums: list[DataFile] | bool = True) -> None:
        """Step 1: one Delta commit a data table, and the checksums (of `checksums`: a list,
        or all of `files`, or none); all at once, in threads (delta-rs releases the GIL).
        One TF StepStats run, median of 6 at load ~5: these 7 commits 34 -> 18 ms, the
        whole commit (with steps 2-4 in threads too) 85 -> 60 ms."""
        now = int(time.time() * 1000)
        summed = files if checksums is True else checksums or []

        def add(table: str) -> None:
            mine = [f for f in files if f.table == table]
            self.add_actions(table)  # the version before: the commit's own actions keep it (`_committed`)
            self.transact(table, [add_action(f, now) for f in mine], added=mine)
            for f in mine:
                f.logged = True

        concurrently(([lambda: self._record_checksums(summed)] if summed else []) +
                     [lambda t=table: add(t) for table in dict.fromkeys(f.table for f in files)])

    def replace_tables(self, tables: list[str], files: list[DataFile]) -> None:
        """One Delta commit a table of `tables`: each of its live files removed and `files`
        of that table added, so a reader sees the old rows or the new, never both (a
        migration that computes a rollup anew); the new files' checksums recorded first."""
        now = int(time.time() * 1000)
        self._record_checksums(files)
        for table in tables:
            mine = [f for f in files if f.table == table]
            old = self.add_actions(table).to_pylist()
            self.transact(table, [add_action(f, now) for f in mine] + [remove_action(r, now) for r in old])
            for f in mine:
                f.logged = True

    def transact(self, table: str, actions: list, added: list[DataFile] | None = None,
                 removed: list[str] | None = None) -> None:
        """One Delta commit of add and remove actions on a data table. `added` (the files of
        the add actions) and `removed` (the paths of the remove actions), when they are all
        the actions, keep `add_actions` up to date without reading the log."""
        self._guard()
        dt = self.table(table)
        before = dt.version()
        parts = PARTITIONS if self.partitioned(table) else None
        with self._written(table):
            dt.create_write_transaction(actions, mode="append", schema=delta_schema(table), partition_by=parts)
        if added is not None or removed is not None:
            self._committed(table, before, added or [], removed or [])

    def _committed(self, table: str, before: int, added: list[DataFile], removed: list[str]) -> None:
        """After our commit on `table`: when the log shows it as the one version after
        `before` (under the lock, no other can land), the live files of `before`, kept by
        `add_actions`, become the new version's with these files added and removed,
        without reading the log (a handle update and a read: ~2 ms of CPU a table, 11
        tables a TF run's clean-up step)."""
        cached = self._actions.get(table)
        if cached is None or cached[0] != before or self.log_version(table) != before + 1:
            return
        import pyarrow.compute as pc

        rows = cached[1]
        if removed:
            rows = rows.filter(pc.invert(pc.is_in(rows.column("path"), pa.array(removed, pa.string()))))
        if added:
            new = pa.table({"path": [f.rel for f in added], "size": [f.size for f in added],
                            "rows": [f.rows for f in added], "run_id": [f.run_id for f in added],
                            "run_hi": [f.run_hi for f in added], "device": [f.device for f in added],
                            "min_ingest": [f.ingest_id for f in added], "max_ingest": [f.ingest_hi for f in added],
                            "partitioned": [f.partitioned for f in added]}, schema=rows.schema)
            rows = pa.concat_tables([rows, new])
        self._actions[table] = (before + 1, rows)

    def _write_file_rows(self, runs: list[RunCommit], replaced: bool = False) -> None:
        """Step 2 (replaced=False): every run's rows into `ingest_log`, and into `files`
        the rows of the runs that keep their version. After the publish (replaced=True):
        the replaced runs' rows into `files`."""
        rows = [r_ for r in runs for r_ in r.file_rows]
        if not rows:
            return
        # `files` keeps each run's source files as last ingested: a replaced run's rows
        # all go; a run whose files all failed keeps its other rows.
        preds, kept = [], []
        for r in runs:
            rid = sql_str(r.run_row["run_id"])
            if replaced:
                preds.append(f"run_id = {rid}")
                kept += r.file_rows
            elif not r.replace and r.file_rows:
                paths = ", ".join(sql_str(fr["path"]) for fr in r.file_rows)
                preds.append(f"(run_id = {rid} AND path IN ({paths}))")
                kept += r.file_rows
        self._guard()
        calls = []
        if not replaced:
            data = pa.Table.from_pylist(rows, schema=delta_schema("files"))
            calls.append(lambda: self._write_delta("ingest_log", data, mode="append"))
        if kept:
            files = pa.Table.from_pylist(kept, schema=delta_schema("files"))
            calls.append(lambda: self._write_delta("files", files, mode="overwrite", predicate=" OR ".join(preds)))
        concurrently(calls)  # two tables, two commits at once

    def live_file_rows(self) -> tuple[pa.Table | None, list[str]]:
        """The rows of `files` as they describe each run's live version, and the runs whose
        rows in the table do not (`behind_file_rows`): theirs come from the ingest log,
        where step 2 wrote them. (None, []) when no run's rows are behind (or none is in the
        log): `files` is then not read whole."""
        behind = self.behind_file_rows()
        if not behind:
            return None, []
        log = self.read_table("ingest_log")
        keys = list(zip(log.column("run_id").to_pylist(), log.column("ingest_id").to_pylist()))
        behind &= set(keys)
        if not behind:
            return None, []
        files = self.read_table("files")
        stale = sorted({run for run, _ in behind})
        keep = pa.array([run not in set(stale) for run in files.column("run_id").to_pylist()], pa.bool_())
        take = pa.array([k in behind for k in keys], pa.bool_())
        return pa.concat_tables([files.filter(keep), log.filter(take)]), stale

    def behind_file_rows(self) -> set[tuple[str, str]]:
        """(run_id, live ingest_id) of the published runs whose `files` rows are behind their
        live version: a crash or a lost lease between a run's publish and the write of its
        rows left none of its live ingest, only of older ones (a later failed attempt's
        error rows are its own record, kept). A run's rows are behind when its live ingest
        is newer than every ingest its rows name (ids sort in the order ingests started).
        Reads two columns of each table (`files` and `runs` decode to ~1 KB a run whole:
        bench/RESULTS.md "Session 14: publish")."""
        files = self.read_table("files", ["run_id", "ingest_id"])
        runs = self.read_table("runs", ["run_id", "ingest_id"])
        newest: dict[str, str] = {}
        for run, ing in zip(files.column("run_id").to_pylist(), files.column("ingest_id").to_pylist()):
            if ing is not None and (run not in newest or ing > newest[run]):
                newest[run] = ing
        return {(run, ing) for run, ing in zip(runs.column("run_id").to_pylist(), runs.column("ingest_id").to_pylist())
                if ing is not None and newest.get(run, "") < ing}

    def repair_files(self) -> list[str]:
        """Rewrite the `files` rows of runs whose rows are behind their live version
        (`live_file_rows`); returns those runs. Call under `lock()`."""
        rows, stale = self.live_file_rows()
        if stale:
            self._guard()
            fixed = rows.filter(pa.array([r in set(stale) for r in rows.column("run_id").to_pylist()], pa.bool_()))
            pred = f"run_id IN ({', '.join(sql_str(r) for r in stale)})"
            self._write_delta("files", fixed, mode="overwrite", predicate=pred)
        return stale

    def remove_unpublished(self, run_ids: set[str] | None = None) -> int:
        """Remove from the log the files that hold no live row (`_live_runs`: wholly of
        superseded, crashed or deleted ingests), of `run_ids` (files whose run range meets
        one of them) or every file; call under `lock()`. Returns files removed. A file that
        still holds some live rows keeps its others (readers filter them out) until
        `optimize` merges it and drops them: a re-ingest or `rm` never rewrites a file."""
        published = self.published()
        faults.step("cleanup_after_published")
        removed = 0
        tables = list(schema.TABLES)
        for table, actions in zip(tables, concurrently([lambda t=t: self.add_actions(t) for t in tables])):
            removed += self._remove_files(table, self._unpublished(actions, published, run_ids))
        return removed

    @classmethod
    def _unpublished(cls, actions: pa.Table, published: dict[str, str],
                     run_ids: set[str] | None) -> list[dict]:
        """Of these live files (those whose run range meets `run_ids`, or all): the rows of
        those that hold no live row, to remove. Selected before any row becomes Python: a
        commit's clean-up asks it of every data table for the runs it replaced."""
        import pyarrow.compute as pc

        if run_ids is not None:
            actions = actions.filter(cls._meets(actions, sorted(run_ids)))
        dead = pa.array([n == 0 for n in cls._live_counts(actions, published)], pa.bool_())
        return actions.filter(dead).to_pylist() if pc.any(dead).as_py() else []

    @staticmethod
    def _meets(actions: pa.Table, runs: list[str]) -> pa.Array:
        """Which files' run ranges hold one of these runs (sorted)."""
        import bisect

        out = []
        for lo, hi in zip(actions.column("run_id").to_pylist(), actions.column("run_hi").to_pylist()):
            i = bisect.bisect_left(runs, lo) if lo is not None else len(runs)
            out.append(i < len(runs) and hi is not None and runs[i] <= hi)
        return pa.array(out, pa.bool_())

    def _remove_files(self, table: str, rows: list[dict]) -> int:
        if rows:
            now = int(time.time() * 1000)
            self.transact(table, [remove_action(r, now) for r in rows], removed=[r["path"] for r in rows])
        return len(rows)

    def delete_runs(self, run_ids: list[str]) -> list[str]:
        """Unpublish runs and remove their data and `files` rows; call under `lock()`.
        The ingest log keeps their history."""
        found = sorted(set(run_ids) & set(self.published()))
        missing = sorted(set(run_ids) - set(found))
        if missing:
            raise TracedbError(f"no such run(s): {', '.join(missing)}")
        pred = f"run_id IN ({', '.join(sql_str(r) for r in found)})"
        published = self.published()
        self._mark_dead_rows([(r, published[r]) for r in found if published[r] is not None])
        self._guard()
        with self._written("runs"):
            self.table("runs").delete(pred)  # the publish point: the runs are gone for readers
        faults.step("rm_after_unpublish")
        self._guard()
        with self._written("files"):
            self.table("files").delete(pred)
        self.remove_unpublished(set(found))
        return found

    def discard(self, files: list[DataFile]) -> None:
        """Delete files written for a commit that did not happen (never one the log lists)."""
        for f in files:
            if not f.logged:
                self.storage.unlink(f.rel)

    # -- the report's acceptances ---------------------------------------------------------
    def append_acceptance(self, row: dict) -> None:
        """One row of `acceptances` (an accept or a revoke), in one Delta commit; call
        under `lock()`. The table is append-only: it is also the history of who accepted
        what (tracedb.report.acceptance)."""
        data = pa.Table.from_pylist([row], schema=delta_schema("acceptances"))
        self._write_delta("acceptances", data, mode="append")

    # -- maintenance --------------------------------------------------------------------
    def optimize(self, target_size: int = 256 << 20, fanout: int | None = None) -> dict[str, int]:
        """Compact the data tables (tiered, `compaction_plan`: every small file merged) and
        the metadata tables' small files (delta-rs, files up to `target_size`); returns files
        removed per table. Call under `lock()`."""
        self.remove_unpublished()
        published = self.published()
        out = {}
        for table in schema.ALL_TABLES:
            self._guard()
            if table in schema.TABLES:
                out[table] = 0
                for chunk in self.compaction_plan(table, published, fanout, everything=True):
                    merged = self.write_compacted(table, chunk, published, f"optimize-{int(time.time() * 1000)}")
                    out[table] += self.commit_compacted(table, chunk, merged, published)
            else:
                out[table] = self.compact_table(table, target_size)
            faults.step(f"optimize_after_{table}")
        return out

    def optimize_merges(self, tag: str, fanout: int | None = None) -> dict[str, int]:
        """`optimize`'s merges of the data tables, made outside the commit lock: each chunk of
        `compaction_plan(everything=True)` written (minutes for a full file's merge), then
        committed under `lock()` (`commit_compacted`: a chunk another writer changed
        meanwhile is dropped), so other writers wait for a commit, not for a merge. Call
        with an ingest mark named `tag` held (vacuum spares the merged files by it), not
        under the lock; `optimize`, under it, then does what is left. Returns files
        removed per table."""
        published = self.published()
        out: dict[str, int] = {}
        for table in schema.TABLES:
            for chunk in self.compaction_plan(table, published, fanout, everything=True):
                merged = self.write_compacted(table, chunk, published, tag)
                faults.step(f"optimize_merged_{table}")  # written, not committed: no lock held
                with self.lock():
                    out[table] = out.get(table, 0) + self.commit_compacted(table, chunk, merged, published)
        return out

    # Compaction's tiers (`compaction_plan`) are by rows: the lowest below TIER_ROWS (an
    # ingest group's file of most tables), then each FANOUT times more. A merge of a tier's
    # FANOUT files holds FANOUT times the rows, so it lands in the next tier, whatever its
    # compression (by compressed size, a merged file compresses ~5x better than its
    # inputs and could land back in the tier of its inputs).
    TIER_ROWS = 64 * 1024
    FANOUT = 10
    # A merge writes at most about FILE_BYTES of Parquet and FILE_ROWS rows (a merge's time
    # is per row, and kernel rows of repeated names compress to ~4 bytes); a file past half
    # of either is full and is merged no more. So a table holds its bytes in full files
    # and at most FANOUT - 1 files a tier below them: a count that grows with the bytes,
    # not with the runs. (Before: a chunk of inputs above 48 MiB was not merged, so files
    # stopped at ~9-13 MB and their count grew with the runs: 54 kernels files at 50,000.)
    # The merge streams (`merge_files`: a batch of each input, not their rows); on object
    # storage each input is fetched whole, so FILE_BYTES also bounds the bytes held.
    FILE_BYTES = 128 << 20
    FILE_ROWS = 32 << 20

    def _full(self, r: dict) -> bool:
        """Whether a live file (an `add_actions` row) is past half a merge's bounds."""
        return r["size"] >= self.FILE_BYTES // 2 or (r["rows"] or 0) >= self.FILE_ROWS // 2

    def _tier(self, r: dict) -> int:
        """A file's tier by its rows: 0 below TIER_ROWS, then each FANOUT times more."""
        rows, tier = r["rows"] or 0, 0
        while rows >= self.TIER_ROWS * self.FANOUT ** tier:
            tier += 1
        return tier

    def _bounded(self, files: list[dict]) -> list[list[dict]]:
        """Files, in their order, cut into chunks whose sizes and rows sum to at most a merge's
        bounds (FILE_BYTES, FILE_ROWS); a chunk of one file is no merge and is left out."""
        chunks = chunk_by_bytes(files, lambda r: (r["size"], r["rows"] or 0), (self.FILE_BYTES, self.FILE_ROWS))
        return [c for c in chunks if len(c) >= 2]

    def compaction_plan(self, table: str, published: dict[str, str], fanout: int | None = None,
                        everything: bool = False) -> list[list[dict]]:
        """Tiered compaction of a data table: its live files (`add_actions` rows) that are not
        full (`_full`) by tier of rows (`_tier`), each tier's files in run order, in chunks of
        `fanout` (FANOUT) to merge into one file of the next tier, each chunk cut to a merge's
        bounds (`_bounded`), the first of them only (an ingest's compaction is then at most
        one merge a tier, of at most FILE_ROWS rows); a tier with fewer is left.
        `everything` (`tracedb optimize`): every chunk of every tier, the lowest tier's files
        whenever there are two, and a lone one that may hold dead rows rewritten. Each row
        is rewritten about once a tier until its file is full: an ingest that fills a tier
        pays for one merge (`write_compacted`), not for the history."""
        fanout = fanout or self.FANOUT
        if not everything and self.add_actions(table).num_rows < fanout:
            return []  # no tier can hold `fanout` live files (an ingest's usual case: no live-run count)
        live = self.live_file_ranges(table, published)
        tiers: dict[int, list[dict]] = {}
        for r in sorted(live.to_pylist(), key=lambda r: (r["run_id"], r["path"])):
            if not self._full(r):
                tiers.setdefault(self._tier(r), []).append(r)
        chunks = []
        for tier, files in sorted(tiers.items()):
            if everything and tier == 0:
                named = self.dead_row_files()
                chunks += self._bounded(files)
                chunks += [[r] for r in files if r["path"] in named and not any(r in c for c in chunks)]
            elif everything:
                for i in range(0, len(files) - fanout + 1, fanout):
                    chunks += self._bounded(files[i:i + fanout])
            elif len(files) >= fanout:  # an ingest merges one chunk a tier: its time is one merge's
                chunks += self._bounded(files[:fanout])[:1]
        return chunks

    # An ingest's compaction merges at most MERGE_BUDGET times the rows the ingest itself
    # wrote (`ingest_compaction`): a merge costs ~1.5-3 us of CPU a row, the fleet bench's
    # 50-run batch ~40 us a row to ingest (bench/RESULTS.md, "Session 17: compact17"), so
    # the merges of any night stay a bounded fraction of its own ingest. A larger merge (a tier of ten
    # nights' files and above: ten times a night's rows, then a hundred) is left to
    # `tracedb optimize`, a separate job, as Delta Lake's OPTIMIZE is.
    MERGE_BUDGET = 1.0

    def ingest_compaction(self, published: dict[str, str], rows: int, tables: tuple[str, ...] = schema.TABLES
                          ) -> tuple[list[tuple[str, list[dict]]], list[tuple[str, list[dict]]]]:
        """What an ingest that wrote `rows` rows merges, and what it leaves to `optimize`:
        each table's `compaction_plan` chunks as (table, chunk), fewest rows first, taken
        while their rows sum to at most MERGE_BUDGET x `rows`; the others deferred. A
        night's merges are then bounded by its own rows, whatever tier fills (without the
        budget, the night that fills a tier merged ten, a hundred or a thousand nights'
        rows); the small tables' tiers and the large ones' lowest still merge at ingest."""
        plans = sorted(((chunk_rows(c), t, c) for t in tables for c in self.compaction_plan(t, published)),
                       key=lambda p: p[0])
        budget, taken, deferred = self.MERGE_BUDGET * rows, [], []
        for cost, table, chunk in plans:
            if cost <= budget:
                budget -= cost
                taken.append((table, chunk))
            else:
                deferred.append((table, chunk))
        return taken, deferred

    def _has_dead_rows(self, r: dict, published: dict[str, str]) -> bool:
        """Whether a live file holds rows of a run's superseded (or removed) ingest: its
        run_id and ingest_id columns read (migration 0014)."""
        keys = _row_keys(self.storage.parquet_source(r["path"]))
        return any(published.get(run) != ingest for run, ingest in keys)

    def write_compacted(self, table: str, chunk: list[dict], published: dict[str, str], tag: str) -> DataFile | None:
        """A chunk's rows of runs' live ingests (`published`) in one new file, in run order,
        not committed (no lock needed: files never change once written). `tag` names the
        ingest (or optimize) that writes it: its mark spares the file from vacuum."""
        import secrets

        keys = pa.array([f"{r}\x00{i}" for r, i in published.items() if i is not None], pa.string())
        return merge_files(self.storage, table, [r["path"] for r in chunk],
                           f"{table}/part-{tag}-c{secrets.token_hex(4)}.parquet", keys)

    def commit_compacted(self, table: str, chunk: list[dict], merged: DataFile | None,
                         published: dict[str, str]) -> int:
        """One Delta commit: the chunk's files removed, the merged file added (readers see
        the rows before or after); call under `lock()`. Returns the files removed: 0 (and
        the merged file deleted) when a chunk's file is no longer live (another compaction
        or clean-up removed it since). `published`: the runs `write_compacted` kept; should
        one have died since, the merged file is named among the files with dead rows."""
        live = set(self.add_actions(table).column("path").to_pylist())
        if any(r["path"] not in live for r in chunk):
            if merged is not None:
                self.storage.unlink(merged.rel)
            return 0
        now = int(time.time() * 1000)
        actions = [remove_action(r, now) for r in chunk]
        try:
            if merged is not None:
                self._require_present([merged])
                current = self.published()
                if any(current.get(r) != i for r, i in published.items() if i is not None):
                    self._mark_dead_rows([], {merged.rel})
                self._record_checksums([merged])
                actions.append(add_action(merged, now))
            self.transact(table, actions)
        except BaseException:
            if merged is not None:
                self.storage.unlink(merged.rel)
            raise
        return len(chunk)

    def check(self) -> list[tuple[str, str, str]]:
        """Verify every live data file against the log and what was recorded when it was
        written: present, same size, same SHA-256, or, for a file with no SHA-256 recorded,
        every Parquet page's checksum (a file whose bytes hash as written holds the pages
        as written: decoding it again to verify them took 197 of 200 s at 5,000 runs of the
        bench fleet); and no row no longer live unless `DEAD_ROWS` names the file. Returns
        (run_id, path, problem) for each damaged file."""
        recorded = {}
        sums = self.read_table("checksums", ["path", "size_bytes", "sha256"])
        for path, size, digest in zip(*(sums.column(c).to_pylist() for c in ("path", "size_bytes", "sha256"))):
            recorded[path] = (size, digest)
        problems = []
        published = self.published()
        named = self.dead_row_files()
        for table in schema.TABLES:
            # only files of a run's live version: a superseded or crashed ingest's are vacuum's
            for r in self.live_file_ranges(table, published).to_pylist():
                rel = r["path"]
                problem = None
                size = self.storage.size(rel)
                if size is None:
                    problem = "missing"
                elif size != r["size"]:
                    problem = f"size {size} B, the log says {r['size']} B"
                elif rel in recorded and self.storage.size_and_hash(rel)[1] != recorded[rel][1]:
                    problem = "content differs from the SHA-256 recorded when it was written"
                else:
                    ask = not r["partitioned"] and rel not in named  # may it hold dead rows unnamed?
                    verify = rel not in recorded  # the bytes as written: their page checksums hold
                    try:  # a path or bytes, never a Python file object: pyarrow's threads
                        # reading one through the GIL aborted the process at exit (SIGABRT)
                        keys = _row_keys(self.storage.parquet_source(rel), verify=verify, keys=ask) \
                            if verify or ask else set()
                    except (OSError, pa.ArrowException) as e:
                        problem = f"unreadable parquet: {e}"
                    else:
                        if any(published.get(run) != ing for run, ing in keys):
                            problem = (f"holds rows no longer live that {DEAD_ROWS} does not name "
                                       "(the snapshot's views show them)")
                if problem:
                    runs = r["run_id"] if r["run_hi"] == r["run_id"] else f"{r['run_id']}..{r['run_hi']}"
                    problems.append((runs, r["path"], problem))
        return problems

    def vacuum(self, retention_hours: int = DEFAULT_RETENTION_HOURS) -> list[str]:
        """Remove unpublished data from the log, bring `files` up to the live versions
        (`repair_files`), then delete files that no live version references and that are
        older than the retention (Delta vacuum, full: files a crashed ingest wrote but never
        committed go too), except the files of live ingests (their marks, see
        `storage`): whatever the retention, an ingest's files are never deleted before it
        commits them. Snapshot files a killed publish left go too. Call under `lock()`."""
        self.remove_unpublished()
        self.repair_files()
        dead = [f"{table}/{p}" for table in schema.ALL_TABLES for p in self.table(table).vacuum(
            retention_hours=retention_hours, dry_run=True, enforce_retention_duration=False, full=True)]
        live = self.storage.live_ingests(INGESTS_DIR)  # after the listings: a later ingest's files are not in them
        deleted = [p for p in dead if not any(i in p.rsplit("/", 1)[-1] for i in live)]
        self._guard()
        concurrently([lambda p=p: self.storage.unlink(p) for p in deleted])
        # under the lock no publish is under way: its temporary files are leftovers (a
        # folder's; an object-storage lake's snapshots are made in the reader's cache)
        if self.storage.local_path() is not None:
            for name in self.storage.names(""):
                if name.startswith(".catalog-") and (name.endswith(".duckdb") or name.endswith(".duckdb.wal")):
                    self.storage.unlink(name)
                    deleted.append(name)
        return deleted
