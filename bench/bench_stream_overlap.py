"""stream_overlap on one GPU stream of n kernels: CPU and peak memory, by SQL text.

    python bench/bench_stream_overlap.py [--n 1000000 3000000 10000000] [--mode sql|writer]
                                         [--memory 64MB] [--forms before declaration streamed]

One run, one device, one stream of n kernels, 10 us apart, 4 us (i even) or 12 us (i odd)
long (the layout of bench/RESULTS.md sessions 14-15), written once as Parquet in a
temporary folder. Each figure is a fresh process (peak RSS: its VmHWM; CPU: its own).
`--mode sql`: the text alone on a view of the file, DuckDB with `threads = 1`, the memory
limit and a spill folder (as session 14 measured it). `--mode writer`: the rollup as the
ingest computes it (`rollups.Writer.write_runs`, the rows of all activity and of the
kernel kind, so 2 n rows) with ROLLUP_MEMORY set to `--memory`. Forms: `before`, the
metric before session 15 (tests/data/sql_before_overlap15); `declaration`, the metric's
file; `streamed`, its `-- rollup-sql:` text (what the ingest runs).
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
from tracedb import rollups as R, sqllib

mode, form, path, n, memory = sys.argv[1:6]
before = sqllib.parse((Path(sys.argv[6]) / "tests/data/sql_before_overlap15/stream_overlap.sql").read_text(), "x").sql
cq = R.metrics()["rollup_stream_overlap"]
text = {"before": before, "declaration": cq.sql, "streamed": cq.rollup_sql}[form]
r0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.time()
try:
    if mode == "sql":
        con = duckdb.connect()
        con.execute(f"SET enable_progress_bar = false; SET threads = 1; SET memory_limit = '{memory}'; SET temp_directory = '{tempfile.mkdtemp()}'")
        con.execute(f"CREATE VIEW kernels AS SELECT * FROM read_parquet('{path}/kernels/part-0.parquet')")
        used = sqllib.bound_names(text)
        rows = con.execute(text, {k: None for k in ("run_id", "device", "kind", "step_from", "step_to") if k in used}).fetchall()
        got = [list(map(str, r)) for r in rows]
    else:
        R.ROLLUP_MEMORY, R.TABLE_ROWS = memory, 10_000
        cq.rollup_sql = text
        w = R.Writer()
        try:
            [f] = w.write_runs(path, [("r", "i1", ["kernels/part-0.parquet"])], tables=["rollup_stream_overlap"], rows=int(n))
        finally:
            w.close()
        got = duckdb.sql(f"SELECT kind, busy_ns FROM read_parquet('{path}/{f.rel}') ORDER BY 1 NULLS FIRST").fetchall()
        import shutil; shutil.rmtree(Path(path) / f.rel.split('/')[0])
except Exception as e:
    got = str(e).splitlines()[0][:100]
r1 = resource.getrusage(resource.RUSAGE_SELF)
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"cpu": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, "wall": time.time() - t0,
                  "peak_mb": peak / 1024, "rows": got}))
"""


def one_stream(folder: Path, n: int) -> None:
    import duckdb

    from tracedb import rollups, schema

    given = {"run_id": "'r'", "device": "'GPU:0'", "rank": "0", "step": "0", "stream": "7", "kind": "'kernel'",
             "start_ns": "10000 * i", "duration_ns": "CASE WHEN i % 2 = 0 THEN 4000 ELSE 12000 END", "name": "'k'"}
    sel = [f"CAST({given.get(c, 'NULL')} AS {schema.duckdb_type(schema.TABLES['kernels'].field(c).type)}) AS {c}"
           for c in rollups.WHOLE_SOURCES["kernels"]]
    (folder / "kernels").mkdir(parents=True)
    with duckdb.connect() as con:
        con.execute(f"COPY (SELECT {', '.join(sel)}, 'i1' AS ingest_id FROM range({n}) t(i)) "
                    f"TO '{folder / 'kernels' / 'part-0.parquet'}' (FORMAT parquet)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[1_000_000, 3_000_000, 10_000_000])
    ap.add_argument("--mode", choices=["sql", "writer"], default="sql")
    ap.add_argument("--memory", default="64MB")
    ap.add_argument("--forms", nargs="+", default=["before", "declaration", "streamed"])
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    print(f"| n | form | CPU s | wall s | peak MB | rows ({args.mode}, {args.memory}) |\n|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.n:
            folder = Path(tmp) / str(n)
            one_stream(folder, n)
            for form in args.forms:
                out = subprocess.run([sys.executable, "-c", _CHILD, args.mode, form, str(folder), str(n), args.memory, str(ROOT)],
                                     capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
                if out.returncode:
                    print(f"| {n:,} | {form} | failed: {out.stderr.strip().splitlines()[-1][:100]} | | | |", flush=True)
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"| {n:,} | {form} | {r['cpu']:.2f} | {r['wall']:.1f} | {r['peak_mb']:.0f} | {r['rows']} |", flush=True)


if __name__ == "__main__":
    main()
