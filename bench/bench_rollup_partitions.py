"""Every rollup's metric on one GPU stream of n kernels: CPU and peak memory, by metric.

    python bench/bench_rollup_partitions.py [--n 1000000 3000000] [--mode sql|writer]
                                            [--memory 64MB] [--tables rollup_gpu_busy_idle ...]

Does any rollup besides stream_overlap (bench/bench_stream_overlap.py) need memory that
grows with the largest single stream or device? One run, one rank, one device, one stream
(and one step: the worst case of a metric partitioned by step) of n kernels (`--nccl-every k`:
every k-th an all-reduce, for rollup_collectives), 10 us apart,
4 us (i even) or 12 us (i odd) long, launched 3 us before they start (so the queue
metrics have launches), written once as Parquet in a temporary folder; `nodes`,
`runtime_calls` and `steps` hold no rows. Each figure is a fresh process (peak RSS: its
VmHWM; CPU: its own). `--mode sql`: the text the ingest runs (`-- rollup-sql:` or the
metric's file) alone on a view of the file at the metric's default parameters, DuckDB with
`threads = 1`, the memory limit and a spill folder. `--mode writer`: `rollups.Writer`
computing that table (its input: the rows of all activity and of the kernel kind, so 2 n
rows for a metric with a `kind` parameter) with ROLLUP_MEMORY set to `--memory`.
`--text FILE`: run that SQL file as the rollup's text instead (e.g. an earlier tree's, from
`git show REF:sql/metrics/streamed/stream_time.sql`), for before/after figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import json, resource, sys, tempfile, time
from pathlib import Path
import duckdb
from tracedb import rollups as R, schema, sqllib

mode, table, path, n, memory, text = sys.argv[1:7]
cq = R.metrics()[table]
if text:  # another text for this rollup (before/after)
    import dataclasses
    cq = dataclasses.replace(cq, rollup_sql=open(text).read())
    declared = R.metrics()
    R.metrics = lambda: {**declared, table: cq}
r0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.time()
try:
    if mode == "sql":
        con = duckdb.connect()
        con.execute(f"SET enable_progress_bar = false; SET threads = 1; SET memory_limit = '{memory}'; SET temp_directory = '{tempfile.mkdtemp()}'")
        con.execute(f"CREATE VIEW kernels AS SELECT * FROM read_parquet('{path}/kernels/part-0.parquet')")
        for t, cols in R.WHOLE_SOURCES.items():
            if t != "kernels":
                nulls = ", ".join(f"CAST(NULL AS {schema.duckdb_type(schema.TABLES[t].field(c).type)}) AS {c}" for c in cols)
                con.execute(f"CREATE VIEW {t} AS SELECT {nulls} WHERE false")
        rows = con.execute(cq.rollup_sql or cq.sql, sqllib.bind(cq, {}, con)).fetchall()
        got = f"{len(rows)} rows"
    else:
        R.ROLLUP_MEMORY, R.TABLE_ROWS = memory, 10_000
        w = R.Writer()
        try:
            files = w.write_runs(path, [("r", "i1", ["kernels/part-0.parquet"])], tables=[table], rows=int(n))
        finally:
            w.close()
        counts = [duckdb.sql("SELECT count(*) FROM read_parquet('" + path + "/" + f.rel + "')").fetchall()[0][0] for f in files]
        got = f"{sum(counts)} rows"
        import shutil
        for f in files:
            shutil.rmtree(Path(path) / f.rel.split('/')[0], ignore_errors=True)
except Exception as e:
    got = type(e).__name__ + ": " + str(e).splitlines()[0][:90]
r1 = resource.getrusage(resource.RUSAGE_SELF)
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"cpu": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, "wall": time.time() - t0,
                  "peak_mb": peak / 1024, "rows": got}))
"""


def one_stream(folder: Path, n: int, nccl_every: int = 0) -> None:
    import duckdb

    from tracedb import rollups, schema

    given = {"run_id": "'r'", "device": "'GPU:0'", "rank": "0", "step": "0", "stream": "7", "kind": "'kernel'",
             "start_ns": "10000 * i", "duration_ns": "CASE WHEN i % 2 = 0 THEN 4000 ELSE 12000 END",
             "name": f"CASE WHEN {nccl_every} > 0 AND i % {max(nccl_every, 1)} = 0 THEN 'ncclAllReduce' ELSE 'k' END",
             "source_file": "'f'", "launch_start_ns": "10000 * i - 3000", "correlation_id": "i"}
    sel = [f"CAST({given.get(c, 'NULL')} AS {schema.duckdb_type(schema.TABLES['kernels'].field(c).type)}) AS {c}"
           for c in rollups.WHOLE_SOURCES["kernels"]]
    (folder / "kernels").mkdir(parents=True)
    with duckdb.connect() as con:
        con.execute(f"COPY (SELECT {', '.join(sel)}, 'i1' AS ingest_id FROM range({n}) t(i)) "
                    f"TO '{folder / 'kernels' / 'part-0.parquet'}' (FORMAT parquet)")


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from tracedb import schema

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[1_000_000, 3_000_000])
    ap.add_argument("--mode", choices=["sql", "writer"], default="sql")
    ap.add_argument("--memory", default="64MB")
    ap.add_argument("--nccl-every", type=int, default=0, help="every k-th kernel a collective (0: none)")
    ap.add_argument("--tables", nargs="+", default=list(schema.ROLLUPS))
    ap.add_argument("--text", default="", help="an SQL file run as the rollup's text instead (one table)")
    args = ap.parse_args()
    print(f"| n | rollup | CPU s | wall s | peak MB | result ({args.mode}, {args.memory}, nccl every {args.nccl_every}{', ' + args.text if args.text else ''}) |\n|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.n:
            folder = Path(tmp) / str(n)
            one_stream(folder, n, args.nccl_every)
            for table in args.tables:
                out = subprocess.run([sys.executable, "-c", _CHILD, args.mode, table, str(folder), str(n), args.memory,
                                      str(Path(args.text).resolve()) if args.text else ""],
                                     capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
                if out.returncode:
                    print(f"| {n:,} | {table} | failed: {out.stderr.strip().splitlines()[-1][:100]} | | | |", flush=True)
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"| {n:,} | {table} | {r['cpu']:.2f} | {r['wall']:.1f} | {r['peak_mb']:.0f} | {r['rows']} |", flush=True)


if __name__ == "__main__":
    main()
