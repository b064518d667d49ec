"""Issue 28 item 13: the rollups of a big run fit a bounded memory, with the same rows.

The ingest computes each run's rollups (`tracedb.rollups.Writer`) in DuckDB; unbounded,
the whole ingest grew ~590 B an event (bench/RESULTS.md, session 12): DuckDB's default
memory limit is 80% of RAM, the run's rows were copied into it (once more a kind), a
`WITH` read twice was held whole, and `rollup_kernel_launches` (a row a launch) was
fetched whole as Python rows. Now DuckDB works within `ROLLUP_MEMORY` and spills to a
folder of its own, a big run's files are read where they lie, and the rows are handed
on a chunk at a time.

Not timed: a run's source files of `n` launches (a cudaLaunchKernel call, its kernel on
one of two overlapping streams, a node), written straight as Parquet (no reader), the
two rollups that grew most (stream_overlap, kernel_launches) computed in a fresh
process that reports its peak RSS (VmHWM), the caps lowered so that the larger run
meets them as a multi-million event trace meets the shipped ones: ROLLUP_MEMORY 64 MB,
TABLE_ROWS 10,000, FETCH_ROWS 1,024, CHUNK_ROWS 8,192. The rows, spilled or not, are
checked against figures worked out from the layout (no tracedb code).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
SMALL, LARGE = 20_000, 150_000  # launches
# Bytes of peak RSS per extra launch (kernel + call + node): measured ~470 (208.8 / 269.4
# MB at 20 k / 150 k launches: DuckDB reaches its cap between them); before session 13
# (copies of the rows, DuckDB unbounded, the launches fetched whole) ~1,700 (241 / 456 MB).
BOUND = 1_000

_CHILD = r"""
import json, sys
from pathlib import Path
import duckdb
import tracedb.rollups as R

n, wh = int(sys.argv[1]), Path(sys.argv[2])  # the files: `_files`
TABLES = ["rollup_stream_overlap", "rollup_kernel_launches"]  # the two whose memory grew most
R.ROLLUP_MEMORY, R.TABLE_ROWS, R.FETCH_ROWS, R.CHUNK_ROWS = "64MB", 10_000, 1024, 8192
files = [f"{t}/part-0.parquet" for t in ("kernels", "runtime_calls", "nodes")]
con = duckdb.connect()
w = R.Writer()
try:
    out = w.write_runs(wh, [("r", "i1", files)], tables=TABLES, rows=3 * n)
    peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
finally:
    w.close()
rows = {}
for f in out:
    rel = f"read_parquet('{wh / f.rel}')"
    if f.table == "rollup_kernel_launches":
        rows["launches"] = con.sql(f"SELECT count(*), sum(launch_delay_ns), sum(gpu_duration_ns) FROM {rel}").fetchall()[0]
    if f.table == "rollup_stream_overlap":
        rows["overlap"] = con.sql(f"SELECT kind, streams, busy_ns, overlap_ns, max_active_streams FROM {rel} "
                                  "ORDER BY kind NULLS FIRST").fetchall()
spill = w.spill.exists()
print(json.dumps({"peak_kb": peak, "rows": rows, "spill_left": spill}))
"""


def _files(wh: Path, n: int) -> Path:
    """A run's source files of `n` launches (run "r", ingest "i1"): launch i's call at
    10 us * i (2 us), its kernel 3 us later on stream 7 (i even, 4 us) or 8 (i odd,
    12 us), a node around the call."""
    import duckdb

    from tracedb import rollups, schema

    given = {
        "kernels": {"stream": "7 + i % 2", "kind": "'kernel'", "name": "'k' || (i % 5)",
                    "start_ns": "10000 * i + 3000", "duration_ns": "CASE WHEN i % 2 = 0 THEN 4000 ELSE 12000 END",
                    "correlation_id": "i"},
        "runtime_calls": {"name": "'cudaLaunchKernel'", "start_ns": "10000 * i", "duration_ns": "2000",
                          "correlation_id": "i"},
        "nodes": {"start_ns": "10000 * i", "duration_ns": "2500"},
    }
    common = {"run_id": "'r'", "device": "'GPU:0'", "rank": "0", "step": "0", "source_file": "'trace.json'"}
    with duckdb.connect() as con:
        for table, cols in given.items():
            sel = [f"CAST({cols.get(c, common.get(c, 'NULL'))} AS "
                   f"{schema.duckdb_type(schema.TABLES[table].field(c).type)}) AS {c}" for c in rollups.WHOLE_SOURCES[table]]
            (wh / table).mkdir(parents=True)
            con.execute(f"COPY (SELECT {', '.join(sel)}, 'i1' AS ingest_id FROM range({n}) t(i)) "
                        f"TO '{wh / table / 'part-0.parquet'}' (FORMAT parquet)")
    return wh


def _roll(wh: Path, n: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(n), str(wh)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-1500:]
    return json.loads(out.stdout)


def test_rollups_of_a_big_run_fit_a_bounded_memory_with_the_same_rows(tmp_path):
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc (VmHWM)")
    runs = {n: _files(tmp_path / str(n), n) for n in (SMALL, LARGE)}
    small, large = _roll(runs[SMALL], SMALL), _roll(runs[LARGE], LARGE)
    for n, got in ((SMALL, small), (LARGE, large)):
        # Worked out from the layout: stream 7 busy 4 us of each 20 us, stream 8 12 us, from
        # 13 us (odd i) to 25 us, so it overlaps the next even kernel (from 23 us) by 2 us;
        # busy time is the union: each pair of launches (20 us) is busy 4 + 12 - 2 = 14 us
        # minus the last odd kernel's overlap with a kernel that does not exist.
        pairs = n // 2
        busy = (4000 + 12000) * pairs - 2000 * (pairs - 1)
        # (all activity, kind NULL, and kernels: the same)
        assert got["rows"]["overlap"] == [[kind, 2, busy, 2000 * (pairs - 1), 2] for kind in (None, "kernel")]
        # every launch: its delay is the kernel's start less the call's end (1 us)
        assert got["rows"]["launches"] == [n, 1000 * n, (4000 + 12000) * pairs]
        assert not got["spill_left"]  # the spill folder is removed at close
    per_launch = (large["peak_kb"] - small["peak_kb"]) * 1024 / (LARGE - SMALL)
    print(f"{per_launch:.0f} B of peak RSS per extra launch ({small['peak_kb']} / {large['peak_kb']} kB)")
    assert per_launch < BOUND, f"{per_launch:.0f} B of peak RSS per extra launch"
