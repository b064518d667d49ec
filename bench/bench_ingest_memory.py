"""Peak RSS of the whole `tracedb ingest` of a big synthetic Kineto trace, phase by phase.

    nice python bench/bench_ingest_memory.py --events 1000000 [--src DIR] [--trace PATH] [--rows OUT.json]

Writes `tests/bigtrace.kineto_tiny` (op, launch call, kernel; the kernels at the end) of
about --events events (kept with --trace, reused if there), then ingests it into a fresh
warehouse in a fresh process (`tracedb.ingest.ingest`, what `tracedb ingest --jobs 1`
runs) importing tracedb from --src (default: this tree; a `git archive` of another
commit to compare). The child samples its RSS every 20 ms and reports, with
TRACEDB_TIMING's phases (its process set up as `tracedb ingest`'s: `cli.own_ingest_process`), the RSS at the start and the peak of each phase, its VmHWM, its CPU and wall seconds and
every rollup table's rows (sorted; --rows writes them, to compare two trees' rows).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

_CHILD = r"""
import json, os, sys, tempfile, threading, time
from pathlib import Path
samples = []
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
def sample():
    while True:
        samples.append((time.time(), rss()))
        time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
phases = Path(tempfile.mkdtemp()) / "phases.jsonl"
os.environ["TRACEDB_TIMING"] = str(phases)
from tracedb import cli, process
getattr(cli, "own_ingest_process", process.own)()  # as `tracedb ingest` sets its process up (its allocator)
from tracedb.ingest import ingest
import pyarrow
pool = pyarrow.default_memory_pool().backend_name
wh = Path(tempfile.mkdtemp()) / "wh"
t0, c0 = time.time(), time.process_time()
s = ingest([Path(sys.argv[1])], wh, run_id="bench")
wall, cpu = time.time() - t0, time.process_time() - c0
assert s.ok, s.errors
peak = next(int(l.split()[1]) // 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
by_phase = {}
for p in map(json.loads, open(phases)):
    inside = [m for t, m in samples if p["start"] <= t <= p["end"]]
    before = [m for t, m in samples if t <= p["start"]]
    if inside:
        by_phase[p["phase"]] = (before[-1] if before else None, max(by_phase.get(p["phase"], (0, 0))[1], max(inside)))
import duckdb
con = duckdb.connect()
rows = {}
for folder in sorted(wh.glob("rollup_*")):
    files = sorted(str(f) for f in folder.rglob("*.parquet"))
    if files:
        r = con.sql(f"SELECT * EXCLUDE (ingest_id) FROM read_parquet({files}, union_by_name = true)").fetchall()
        rows[folder.name] = sorted(map(repr, r))
import shutil
shutil.rmtree(wh.parent, ignore_errors=True)
shutil.rmtree(phases.parent, ignore_errors=True)
print(json.dumps({"pool": pool, "peak_mb": peak, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                  "phases_mb": by_phase, "rows": dict(s.runs[0].rows), "rollups": rows}))
"""


def main() -> None:
    from bigtrace import kineto_tiny

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--src", type=Path, default=ROOT, help="the tracedb tree to import")
    ap.add_argument("--trace", type=Path, help="the trace file (written if missing, kept)")
    ap.add_argument("--rows", type=Path, help="write the rollup rows here (JSON)")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    path = args.trace or Path(tmp.name) / "trace.json"
    if not path.exists():
        kineto_tiny(path, args.events // 3)
    env = dict(os.environ, PYTHONPATH=str(args.src))
    # (in a folder of its own: `python -c` imports first from the working directory)
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, env=env,
                         cwd=tmp.name)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    res = json.loads(out.stdout.strip().splitlines()[-1])  # (the last line: a tree may print before it)
    if args.rows:
        args.rows.write_text(json.dumps(res["rollups"], indent=0))
    print(f"{args.events} events, src {args.src}, Arrow pool {res['pool']}: peak {res['peak_mb']} MB, wall {res['wall_s']} s, "
          f"cpu {res['cpu_s']} s; rows {res['rows']}")
    print("  RSS at the start of each phase, its peak (MB):", res["phases_mb"])
    print("  rollup rows:", {t: len(r) for t, r in res["rollups"].items()})
    tmp.cleanup()


if __name__ == "__main__":
    main()
