"""What the ingest-time rollups (tracedb.rollups) cost an ingest, measured inside it.

    python bench/bench_rollups.py [--runs-dir DIR | --runs 24] [--repeat 3]

Ingests the runs into a fresh warehouse with `--jobs 1` (in this process, so every step
is on one clock) and times `rollups.Writer.write_runs`, the rollup step of each commit
group (reading the runs' new kernels files, one execution of each metric's SQL, writing
the rollup files); prints the whole ingest, the rollup part and its share, per round.
Default runs: the
shipped real traces (bench_jobs.py's 24 runs); --runs-dir an existing runs folder, e.g.
`bench/build_fleet.py OUT --runs 24 --kernels 3000`, then --runs-dir OUT/traces.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tracedb import rollups  # noqa: E402
from tracedb.ingest import ingest  # noqa: E402
from tracedb import process  # noqa: E402

process.own()  # read as `tracedb ingest` and its workers do: the GC paused and frozen around reads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-dir", type=Path, default=None)
    ap.add_argument("--runs", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tracedb-bench-rollups-"))
    try:
        if args.runs_dir is None:
            from bench_jobs import build

            runs_dir = build(tmp / "runs", args.runs)
        else:
            runs_dir = args.runs_dir
        spent = [0.0]
        inner = rollups.Writer.write_runs

        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t

        rollups.Writer.write_runs = timed
        print(f"runs: {runs_dir} ({sum(1 for p in runs_dir.iterdir() if p.is_dir())} run folders), --jobs 1")
        print("round  ingest s  rollups s  share")
        for i in range(args.repeat):
            wh = tmp / f"wh{i}"
            spent[0] = 0.0
            t = time.perf_counter()
            summary = ingest([runs_dir], wh, jobs=1)
            total = time.perf_counter() - t
            assert summary.ok, summary.errors
            print(f"{i + 1:>5}  {total:8.2f}  {spent[0]:9.2f}  {100 * spent[0] / total:4.1f}%")
            shutil.rmtree(wh)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
