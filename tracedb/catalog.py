"""catalog.duckdb: a read-only DuckDB snapshot of the lake for clients; nothing else.

The lake (Delta tables, see `tracedb.lake`) is the truth. After each commit tracedb
writes a new catalog beside the old one and renames it into place, so:

- writers never wait for readers: a dashboard, a notebook or the DuckDB CLI may keep the
  catalog open for hours; ingest neither waits for it nor fails because of it, and the
  open connection keeps answering from its snapshot (the files it lists stay until
  `vacuum` and its retention, default 7 days);
- a new connection sees the newest complete runs; it opens from any working directory
  with no setup statement (the views list absolute file paths);
- the catalog is derived: when it is missing, damaged, older than the lake or the
  warehouse folder moved, the next tracedb command rebuilds it from the lake;
- a snapshot is written whole or not at all: DuckDB checkpoints it explicitly (its close
  would drop a failed checkpoint silently and leave an empty file, on a full disk) and
  the file is renamed into place only when nothing of it is left in a WAL;
- a reader never needs write permission: when it cannot write a snapshot (a read-only
  warehouse, a full disk) it builds one in memory, for its own connection.

Each data view reads the live files of its Delta table (only files of each run's live
ingest; a filter on ingest_id is added only when a compacted file mixes ingests) with
Hive partitioning, so `WHERE run_id = ...` opens only that run's files. `runs`, `files`,
`ingest_log` and `tracedb_migrations` are small tables copied into the snapshot.

## A lake on object storage (`s3://bucket/prefix`, see `tracedb.storage`)

The views then list `s3://...` URLs, and the snapshot lives in two places:

- `<lake>/catalog.duckdb`, uploaded by every commit (one PUT: readers get the old or
  the new one), for clients that read object storage themselves: DuckDB with httpfs
  (`ATTACH 's3://bucket/prefix/catalog.duckdb' (READ_ONLY)` after `CREATE SECRET`);
- a local cache, `$TRACEDB_CACHE_DIR` (default `$XDG_CACHE_HOME/tracedb`, else
  `~/.cache/tracedb`) `/<hash of URL and endpoint>/catalog.duckdb`, which tracedb's own
  connections ATTACH. They read the files through the URL's fsspec filesystem (s3fs),
  registered on the connection (`register_filesystem`): DuckDB's httpfs extension is not
  needed, nor downloaded. Freshness is checked as for a folder (the Delta log listing,
  seven LIST requests); a stale cache is replaced by the lake's copy when that one is
  fresh (no write permission needed), else rebuilt from the lake into the cache, with no
  lease: a reader never waits for a writer, nor writes to the bucket (a snapshot built
  while a writer commits is built again, until the lake stood still while it was read).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from tracedb import faults
from tracedb import lake as lake_mod
from tracedb import schema, storage
from tracedb.errors import TracedbError
from tracedb.snapshot import SNAPSHOT_FORMAT, view_sql

CATALOG = lake_mod.CATALOG
# Columns of `runs` that come straight from the runs table; other run.json labels become
# extra columns of the view.
_RUN_COLUMNS = [f.name for f in schema.RUNS]


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def query_arrow(con: duckdb.DuckDBPyConnection, sql: str, params: dict | list | None = None) -> pa.Table:
    """Run SQL with bound parameters and return an Arrow table (duckdb 1.x and 2.x)."""
    rel = con.sql(sql, params=params or None)
    if rel is None:  # a statement without a result
        return pa.table({})
    fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
    return fetch()


def is_legacy(warehouse: Path | str | storage.Storage) -> bool:
    """A schema-1 warehouse: the live-file list inside catalog.duckdb, no lake yet (only
    ever a folder)."""
    st = storage.open_storage(warehouse)
    folder = st.local_path()
    return folder is not None and (folder / CATALOG).is_file() and not lake_mod.Lake(st).exists


def open_lake(warehouse: Path | str | storage.Storage, create: bool = False) -> lake_mod.Lake:
    """The warehouse's lake (a location, or the storage `storage.open_storage` gave),
    refusing one that needs `tracedb migrate`."""
    from tracedb import migrations

    lake = lake_mod.Lake(warehouse)
    where = lake.root
    if is_legacy(lake.storage):
        raise TracedbError(
            f"warehouse {where} was made by an older tracedb (schema 1: pending migrations: "
            f"{', '.join(migrations.pending_names(lake.root))}); run `tracedb migrate --warehouse {where}`")
    if not lake.exists:
        if not create:
            raise TracedbError(f"no warehouse at {where} (no {lake_mod.LAKE_JSON}); run `tracedb ingest` first")
        lake.create(migrations.all_records("created at schema version %d" % schema.SCHEMA_VERSION))
    else:
        migrations.require_current(lake)
        if any(v < 0 for v in lake.versions().values()):  # a table this version added
            with lake.lock():
                lake.ensure_tables()
    return lake


def connect(warehouse: Path | str | storage.Storage | None = None, read_only: bool = True, config: dict | None = None) -> duckdb.DuckDBPyConnection:
    """Open the warehouse's catalog snapshot with the views ready to query (rebuilt first
    when it is missing or stale). read_only=False gives a private writable copy of the views.

    The snapshot is ATTACHed to a fresh in-memory DuckDB rather than opened with
    duckdb.connect(path): DuckDB caches one database instance per path and process, so a
    second connect() in a notebook that still holds one would get the old snapshot. The
    attached snapshot's own record of the lake tells whether it is fresh: one open a query."""
    lake = open_lake(warehouse)
    path = snapshot_path(lake)
    alias = "tracedb" if read_only else "snap"
    try:
        con = duckdb.connect(config=config or {})
        con.execute("SET enable_progress_bar = false")  # DuckDB would print it into the API user's stdout
        register_storage(con, lake)
        if _attach(con, path, alias) != _lake_state(lake):
            con.execute(f"DETACH DATABASE IF EXISTS {alias}")
            if ensure_fresh(lake):
                _attach(con, path, alias, strict=True)
            else:  # it could not be written here: this connection's own, in memory
                con.execute(f"ATTACH ':memory:' AS {alias}")
                con.execute(f"USE {alias}")
                _build_settled(con, lake)
                con.execute("USE memory")
        if read_only:
            con.execute("USE tracedb")
        else:
            _copy_views(con)
        return con
    except duckdb.Error as e:
        raise TracedbError(f"cannot open {path}: {e}") from e


