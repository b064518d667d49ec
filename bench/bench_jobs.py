"""`tracedb ingest --jobs 2` against `--jobs 1` on 24 runs (issue 12 item 5).

    python bench/bench_jobs.py [--runs 24] [--repeat 3] [--jobs 2] [--runs-dir DIR]

Builds --runs run folders from the shipped real traces (tests/data: Kineto H200, TF
StepStats with GPU streams, MegEngine, XSpace, TF RunMetadata text, in turn; one trace
and a run.json each), then times the whole `tracedb ingest` command, as a user runs it
(fresh process, fresh warehouse, so start-up and the worker pool's start are counted),
with --jobs 1 and --jobs N interleaved --repeat times, and prints each round's ratio and
the median. The machine may be shared: only the interleaved ratios mean anything.
--runs-dir DIR ingests an existing runs folder instead, e.g. 24 fleet runs
(`bench/build_fleet.py OUT --runs 24 --kernels 3000`, then --runs-dir OUT/traces).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
TRACES = [
    DATA / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz",
    DATA / "tf_stepstats_gpu_streams" / "001_5e9237699abafb68.txt",
    DATA / "megengine_graph_profile" / "004_825e28a4f520ddc2.txt",
    DATA / "xspace_jax_h200" / "jax_h200.xplane.pb",
    DATA / "tf_runmetadata_text" / "000_6b18107121892edf.txt",
]


def build(out: Path, runs: int) -> Path:
    for i in range(runs):
        src = TRACES[i % len(TRACES)]
        run = out / f"run{i:03d}"
        run.mkdir(parents=True)
        shutil.copy(src, run / src.name)
        (run / "run.json").write_text(json.dumps({"model": f"m{i % 3}", "commit": f"c{i}"}))
    return out


def ingest(runs: Path, wh: Path, jobs: int, env: dict) -> float:
    shutil.rmtree(wh, ignore_errors=True)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tracedb.cli", "ingest", str(runs), "--warehouse", str(wh),
                    "--jobs", str(jobs), "--quiet"], env=env, check=True, cwd=ROOT)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--runs-dir", type=Path, help="ingest this runs folder instead of building one")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    tmp = Path(tempfile.mkdtemp(prefix="tracedb-jobs-"))
    try:
        runs = args.runs_dir.resolve() if args.runs_dir else build(tmp / "runs", args.runs)
        mb = sum(f.stat().st_size for f in runs.rglob("*") if f.is_file()) / 1e6
        n = sum(1 for d in runs.iterdir() if d.is_dir())
        print(f"{n} runs in {runs}, {mb:.1f} MB of traces; {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f} at start")
        print(f"{'round':>5} {'--jobs 1 s':>10} {f'--jobs {args.jobs} s':>10} {'ratio':>6}")
        ratios, one, many = [], [], []
        for r in range(args.repeat):
            # alternate which goes first, so a load swing hurts both alike
            order = (1, args.jobs) if r % 2 == 0 else (args.jobs, 1)
            t = {j: ingest(runs, tmp / f"wh{j}", j, env) for j in order}
            ratios.append(t[1] / t[args.jobs])
            one.append(t[1])
            many.append(t[args.jobs])
            print(f"{r + 1:5d} {t[1]:10.2f} {t[args.jobs]:10.2f} {ratios[-1]:6.2f}")
        print(f"median ratio --jobs 1 / --jobs {args.jobs}: {statistics.median(ratios):.2f}x "
              f"(best times: {min(one):.2f} s / {min(many):.2f} s = {min(one) / min(many):.2f}x); "
              f"load average {os.getloadavg()[0]:.1f} at end")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
