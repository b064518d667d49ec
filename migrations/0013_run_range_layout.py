"""Schema 7 -> 8: data tables no longer partitioned by run and device (issue 22).

Until schema 7 every data and rollup table was partitioned by `run_id` and `device`, and
each source file of a run wrote its own file a table and device: ~17 live files a run,
which every commit, publish, BI query, `rm` and `vacuum` paid for (docs/scale.md). From
schema 8 the tables are unpartitioned: `run_id` and `device` are columns of the files,
a file holds many runs ordered by run_id, and its Delta add action carries the min/max
of `run_id`, `device` and `ingest_id` (the snapshot's views and other engines skip files
by them).

For each data table still partitioned, this rewrites the live rows (each run's rows of
its live ingest; superseded rows are dropped) into files of `GROUP_RUNS` runs each, in run
order, then commits the new layout:

1. the new files are written (not live) and listed in `_tracedb/m0013-<table>.json`;
2. one Delta commit changes the table's metadata to no partition columns and removes
   every old file (delta-rs cannot change the partition columns in the commit that adds
   files), the stats columns are set to run_id, device and ingest_id;
3. one commit adds the new files (their checksums recorded first); the record goes.

The snapshot readers (DuckDB views, BI clients) keep their files until the migration
publishes a new one at its end. A Delta reader of the table alone (Spark, Trino) sees it
empty between steps 2 and 3 (milliseconds). A crash anywhere is safe to re-run: before
step 2 the table is as it was (the record's files are deleted and written again); after
it, the record's files are added.
"""

from __future__ import annotations

TARGET = "lake"
GROUP_RUNS = 50


def up(lake) -> None:
    from tracedb import faults, schema

    lake.ensure_tables()
    published = lake.published()
    for table in schema.TABLES:
        record = f"_tracedb/m0013-{table}.json"
        if lake.partitioned(table):
            _discard_record(lake, record)
            files = _rewrite(lake, table, published)
            lake.storage.write_atomic(record, _dump(files))
            faults.step("m0013_before_unpartition")
            _unpartition(lake, table)
            faults.step("m0013_after_unpartition")
        elif lake.storage.is_file(record):
            files = _load(lake.storage.read_bytes(record))
        else:
            continue
        if files:
            lake._add_files(files)
        lake.storage.unlink(record)


def _rewrite(lake, table: str, published: dict[str, str]) -> list:
    """The table's live rows in new files of GROUP_RUNS runs each (not committed)."""
    import secrets

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tracedb import lake as lake_mod

    sch = lake_mod.file_schema(table, partitioned=True)
    by_run: dict[str, list[dict]] = {}
    for r in lake.live_file_ranges(table, published).to_pylist():
        by_run.setdefault(r["run_id"], []).append(r)
    runs = sorted(by_run)

    def pieces(group: list[str]):  # in the merged file's order: by run, then device
        for run in group:
            for r in sorted(by_run[run], key=lambda r: (r["device"], r["path"])):
                data = pq.read_table(str(lake.root / r["path"]), schema=sch)
                data = data.filter(pa.compute.equal(data.column("ingest_id"), published[run]))
                n = data.num_rows
                cols = {f.name: (pa.repeat(pa.scalar(r[f.name], f.type), n) if f.name in ("run_id", "device")
                                 else data.column(f.name)) for f in lake_mod.delta_schema(table)}
                yield pa.table(cols, schema=lake_mod.file_schema(table))

    out = []
    for i in range(0, len(runs), GROUP_RUNS):
        rel = f"{table}/part-m0013-{i // GROUP_RUNS:06d}-{secrets.token_hex(4)}.parquet"
        f = lake_mod.write_pieces(lake.storage, table, pieces(runs[i:i + GROUP_RUNS]), rel)
        if f is not None:
            out.append(f)
    return out


def _unpartition(lake, table: str) -> None:
    """One commit: no partition columns, every old file removed; then the stats columns."""
    from deltalake import write_deltalake

    from tracedb import lake as lake_mod

    lake._guard()
    write_deltalake(lake.table(table), lake_mod.delta_schema(table).empty_table(), mode="overwrite",
                    schema_mode="overwrite", partition_by=[], storage_options=lake._opts)
    lake.table(table).alter.set_table_properties(lake_mod.DATA_TABLE_PROPERTIES)
    lake.forget_layout(table)


def _dump(files: list) -> bytes:
    import dataclasses
    import json

    return json.dumps([dataclasses.asdict(f) for f in files]).encode()


def _load(data: bytes) -> list:
    import json

    from tracedb import lake as lake_mod

    return [lake_mod.DataFile(**{k: v for k, v in d.items() if k != "logged"}) for d in json.loads(data)]


def _discard_record(lake, record: str) -> None:
    """A crash before the layout commit: the files the record lists are no one's."""
    if lake.storage.is_file(record):
        for f in _load(lake.storage.read_bytes(record)):
            lake.storage.unlink(f.rel)
        lake.storage.unlink(record)