def _attach(con: duckdb.DuckDBPyConnection, path: Path, alias: str, strict: bool = False) -> dict | None:
    """ATTACH the snapshot read-only as `alias`; returns the lake state it was built from
    (None: missing or damaged, and unless strict nothing is attached then)."""
    try:
        con.execute(f"ATTACH {lake_mod.sql_str(str(path))} AS {alias} (READ_ONLY)")
    except duckdb.Error:
        if strict:
            raise
        return None
    try:
        return json.loads(con.execute(
            f"SELECT value FROM {alias}.tracedb_meta WHERE key = 'lake_state'").fetchone()[0])
    except (duckdb.Error, TypeError, ValueError):
        return None


def _copy_views(con: duckdb.DuckDBPyConnection) -> None:
    """Copy the attached snapshot `snap` into the in-memory database: tables, then views."""
    for (name,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'snap'").fetchall():
        con.execute(f"CREATE TABLE {_ident(name)} AS SELECT * FROM snap.{_ident(name)}")
    views = con.execute("SELECT view_name, sql FROM duckdb_views() WHERE database_name = 'snap' AND NOT internal").fetchall()
    for (_name, sql) in sorted(views, key=lambda v: not v[0].startswith("tracedb_")):  # the views others read first
        con.execute(sql)
    con.execute("DETACH snap")


def _in_lake(lake: lake_mod.Lake) -> Path | None:
    """The snapshot as a file of the lake, where the lake is on this machine's disk; None
    on object storage, where tracedb's connections attach a local cache of it."""
    folder = lake.storage.local_path()
    return None if folder is None else folder / CATALOG


def snapshot_path(lake: lake_mod.Lake) -> Path:
    """The snapshot tracedb's connections attach: in the folder, or the object-storage
    lake's local cache (see the module docstring)."""
    if (path := _in_lake(lake)) is not None:
        return path
    base = os.environ.get("TRACEDB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tracedb")
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
    key = hashlib.sha256(f"{lake.root}\n{endpoint}".encode()).hexdigest()[:16]
    folder = Path(base) / key
    folder.mkdir(parents=True, exist_ok=True)
    return folder / CATALOG


def register_storage(con: duckdb.DuckDBPyConnection, lake: lake_mod.Lake) -> None:
    """Let DuckDB read an object-storage lake's files through its fsspec filesystem."""
    fs = lake.storage.duckdb_filesystem()
    if fs is not None:
        con.register_filesystem(fs)


def _snapshot_state(path: Path) -> dict | None:
    """The lake state a snapshot file was built from (None: missing or damaged)."""
    con = duckdb.connect()
    try:
        return _attach(con, path, "snap")
    finally:
        con.close()


def _lake_state(lake: lake_mod.Lake) -> dict:
    return {"root": lake.storage.home(), "versions": lake.versions(), "format": SNAPSHOT_FORMAT}


def ensure_fresh(lake: lake_mod.Lake) -> bool:
    """Rebuild catalog.duckdb when it does not match the lake (missing, damaged, stale,
    moved). While another process holds the commit lock it is about to publish one:
    readers use the current snapshot rather than wait. False when no snapshot file can
    be had without writing where this process may not (a read-only warehouse or cache,
    a full disk): the caller builds one in memory."""
    try:
        path = snapshot_path(lake)
    except OSError:
        return False
    state = _lake_state(lake)
    if path.is_file() and _snapshot_state(path) == state:
        return True
    if _in_lake(lake) is None:  # the lake's own copy, else the reader's cache: no lease, no write to the bucket
        if _fetch_lake_snapshot(lake, path, state):
            return True
        try:
            _publish_settled(lake)
        except (OSError, duckdb.Error):
            return False
        return True
    if not _writable(lake.root):
        return False
    try:
        with lake.lock(wait=not path.is_file()) as held:
            if held and _snapshot_state(path) != _lake_state(lake):
                publish(lake)
    except (OSError, duckdb.Error):  # no permission after all, a full disk: nothing was put in place
        return False
    return path.is_file()


def _writable(root: Path) -> bool:
    """Whether this process may write the snapshot and take the commit lock in the folder."""
    lock = root / lake_mod.LOCK_FILE
    return (os.access(root, os.W_OK) and os.access(lock.parent, os.W_OK)
            and (not lock.exists() or os.access(lock, os.W_OK)))


# A reader that builds a snapshot without the commit lock builds it again when the lake
# changed while it was read (a commit's clean-up can remove the files of the version it
# read as live), at most this many times; then it keeps the last.
SETTLE_TRIES = 5


def _build_settled(con: duckdb.DuckDBPyConnection, lake: lake_mod.Lake) -> None:
    """`_build` into the database `con` uses, by a reader holding no lock: again while
    the lake changed under it (the database emptied first)."""
    for attempt in range(SETTLE_TRIES):
        if attempt:
            for (kind, name) in con.execute(
                    "SELECT 'VIEW', view_name FROM duckdb_views() WHERE database_name = current_database() "
                    "AND NOT internal UNION ALL SELECT 'TABLE', table_name FROM duckdb_tables() "
                    "WHERE database_name = current_database()").fetchall():
                con.execute(f"DROP {kind} IF EXISTS {_ident(name)}")
        built = _build(con, lake)
        if _lake_state(lake) == built:
            return


def _publish_settled(lake: lake_mod.Lake) -> None:
    """An object-storage lake's snapshot, built by a reader into its own cache (no lease,
    no upload): again while the lake changed under it."""
    for _ in range(SETTLE_TRIES):
        new = new_snapshot(lake)
        built = publish(lake, new, upload=False)
        if _lake_state(lake) == built:
            return


def _fetch_lake_snapshot(lake: lake_mod.Lake, path: Path, state: dict) -> bool:
    """An object-storage lake: take the snapshot the last commit uploaded when it matches
    the lake (one GET, and no lease: a reader needs no write permission)."""
    tmp = path.parent / f".fetch-{os.getpid()}-{secrets.token_hex(4)}.duckdb"
    try:
        try:
            tmp.write_bytes(lake.storage.read_bytes(CATALOG))
        except OSError:
            return False
        if _snapshot_state(tmp) != state:
            return False
        os.replace(tmp, path)
        return True
    finally:
        tmp.unlink(missing_ok=True)


@dataclass
class NewSnapshot:
    """A snapshot file being written beside the catalog (`new_snapshot`), not yet in place."""

    path: Path
    con: duckdb.DuckDBPyConnection  # `USE`s the new file
    alias: str | None = None  # the file ATTACHed under this name to another connection's database

    def close(self) -> None:
        """Write it out (DuckDB checkpoints the file as it closes it)."""
        if self.alias:
            try:
                self.con.execute("USE memory")
                self.con.execute(f"DETACH DATABASE IF EXISTS {self.alias}")
            finally:
                self.alias = None
        self.con.close()

    def discard(self) -> None:
        """Close it and delete what is left of it (nothing once `publish` renamed it)."""
        self.close()
        self.path.unlink(missing_ok=True)
        Path(str(self.path) + ".wal").unlink(missing_ok=True)


def new_snapshot(lake: lake_mod.Lake, on: duckdb.DuckDBPyConnection | None = None) -> NewSnapshot:
    """An empty snapshot file beside the catalog, for `publish`. `on`: an open in-memory
    DuckDB connection (the ingest's rollups connection): the file is ATTACHed to a cursor
    of it, ~1 ms, where starting a DuckDB database costs ~14-16 ms of CPU (medians of
    10, 2 cores; a local lake only: an object-storage one registers its filesystem on a
    connection of its own)."""
    target = snapshot_path(lake)
    tmp = target.parent / f".catalog-{os.getpid()}-{secrets.token_hex(4)}.duckdb"
    if on is not None and _in_lake(lake) is not None:
        alias = f"tracedb_new_{secrets.token_hex(4)}"
        con = on.cursor()
        try:
            _no_fsync(con)
            con.execute(f"ATTACH {lake_mod.sql_str(str(tmp))} AS {alias} (STORAGE_VERSION 'v1.0.0')")
            con.execute(f"USE {alias}")
        except BaseException:
            NewSnapshot(tmp, con).discard()
            raise
        return NewSnapshot(tmp, con, alias)
    con = _new_snapshot_db(tmp)
    try:
        register_storage(con, lake)
    except BaseException:
        NewSnapshot(tmp, con).discard()
        raise
    return NewSnapshot(tmp, con)


def _no_fsync(con: duckdb.DuckDBPyConnection) -> None:
    """No fsync for the files this database writes (see `_new_snapshot_db`), where DuckDB can."""
    try:
        con.execute("SET fsync_mode = 'NONE'")
    except duckdb.Error:  # an older DuckDB: no such setting
        pass


def publish(lake: lake_mod.Lake, new: NewSnapshot | None = None, upload: bool = True) -> dict:
    """Write a new snapshot of the lake beside the catalog (into `new`, when made
    beforehand) and rename it into place, whole or not at all (a full disk raises and
    leaves the one in place). Call under the lake's commit lock, after a commit (an
    object-storage reader calls it without, upload=False: its cache only). Returns the
    lake state the snapshot records."""
    new = new or new_snapshot(lake)
    try:
        try:
            try:
                state = _build(new.con, lake)
            except duckdb.Error:  # a damaged file fails its view's binding: leave it out (`check` names it)
                unreadable = _unreadable(lake)
                if not unreadable:
                    raise
                state = _build(new.con, lake, unreadable)
            # explicitly: a checkpoint that fails as the file closes is dropped silently
            # (the data stays in a WAL the rename leaves behind: an empty catalog)
            new.con.execute(f"CHECKPOINT {new.alias}" if new.alias else "CHECKPOINT")
        finally:
            new.close()
        wal = Path(str(new.path) + ".wal")
        if wal.is_file() and wal.stat().st_size:
            raise OSError(f"{new.path}: the snapshot was not all written (its WAL remains)")
        faults.step("snapshot_before_rename")
        if upload and _in_lake(lake) is None:
            lake._guard()  # a writer that lost its lease uploads nothing
            lake.storage.upload(new.path, CATALOG)  # for httpfs clients; one PUT
        target = snapshot_path(lake)
        # a WAL beside the file in place is that file's, never the new one's: DuckDB would
        # replay it into the new snapshot (a fatal error; e.g. the schema-1 catalog's WAL
        # that a `tracedb migrate` killed after its last commit, before the checkpoint of
        # its close, left behind). Snapshots are opened read-only and write none.
        Path(str(target) + ".wal").unlink(missing_ok=True)
        os.replace(new.path, target)
    finally:
        new.discard()
    return state


def _new_snapshot_db(path: Path) -> duckdb.DuckDBPyConnection:
    """A new DuckDB file for a snapshot, in DuckDB 1.0's storage format (BI tools embedding
    an older DuckDB still open it), written without fsync where DuckDB can (fsync_mode,
    DuckDB >= 1.4): the snapshot is derived and renamed into place (ext4 flushes a file
    renamed over another), a damaged one is rebuilt from the lake, and the Delta log
    itself is not fsynced by delta-rs. The fsync was 21 ms of a 91 ms publish (median of
    10, one TF run, load ~7)."""
    config = {"storage_compatibility_version": "v1.0.0"}
    try:
        return duckdb.connect(str(path), config={**config, "fsync_mode": "NONE"})
    except duckdb.Error:  # an older DuckDB: no such setting
        return duckdb.connect(str(path), config=config)


def _unreadable(lake: lake_mod.Lake) -> set[str]:
    """Live data files DuckDB cannot bind (a truncated footer, not Parquet): each view binds
    every file it names as it is created, so one such file would fail the publish."""
    con = duckdb.connect()
    register_storage(con, lake)
    bad = set()
    try:
        for table in schema.TABLES:
            for f in lake.live_file_ranges(table).column("path").to_pylist():
                try:
                    con.execute(f"DESCRIBE SELECT * FROM read_parquet({lake_mod.sql_str(lake.storage.absolute(f))})")
                except duckdb.Error:
                    bad.add(f)
    finally:
        con.close()
    return bad


def _build(con: duckdb.DuckDBPyConnection, lake: lake_mod.Lake, unreadable: set[str] = frozenset()) -> dict:
    """The snapshot's tables and views, in the database `con` uses; returns the lake state
    it records (read first: a snapshot never claims a newer lake than it shows). Files
    that are gone or `unreadable` are left out of the views (and listed as missing)."""
    try:
        return _build_views(con, lake, unreadable)
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass
        raise


def _build_views(con: duckdb.DuckDBPyConnection, lake: lake_mod.Lake, unreadable: set[str]) -> dict:
    state = _lake_state(lake)
    # `files` as it describes the live versions (a run published just before a crash has
    # its rows from the ingest log, `Lake.live_file_rows`)
    published = lake.published()
    files, stale = lake.live_file_rows()  # None: no run's rows behind, `files` not read whole
    con.execute("BEGIN")
    for name in ("runs", "files", "ingest_log", "acceptances"):
        _meta_table(con, lake, name, files if name == "files" else None, materialize=name == "files" and bool(stale))
    con.execute("CREATE TABLE tracedb_migrations (number INTEGER, name VARCHAR, applied_at VARCHAR, note VARCHAR)")
    migrations = lake.read_meta().get("migrations", [])
    if migrations:  # one statement (one each: ~0.4 ms a migration)
        con.execute("INSERT INTO tracedb_migrations VALUES " + ", ".join(["(?, ?, ?, ?)"] * len(migrations)),
                    [v for m in migrations for v in (m["number"], m["name"], m.get("applied_at"), m.get("note"))])
    con.execute("CREATE TABLE tracedb_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.executemany("INSERT INTO tracedb_meta VALUES (?, ?)", [
        ["schema_version", str(schema.SCHEMA_VERSION)], ["lake_state", json.dumps(state)]])
    missing, live, parts = [], [], {}
    named = lake.dead_row_files()  # after `runs` (Lake.whole_files)
    for table in schema.TABLES:
        listed = lake.live_file_ranges(table, published)
        hive = lake.partitioned(table)
        # A lost file would make DuckDB refuse the whole view (and so every later commit):
        # leave it out, and let `tracedb check` name its run. So is a file whose size is
        # not the one its add action records (truncated, overwritten): the view binds its
        # first file only (`snapshot.view_sql`), so the others' footers are read by queries.
        whole = [False] * listed.num_rows if hive else lake.whole_files(listed, named)
        rows = list(zip(*(listed.column(c).to_pylist() for c in ("path", "run_id", "run_hi", "size")), whole))
        paths = [r[0] for r in rows]
        if hive:
            present = lake.storage.present(table, paths)  # object storage: one listing, not a HEAD a file
        else:
            sizes = lake.storage.sizes(paths)  # object storage: one listing of the table's folder
            present = {f for f, _, _, size, _ in rows if sizes.get(f) == size}
        files = []  # (absolute path or URL, least run, greatest run, whole), in run order
        for f, lo, hi, _, all_live in sorted(rows, key=lambda r: (r[1], r[0])):
            if f not in unreadable and f in present:
                files.append((lake.storage.absolute(f), lo, hi, all_live))
                live.append((table, lo, hi, files[-1][0], all_live))
            else:
                missing.append(f)
        con.execute(f"CREATE VIEW {table} AS {_table_view_sql(table, files, hive)}")
        parts[table] = {"columns": _columns(table), "hive": hive, "empty": _empty_view(table)}
    # what snapshot.scope_to_runs needs to make a run's own views
    names = ("table_name", "run_lo", "run_hi", "path", "whole")
    con.register("_live", pa.table({n: pa.array([row[i] for row in live], pa.bool_() if n == "whole" else pa.string())
                                    for i, n in enumerate(names)}))
    con.execute("CREATE TABLE tracedb_live_files AS SELECT * FROM _live")
    con.unregister("_live")
    con.execute("INSERT INTO tracedb_meta VALUES ('view_parts', ?)", [json.dumps(parts)])
    con.execute("INSERT INTO tracedb_meta VALUES ('missing_files', ?)", [json.dumps(missing)])
    con.execute(f"CREATE VIEW runs AS {_runs_view_sql(con)}")
    con.execute("CREATE VIEW files AS SELECT * FROM tracedb_files")
    con.execute("CREATE VIEW ingest_log AS SELECT * FROM tracedb_ingest_log")
    con.execute("CREATE VIEW acceptances AS SELECT * FROM tracedb_acceptances")  # the report's (tracedb accept)
    con.execute("COMMIT")
    return state


