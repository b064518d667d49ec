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

--phases also runs each side once more with TRACEDB_TIMING (tracedb.timing) and prints
where the time went, measured inside the processes rather than as a ratio of two loaded
runs: start-up until discovery begins (interpreter, imports), each phase of the caller
(wall and CPU seconds), how long the workers were busy, and the serial tail after the
last read (commit, snapshot, pool shutdown, exit).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def caller_cpu(fn, *args) -> tuple[object, float]:
    """fn's result and the CPU seconds of the processes it waited for (the caller: not
    the forkserver and its workers, which the caller does not wait for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = fn(*args)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def phases(runs: Path, wh: Path, jobs: int, env: dict, log: Path) -> None:
    """One traced ingest: its timeline, from tracedb.timing's lines."""
    log.unlink(missing_ok=True)
    shutil.rmtree(wh, ignore_errors=True)  # not counted: ingest() removes it again, at once
    launch = time.time()
    _, cpu = caller_cpu(ingest, runs, wh, jobs, {**env, "TRACEDB_TIMING": str(log)})
    end = time.time()
    time.sleep(1)  # the workers' own exit lines
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    caller = next(x["pid"] for x in lines if x["phase"] == "discover")
    lives = [x for x in lines if x["phase"] == "worker"]
    tasks = [x for x in lines if x["pid"] != caller and x["phase"] != "worker"]
    own = [x for x in lines if x["pid"] == caller]
    first = min((x["start"] for x in tasks), default=None)
    last = max((x["end"] for x in tasks), default=None)
    print(f"--jobs {jobs}: {end - launch:.2f} s wall; start-up (interpreter, imports) until discovery "
          f"{own[0]['start'] - launch:.2f} s" + (f"; first read at {first - launch:.2f} s, last read done at "
                                               f"{last - launch:.2f} s, then {end - last:.2f} s to exit" if tasks else ""))
    print(f"    CPU seconds: caller {cpu:.2f}" + (f", workers {sum(x['cpu'] for x in lives):.2f} "
                                                  f"(their tasks {sum(x['cpu'] for x in tasks):.2f}), plus the "
                                                  "forkserver's imports" if lives else ""))
    totals: dict[str, list[float]] = {}
    for x in own:
        t = totals.setdefault(x["phase"], [0, 0.0, 0.0, None])
        t[0] += 1
        t[1] += x["end"] - x["start"]
        t[2] += x["cpu"]
        t[3] = x["start"] - launch if t[3] is None else t[3]
    for name, (n, wall, cpu, at) in totals.items():
        print(f"    caller {name:12} x{n:<4} from {at:6.2f} s  wall {wall:6.2f} s  cpu {cpu:6.2f} s")
    for pid in sorted({x["pid"] for x in tasks}):
        mine = [x for x in tasks if x["pid"] == pid]
        busy = sum(x["end"] - x["start"] for x in mine)
        print(f"    worker {pid}: {len(mine)} tasks, busy {busy:.2f} s (cpu {sum(x['cpu'] for x in mine):.2f} s) "
              f"from {min(x['start'] for x in mine) - launch:.2f} s to {max(x['end'] for x in mine) - launch:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--runs-dir", type=Path, help="ingest this runs folder instead of building one")
    ap.add_argument("--phases", action="store_true", help="also trace one run of each side (TRACEDB_TIMING)")
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
        if args.phases:
            for j in (1, args.jobs):
                phases(runs, tmp / f"wh{j}", j, env, tmp / f"timing{j}.jsonl")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
