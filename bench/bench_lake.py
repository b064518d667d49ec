"""Ingest of many small runs into the Delta Lake store vs the schema-1 store, same machine.

    python bench/bench_lake.py [--runs 1000] [--repeat 2] [--baseline-ref 68d64c3]

The baseline is tracedb as it was before the lake (schema 1: staging + a DuckDB
transaction per group of runs, views listing every file), checked out from this repo's
history into a temporary git worktree; both are run as `tracedb ingest RUNS -q` in fresh
subprocesses, interleaved, best of --repeat. Each run is one real node/shape dump (178
nodes on two devices: two parquet files a run). Also times a one-run query on the
resulting warehouses and `tracedb optimize` + `vacuum` on the lake.

Goal (issue 9): the lake's ingest of 1,000 small runs no slower than schema 1 by > 25%.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "tests" / "data" / "node_shape_dump" / "002_11cf062b29f34b60.txt"


def make_runs(folder: Path, n: int) -> None:
    for i in range(n):
        run = folder / f"run{i:05d}"
        run.mkdir(parents=True)
        shutil.copy(TRACE, run / TRACE.name)


def timed(cmd: list[str], cwd: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    t = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--baseline-ref", default="68d64c3", help="git ref of the schema-1 tracedb")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_lake_"))
    try:
        old_tree = tmp / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(old_tree), args.baseline_ref],
                       check=True)
        runs = tmp / "runs"
        make_runs(runs, args.runs)
        py = [sys.executable, "-m", "tracedb.cli"]
        best = {"lake": float("inf"), "schema1": float("inf")}
        for rep in range(args.repeat):
            for name, tree in (("schema1", old_tree), ("lake", ROOT)):
                wh = tmp / f"wh_{name}_{rep}"
                # --jobs 1 on both sides: the lake's CLI defaults to one worker per core
                t = timed(py + ["ingest", str(runs), "-w", str(wh), "-q", "--jobs", "1"], tree)
                best[name] = min(best[name], t)
                print(f"  {name:8s} ingest of {args.runs} runs: {t:6.1f}s", flush=True)
        q = "select count(*) from nodes where run_id = 'run00007'"
        for name, tree in (("schema1", old_tree), ("lake", ROOT)):
            wh = tmp / f"wh_{name}_0"
            t = min(_query_time(py, tree, wh, q) for _ in range(3))
            print(f"  {name:8s} one-run query (CLI, incl. start-up): {t * 1000:6.0f} ms")
        t = timed(py + ["optimize", "-w", str(tmp / "wh_lake_0")], ROOT)
        t2 = timed(py + ["vacuum", "--retention-hours", "0", "-w", str(tmp / "wh_lake_0")], ROOT)
        print(f"  lake optimize {t:.1f}s, vacuum {t2:.1f}s")
        ratio = best["lake"] / best["schema1"]
        print(f"ingest {args.runs} small runs: lake {best['lake']:.1f}s vs schema 1 {best['schema1']:.1f}s "
              f"= {ratio:.2f}x ({'within' if ratio <= 1.25 else 'OVER'} the 1.25x budget)")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / "baseline")],
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)


def _query_time(py: list[str], tree: Path, wh: Path, sql: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t = time.perf_counter()
    subprocess.run(py + ["query", "-", "-w", str(wh)], cwd=tree, env=env, input=sql, text=True, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