def _meta_table(con: duckdb.DuckDBPyConnection, lake: lake_mod.Lake, name: str, rows: pa.Table | None,
                materialize: bool) -> None:
    """`tracedb_<name>`: a view over the metadata table's live files, as they are (the
    snapshot then does not grow with the runs: `runs`, `files` and `ingest_log` hold ~3 KB
    a run, ~300 MB at 100,000 runs as tables in catalog.duckdb); a table of its rows where
    they are not the files' (`files` of a run a crash left behind, `Lake.live_file_rows`;
    a table whose files need a newer Delta reader)."""
    cols = ", ".join(_ident(f.name) for f in lake_mod.delta_schema(name))
    paths = None if materialize else lake.plain_files(name)
    if paths is None:
        con.register("_lake_table", rows if rows is not None else lake.read_table(name))
        con.execute(f"CREATE TABLE tracedb_{name} AS SELECT {cols} FROM _lake_table")
        con.unregister("_lake_table")
    elif paths:
        listed = f"read_parquet([{', '.join(lake_mod.sql_str(p) for p in paths)}], union_by_name = true)"
        # a column the table gained (a migration's schema merge) that no file has yet: NULL
        have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {listed}").fetchall()}
        sel = ", ".join(_ident(f.name) if f.name in have else f"CAST(NULL AS {schema.duckdb_type(f.type)}) AS {_ident(f.name)}"
                        for f in lake_mod.delta_schema(name))
        con.execute(f"CREATE VIEW tracedb_{name} AS SELECT {sel} FROM {listed}")
    else:
        con.execute(f"CREATE VIEW tracedb_{name} AS {_empty_select(lake_mod.delta_schema(name))}")


