"""Candidate physical layouts for a large fleet's `kernels`, measured on the same rows.

    nice python bench/bench_layouts.py WAREHOUSE [--repeat 3] [--work DIR]

WAREHOUSE is a lake built by `bench/bench_fleet_scale.py --keep` (runs named
`b<batch>-run<i>` in batches of 50, plus the template's `run<i>`). Its live `kernels` rows
are written again in each layout below, and a DuckDB file holds one `kernels` view over
them, as catalog.duckdb would. Each figure is a fresh process of plain DuckDB (no tracedb
code): connect + one run's kernel count, and the fleet-wide sum(duration_ns) by run.

  hive        today's view: every live file (a run, device and source file each) listed,
              Hive partitioning (run_id, device from the path prune a one-run read)
  batch       one file per nightly batch of 50 runs, rows sorted by run_id, one row group
              per run (run_id, device are columns); the view lists the batch files
  batch_union the batch files, the view a UNION ALL of one branch per file, each with its
              file's run_id range as a filter: DuckDB folds a branch whose range excludes
              the run asked for into an empty result, so a one-run read opens one file
  compacted   the batch files merged into files of about --compact-rows rows (still sorted
              by run_id, row groups of one run): what `optimize` would leave
  compacted_union  the compacted files as a UNION ALL with run_id ranges

and the CPU of writing one batch's rows as one sorted file (the merge step of an ingest).

Prints one JSON object per layout: files, view SQL bytes, DuckDB file bytes, and the two
timings (median of --repeat) with the peak RSS of the one-run process.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fleet_scale import bi  # noqa: E402


def quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def write_sorted(rows: pa.Table, path: Path) -> tuple[str, str]:
    """Rows sorted by run_id, device, start_ns; one row group per run. Returns the run range."""
    rows = rows.sort_by([("run_id", "ascending"), ("device", "ascending"), ("start_ns", "ascending")])
    counts = pc.value_counts(rows.column("run_id"))  # in order of first appearance: sorted
    with pq.ParquetWriter(path, rows.schema, compression="zstd") as w:
        start = 0
        for n in counts.field("counts").to_pylist():
            w.write_table(rows.slice(start, n), row_group_size=1 << 30)
            start += n
    runs = counts.field("values")
    return runs[0].as_py(), runs[len(runs) - 1].as_py()


def view_list(columns: str, files: list[Path]) -> str:
    listed = ", ".join(quote(str(f)) for f in files)
    return f"SELECT {columns} FROM read_parquet([{listed}])"


def view_union(columns: str, files: list[tuple[Path, str, str]]) -> str:
    return " UNION ALL ".join(
        f"SELECT {columns} FROM read_parquet({quote(str(f))}) WHERE run_id BETWEEN {quote(lo)} AND {quote(hi)}"
        for f, lo, hi in files)


def measure(db: Path, run: str, repeat: int) -> dict:
    one = [bi(db, "SELECT count(*) FROM kernels WHERE run_id = ?", run) for _ in range(repeat)]
    fleet = [bi(db, "SELECT run_id, sum(duration_ns) FROM kernels GROUP BY run_id") for _ in range(repeat)]
    return {"one_s": round(statistics.median(w for w, _ in one), 3),
            "one_rss_mb": round(statistics.median(r for _, r in one), 1),
            "fleet_s": round(statistics.median(w for w, _ in fleet), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("warehouse", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench_layouts")
    ap.add_argument("--compact-rows", type=int, default=4_000_000)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    cat = args.warehouse / "catalog.duckdb"
    con = duckdb.connect(str(cat), read_only=True)
    hive_sql = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'kernels' AND NOT internal").fetchall()[0][0]
    rows = con.sql("SELECT * FROM kernels").to_arrow_table()
    con.close()
    columns = ", ".join(f'"{c}"' for c in rows.column_names)
    run = "b00001-run00000"
    rows = rows.sort_by([("run_id", "ascending")])
    batch_of = pc.utf8_slice_codeunits(rows.column("run_id"), 0, 6)  # 'b00001' or 'run000' (the template)
    batches = []
    t = time.process_time()  # CPU: the machine is shared
    start = 0
    for n in pc.value_counts(batch_of).field("counts").to_pylist():  # sorted by run_id: by batch too
        path = args.work / f"batch-{len(batches):05d}.parquet"
        lo, hi = write_sorted(rows.slice(start, n), path)
        batches.append((path, lo, hi))
        start += n
    # what merging a group's kernels into one sorted file costs (from rows in memory)
    print(json.dumps({"merge_cpu_s_per_batch": round((time.process_time() - t) / len(batches), 3),
                      "rows_per_batch": rows.num_rows // len(batches)}), flush=True)
    ordered = rows
    compacted, start = [], 0
    while start < ordered.num_rows:  # cut at a run boundary past compact_rows
        end = min(start + args.compact_rows, ordered.num_rows)
        ids = ordered.column("run_id")
        while end < ordered.num_rows and ids[end].as_py() == ids[end - 1].as_py():
            end += 1
        path = args.work / f"compact-{len(compacted):04d}.parquet"
        compacted.append((path, *write_sorted(ordered.slice(start, end - start), path)))
        start = end
    layouts = {
        "hive": (None, hive_sql),
        "batch": (len(batches), view_list(columns, [f for f, _, _ in batches])),
        "batch_union": (len(batches), view_union(columns, batches)),
        "compacted": (len(compacted), view_list(columns, [f for f, _, _ in compacted])),
        "compacted_union": (len(compacted), view_union(columns, compacted)),
    }
    for name, (files, sql) in layouts.items():
        db = args.work / f"{name}.duckdb"
        c = duckdb.connect(str(db))
        c.execute(sql if sql.startswith("CREATE VIEW") else f"CREATE VIEW kernels AS {sql}")
        c.close()
        out = {"layout": name, "files": files if files is not None else sql.count(".parquet'"),
               "view_sql_mb": round(len(sql) / 1e6, 3), "db_mb": round(db.stat().st_size / 1e6, 2),
               "rows": rows.num_rows, **measure(db, run, args.repeat)}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
