"""The lake: every table of a warehouse is a Delta Lake table, written with delta-rs.

Layout (contract):

    <warehouse>/<table>/_delta_log/                      which files are live
    <warehouse>/<table>/run_id=<id>/device=<dev>/*.parquet   data tables, Hive-style, URL-encoded
    <warehouse>/runs/, files/, ingest_log/               metadata tables (unpartitioned)
    <warehouse>/_tracedb/lake.json                       schema version and applied migrations
    <warehouse>/_tracedb/commit.lock                     serialises commits (never reads)

The store owns every file written into or deleted from the lake: the readers' batches
are written by `store.FileWriter` straight into their final partition folders (no file
is live until a Delta commit adds it), and only this module commits, removes or vacuums.

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
   of the runs' superseded ingests (and of any ingest that crashed before step 3).
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

import json
import os
import time
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa

from tracedb import faults, schema, storage
from tracedb.errors import TracedbError, WarehouseError
from tracedb.storage import sql_str  # noqa: F401  (lake.sql_str: callers quote with it)

META_DIR = "_tracedb"
LAKE_JSON = f"{META_DIR}/lake.json"
LOCK_FILE = f"{META_DIR}/commit.lock"
INGESTS_DIR = f"{META_DIR}/ingests"  # marks of live ingests (`storage.LocalStorage.ingest_mark`)
CATALOG = "catalog.duckdb"  # the DuckDB snapshot of the lake (tracedb.catalog)
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
DATA_TABLE_PROPERTIES = {"delta.dataSkippingStatsColumns": INGEST_ID.name}


def file_schema(table: str) -> pa.Schema:
    """What a data file holds: partition columns (run_id, device) live in the path and log."""
    sch = delta_schema(table)
    return pa.schema([f for f in sch if f.name not in PARTITIONS])


# Folder names are at most 255 bytes. Percent-encoding every byte of a non-ASCII name
# triples it (a 200-byte Japanese run id became 600 bytes: "File name too long"), so only
# ASCII that is unsafe in a path or a Hive value is encoded; other characters stay as UTF-8
# (DuckDB, Spark and delta-rs decode both forms to the same value).
_UNSAFE = {c for c in range(0x80) if not (chr(c).isalnum() or chr(c) in "-_.~!$&'()+,;@[]^`{}")}
MAX_VALUE_BYTES = 240  # "run_id=" + value within a 255-byte folder name


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


def add_action(f: DataFile, now_ms: int, ingest_range: tuple[str, str] | None = None):
    """The Delta add action of a file we wrote: partition values, row count and the
    ingest_id range as stats (readers select live files by it)."""
    from deltalake.transaction import AddAction

    lo, hi = ingest_range or (f.ingest_id, f.ingest_id)
    stats = {"numRecords": f.rows, "minValues": {"ingest_id": lo}, "maxValues": {"ingest_id": hi},
             "nullCount": {"ingest_id": 0}}
    # delta-rs URL-encodes the path for the log; it takes the path as on disk, table-relative.
    return AddAction(f.rel.split("/", 1)[1], f.size, {"run_id": f.run_id, "device": f.device},
                     now_ms, True, json.dumps(stats))


def remove_action(r: dict, now_ms: int):
    """The Delta remove action of a live file (a row of `Lake.add_actions`)."""
    from deltalake.transaction import RemoveAction

    return RemoveAction(r["path"].split("/", 1)[1], True, now_ms, r["size"],
                        {"run_id": r["run_id"], "device": r["device"]})


def concurrently(calls: list) -> list:
    """Call each function at once, in threads (Delta log reads and commits of different
    tables: delta-rs releases the GIL); their results in order, or the first error once
    all have finished."""
    if len(calls) < 2:
        return [c() for c in calls]
    from concurrent.futures import ThreadPoolExecutor, wait

    with ThreadPoolExecutor(min(len(calls), 8), thread_name_prefix="tracedb-lake") as ex:
        futures = [ex.submit(c) for c in calls]
        wait(futures)
    return [f.result() for f in futures]


@dataclass
class RunCommit:
    """One run's part of a commit. replace=False (a file or run.json failed, without
    --partial) keeps the run's previous data and only records the files' errors."""

    run_row: dict
    files: list[DataFile]
    file_rows: list[dict]
    replace: bool
    ingest_id: str = ""


@dataclass
class Lake:
    root: Path | str  # a folder, or an object-storage URL (tracedb.storage)
    _tables: dict = field(default_factory=dict, repr=False)
    _actions: dict = field(default_factory=dict, repr=False)  # table -> (version, add_actions)
    _reads: dict = field(default_factory=dict, repr=False)  # (table, columns) -> (version, rows)
    storage: storage.LocalStorage | storage.ObjectStorage = field(init=False, repr=False)
    _phase: str = field(default=_MAINTENANCE, init=False, repr=False)  # where a lost lease stops us (`_guard`)

    def __post_init__(self) -> None:
        self.root = storage.location(self.root)
        self.storage = storage.open_storage(self.root)
        self._opts = self.storage.delta_options()

    # -- layout -----------------------------------------------------------------------
    def uri(self, table: str) -> str:
        return self.storage.uri(table)

    @property
    def remote(self) -> bool:
        return self.storage.remote

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
        from deltalake import DeltaTable, write_deltalake

        def ensure(table: str) -> None:
            if not DeltaTable.is_deltatable(self.uri(table), storage_options=self._opts):
                parts = PARTITIONS if table in schema.TABLES else None
                write_deltalake(self.uri(table), delta_schema(table).empty_table(), mode="ignore",
                                partition_by=parts, name=table, storage_options=self._opts,
                                description=schema.TABLE_DOCS.get(table),
                                configuration=DATA_TABLE_PROPERTIES if parts else None)

        # in threads (delta-rs releases the GIL): a new lake 50-59 -> 35-37 ms (median of 8,
        # load ~9.5); on object storage each table is several requests
        concurrently([lambda t=table: ensure(t) for table in schema.ALL_TABLES])

    def table(self, table: str):
        """The DeltaTable, loaded once and brought up to date on each call (unless the log
        listing shows it is, `log_version`)."""
        from deltalake import DeltaTable

        dt = self._tables.get(table)
        if dt is None:
            dt = self._tables[table] = DeltaTable(self.uri(table), storage_options=self._opts)
        elif dt.version() != self.log_version(table):
            dt.update_incremental()
        return dt

    def versions(self) -> dict[str, int]:
        """Latest Delta version of each table, read from the log folder listing (cheap)."""
        out = {}
        for table in schema.ALL_TABLES:
            out[table] = storage.latest_log_version(self.storage.names(f"{table}/_delta_log"))
        return out

    @contextmanager
    def lock(self, wait: bool = True) -> Iterator[bool]:
        """Serialise commits between processes; yields False when wait=False and it is held.
        A folder: an fcntl lock; object storage: a lease object (tracedb.storage)."""
        with self.storage.lock(LOCK_FILE, wait) as held:
            yield held

    # -- reading the log ----------------------------------------------------------------
    def published(self) -> dict[str, str]:
        """run_id -> its live ingest_id."""
        t = self.read_table("runs")  # all columns: the snapshot reads them after the clean-up step
        return dict(zip(t.column("run_id").to_pylist(), t.column("ingest_id").to_pylist()))

    def log_version(self, table: str) -> int | None:
        """A local table's latest version from its log folder listing (~10 us; the handle's
        `update_incremental` takes ~0.6 ms when nothing changed, 1-2 ms under load); None on
        object storage, where the listing is a request like the update's own."""
        if self.remote:
            return None
        return storage.latest_log_version(self.storage.names(f"{table}/_delta_log"))

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
            if self.remote or table in schema.TABLES or dt.protocol().min_reader_version > 1:
                rows = pa.table(dt.to_pyarrow_table(columns=columns))
            else:
                rows = self._read_live_files(table, dt, columns)
            self._reads[key] = (version, rows)
        return rows

    def _read_live_files(self, table: str, dt, columns: list[str] | None) -> pa.Table:
        """An unpartitioned local table of reader protocol 1 (no deletion vectors, no column
        mapping: its live files hold its rows as they are) read with pyarrow, file by file
        in log order as delta-rs reads them: `runs`, `files`, `ingest_log` (one file per
        commit), 3.5-4.6 ms of CPU each against 9.8-13 ms through `to_pyarrow_table`
        (medians of 10, a 5-run lake, load ~9)."""
        import pyarrow.parquet as pq

        cached = self._actions.get(table)
        actions = cached[1] if cached is not None and cached[0] == dt.version() else self._read_add_actions(table, dt)
        sch = delta_schema(table)
        paths = [str(self.root / p) for p in actions.column("path").to_pylist()]
        if not paths:
            empty = sch.empty_table()
            return empty.select(columns) if columns is not None else empty
        return pq.read_table(paths, schema=sch, columns=columns)

    def add_actions(self, table: str) -> pa.Table:
        """One row per live file: path (relative, decoded), size, rows, run_id, device,
        min/max ingest_id. Kept per table version (a version never changes): the commit's
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

        def col(name):
            return a.column(name) if name in a.column_names else pa.nulls(n, pa.string())

        paths = [urllib.parse.unquote(p) for p in a.column("path").to_pylist()]
        return pa.table({
            "path": pa.array([f"{table}/{p}" for p in paths], pa.string()),
            "size": a.column("size_bytes"),
            "rows": col("num_records"),
            "run_id": col("partition.run_id"),
            "device": col("partition.device"),
            "min_ingest": col("min.ingest_id"),
            "max_ingest": col("max.ingest_id"),
        })

    def live_files(self, table: str, published: dict[str, str] | None = None) -> tuple[list[str], bool]:
        """Files holding the live rows of `table` (relative paths), and whether any of them
        also holds rows of another ingest (then readers must filter on ingest_id)."""
        files, mixed = self.live_files_by_run(table, published)
        return sorted(path for _run, path in files), mixed

    def live_files_by_run(self, table: str, published: dict[str, str] | None = None) -> tuple[list[tuple[str, str]], bool]:
        """`live_files` as (run_id, relative path) pairs, unsorted: the files whose ingest_id
        range holds their run's live ingest. Selected with Arrow (a join on `published`),
        not row by row in Python: the snapshot asks it of every data table at each publish,
        and a table lists a file a run and device (bench/RESULTS.md, "Session 9: scale")."""
        import pyarrow.compute as pc

        published = self.published() if published is None else published
        live = self._with_live(self.add_actions(table), published)
        lo, hi, cur = live.column("min_ingest"), live.column("max_ingest"), live.column("live")
        keep = pc.and_(pc.less_equal(lo, cur), pc.less_equal(cur, hi))  # null (no live run, no stats): dropped
        live = live.filter(keep)
        whole = pc.and_(pc.equal(live.column("min_ingest"), live.column("live")),
                        pc.equal(live.column("max_ingest"), live.column("live")))
        mixed = live.num_rows > 0 and not pc.all(whole).as_py()
        return list(zip(live.column("run_id").to_pylist(), live.column("path").to_pylist())), mixed

    @staticmethod
    def _with_live(actions: pa.Table, published: dict[str, str | None]) -> pa.Table:
        """`actions` with each file's run's live ingest_id as column `live` (null: the run
        is not published)."""
        import pyarrow.compute as pc

        runs = pa.array(list(published), pa.string())
        at = pc.index_in(actions.column("run_id"), value_set=runs)
        return actions.append_column("live", pc.take(pa.array(list(published.values()), pa.string()), at))

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
        from deltalake import write_deltalake
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
            self._guard()  # object storage: the lease ran out under us
            write_deltalake(self.table("runs"), data, mode="overwrite", predicate=pred, storage_options=self._opts)
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
        if self.remote:  # one listing a table and run, not a request a file
            found: dict[str, int] = {}
            prefixes = sorted({f.rel.split("/device=", 1)[0] + "/" for f in files})
            for sizes in concurrently([lambda p=p: self.storage.sizes_under(p) for p in prefixes]):
                found.update(sizes)
            missing = [f for f in files if found.get(f.rel) != f.size]
        else:
            missing = [f for f in files if self.storage.size(f.rel) != f.size]
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
        table's log here: ~3 ms a table at load 1)."""
        concurrently([lambda t=t: self.add_actions(t) for t in tables] +
                     [lambda t=t: self.table(t) for t in META_WRITTEN])

    def _record_checksums(self, files: list[DataFile]) -> None:
        from deltalake import write_deltalake

        if files:
            self._guard()
            rows = [{"table_name": f.table, "run_id": f.run_id, "path": f.rel, "size_bytes": f.size,
                     "sha256": f.sha256, "ingest_id": f.ingest_id} for f in files]
            write_deltalake(self.table("checksums"), pa.Table.from_pylist(rows, schema=delta_schema("checksums")),
                            mode="append", storage_options=self._opts)

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
        dt.create_write_transaction(actions, mode="append", schema=delta_schema(table), partition_by=PARTITIONS)
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
                            "device": [f.device for f in added], "min_ingest": [f.ingest_id for f in added],
                            "max_ingest": [f.ingest_id for f in added]}, schema=rows.schema)
            rows = pa.concat_tables([rows, new])
        self._actions[table] = (before + 1, rows)

    def _write_file_rows(self, runs: list[RunCommit], replaced: bool = False) -> None:
        """Step 2 (replaced=False): every run's rows into `ingest_log`, and into `files`
        the rows of the runs that keep their version. After the publish (replaced=True):
        the replaced runs' rows into `files`."""
        from deltalake import write_deltalake

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
            calls.append(lambda: write_deltalake(self.table("ingest_log"), data, mode="append",
                                                 storage_options=self._opts))
        if kept:
            files = pa.Table.from_pylist(kept, schema=delta_schema("files"))
            calls.append(lambda: write_deltalake(self.table("files"), files, mode="overwrite",
                                                 predicate=" OR ".join(preds), storage_options=self._opts))
        concurrently(calls)  # two tables, two commits at once

    def live_file_rows(self) -> tuple[pa.Table, list[str]]:
        """The rows of `files` as they describe each run's live version, and the runs whose
        rows in the table do not: a run published whose `files` rows a crash or a lost
        lease left behind (between its publish and the write of its rows) has them from
        the ingest log, where step 2 wrote them. A run's rows are behind when none is of
        its live ingest and all are of older ingests (a later failed attempt's error rows
        are its own record, kept)."""
        files = self.read_table("files")
        runs = self.read_table("runs")  # all columns: the read the snapshot and the clean-up make (cached)
        newest: dict[str, str] = {}
        for run, ing in zip(files.column("run_id").to_pylist(), files.column("ingest_id").to_pylist()):
            if ing is not None and (run not in newest or ing > newest[run]):
                newest[run] = ing
        have = set(zip(files.column("run_id").to_pylist(), files.column("ingest_id").to_pylist()))
        behind = {(run, ing) for run, ing in zip(runs.column("run_id").to_pylist(), runs.column("ingest_id").to_pylist())
                  if ing is not None and (run, ing) not in have and newest.get(run, "") < ing}
        if not behind:
            return files, []
        log = self.read_table("ingest_log")
        keys = list(zip(log.column("run_id").to_pylist(), log.column("ingest_id").to_pylist()))
        behind &= set(keys)
        if not behind:
            return files, []
        stale = sorted({run for run, _ in behind})
        keep = pa.array([run not in set(stale) for run in files.column("run_id").to_pylist()], pa.bool_())
        take = pa.array([k in behind for k in keys], pa.bool_())
        return pa.concat_tables([files.filter(keep), log.filter(take)]), stale

    def repair_files(self) -> list[str]:
        """Rewrite the `files` rows of runs whose rows are behind their live version
        (`live_file_rows`); returns those runs. Call under `lock()`."""
        from deltalake import write_deltalake

        rows, stale = self.live_file_rows()
        if stale:
            self._guard()
            fixed = rows.filter(pa.array([r in set(stale) for r in rows.column("run_id").to_pylist()], pa.bool_()))
            pred = f"run_id IN ({', '.join(sql_str(r) for r in stale)})"
            write_deltalake(self.table("files"), fixed, mode="overwrite", predicate=pred, storage_options=self._opts)
        return stale

    def remove_unpublished(self, run_ids: set[str] | None = None) -> int:
        """Remove data of ingests that are not their run's live one (superseded, crashed or
        deleted runs), for `run_ids` or every run; call under `lock()`. Returns files removed."""
        published = self.published()
        faults.step("cleanup_after_published")
        removed = 0
        tables = list(schema.TABLES)
        for table, actions in zip(tables, concurrently([lambda t=t: self.add_actions(t) for t in tables])):
            whole, partial = self._unpublished(actions, published, run_ids)
            removed += self._remove_files(table, whole)
            for run_id in sorted(partial):  # a compacted file that mixes ingests: rewrite it
                live = published.get(run_id)
                pred = f"run_id = {sql_str(run_id)}" + (f" AND ingest_id <> {sql_str(live)}" if live else "")
                self._guard()
                self.table(table).delete(pred)
        return removed

    @classmethod
    def _unpublished(cls, actions: pa.Table, published: dict[str, str],
                     run_ids: set[str] | None) -> tuple[list[dict], set[str]]:
        """Of these live files (of `run_ids`, or all): those wholly of an ingest that is not
        their run's live one (rows, to remove), and the runs of files that mix ingests (to
        rewrite). Selected with Arrow before any row becomes Python: a commit's clean-up
        asks it of every data table for the runs it replaced."""
        import pyarrow.compute as pc

        if run_ids is not None:
            actions = actions.filter(pc.is_in(actions.column("run_id"), value_set=pa.array(sorted(run_ids), pa.string())))
        actions = cls._with_live(actions, published)
        lo, hi, live = actions.column("min_ingest"), actions.column("max_ingest"), actions.column("live")
        same = cls._py_equal(lo, hi)
        other = pc.invert(cls._py_equal(lo, live))  # of no live ingest, or of another one
        whole = actions.filter(pc.and_(same, other)).drop_columns(["live"]).to_pylist()
        partial = set(actions.filter(pc.invert(same)).column("run_id").to_pylist())
        return whole, partial

    @staticmethod
    def _py_equal(a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.ChunkedArray:
        """a == b as Python compares values that may be None: None equals None only."""
        import pyarrow.compute as pc

        na, nb = pc.is_null(a), pc.is_null(b)
        return pc.if_else(pc.or_(na, nb), pc.and_(na, nb), pc.equal(a, b))

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
        self._guard()
        self.table("runs").delete(pred)  # the publish point: the runs are gone for readers
        faults.step("rm_after_unpublish")
        self._guard()
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
        from deltalake import write_deltalake

        data = pa.Table.from_pylist([row], schema=delta_schema("acceptances"))
        write_deltalake(self.table("acceptances"), data, mode="append", storage_options=self._opts)

    # -- maintenance --------------------------------------------------------------------
    def optimize(self, target_size: int = 256 << 20) -> dict[str, int]:
        """Compact each partition's small files (a partition is one run and device, so files
        stay ordered by run); returns files removed per table. Call under `lock()`."""
        self.remove_unpublished()
        out = {}
        for table in schema.ALL_TABLES:
            before = set(self.add_actions(table).column("path").to_pylist()) if table in schema.TABLES else set()
            self._guard()
            metrics = self.table(table).optimize.compact(target_size=target_size)
            out[table] = int(metrics.get("numFilesRemoved", 0))
            if table in schema.TABLES:
                self._record_checksums([
                    DataFile(table, r["run_id"], r["device"], r["path"], r["rows"] or 0,
                             *self.storage.size_and_hash(r["path"]), ingest_id=r["max_ingest"] or "")
                    for r in self.add_actions(table).to_pylist() if r["path"] not in before])
            faults.step(f"optimize_after_{table}")
        return out

    def check(self) -> list[tuple[str, str, str]]:
        """Verify every live data file against the log and what was recorded when it was
        written: present, same size, same SHA-256, Parquet page checksums valid. Returns
        (run_id, path, problem) for each damaged file."""
        import pyarrow.parquet as pq

        recorded = {}
        sums = self.read_table("checksums", ["path", "size_bytes", "sha256"])
        for path, size, digest in zip(*(sums.column(c).to_pylist() for c in ("path", "size_bytes", "sha256"))):
            recorded[path] = (size, digest)
        problems = []
        published = self.published()
        for table in schema.TABLES:
            for r in self.add_actions(table).to_pylist():
                live = published.get(r["run_id"])
                if live is None or not (r["min_ingest"] or "") <= live <= (r["max_ingest"] or ""):
                    continue  # no run's live version: a superseded or crashed ingest's, for vacuum
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
                    try:  # a path or bytes, never a Python file object: pyarrow's threads
                        # reading one through the GIL aborted the process at exit (SIGABRT)
                        source = pa.BufferReader(self.storage.read_bytes(rel)) if self.remote else str(self.root / rel)
                        pq.read_table(source, page_checksum_verification=True, use_threads=False)
                    except (OSError, pa.ArrowException) as e:
                        problem = f"unreadable parquet: {e}"
                if problem:
                    problems.append((r["run_id"], r["path"], problem))
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
        if not self.remote:  # under the lock no publish is under way: its temporary files are leftovers
            for name in self.storage.names(""):
                if name.startswith(".catalog-") and (name.endswith(".duckdb") or name.endswith(".duckdb.wal")):
                    self.storage.unlink(name)
                    deleted.append(name)
        return deleted