def _empty_select(sch) -> str:
    cols = ", ".join(f"CAST(NULL AS {schema.duckdb_type(f.type)}) AS {_ident(f.name)}" for f in sch)
    return f"SELECT {cols} WHERE false"


# A data table's column list and empty view are the schema's, the same at every publish
# (they were a tenth of a small warehouse's publish, built anew each time).
@functools.lru_cache(maxsize=None)
def _columns(table: str) -> str:
    return ", ".join(_ident(f.name) for f in schema.TABLES[table])


@functools.lru_cache(maxsize=None)
def _empty_view(table: str) -> str:
    return _empty_select(schema.TABLES[table])


def _table_view_sql(table: str, files: list[tuple[str, str, str, bool]], hive: bool) -> str:
    if not files:
        return _empty_view(table)
    return view_sql(_columns(table), files, hive)


def label_path(key: str) -> str:
    """JSON path of a run.json label. DuckDB decodes `\\"` and `\\\\` in a quoted path
    key but no other escape (`\\n`, `\\u0001`), so control characters go in raw."""
    return '$."' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _runs_view_sql(con: duckdb.DuckDBPyConnection) -> str:
    # DuckDB identifiers are case-insensitive: a label `Model` would collide with `model`.
    taken = {c.lower() for c in _RUN_COLUMNS}
    keys = []
    # the label keys in one query (a `json.loads` a run took 0.6 s at 50,000 runs)
    for k in sorted({k for (k,) in con.execute(
            "SELECT DISTINCT unnest(json_keys(labels::JSON)) FROM tracedb_runs WHERE labels IS NOT NULL").fetchall()}):
        if k.strip() and k.lower() not in taken:
            taken.add(k.lower())
            keys.append(k)
    extra = "".join(
        f", json_extract_string(labels, {lake_mod.sql_str(label_path(k))}) AS {_ident(k)}" for k in keys
    )
    return f"SELECT {', '.join(_ident(c) for c in _RUN_COLUMNS)}{extra} FROM tracedb_runs"

