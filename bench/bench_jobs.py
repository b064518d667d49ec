"""`tracedb ingest --jobs 2` against `--jobs 1` on 24 runs (issue 12 item 5).

    python bench/bench_jobs.py [--runs 24] [--repeat 3] [--jobs 2] [--runs-dir DIR] [--base DIR] [--phases [N]]

Builds --runs run folders from the shipped real traces (tests/data: Kineto H200, TF
StepStats with GPU streams, MegEngine, XSpace, TF RunMetadata text, in turn; one trace
and a run.json each), then times the whole `tracedb ingest` command, as a user runs it
(fresh process, fresh warehouse, so start-up and the worker pool's start are counted),
with --jobs 1 and --jobs N interleaved --repeat times, and prints each round's ratio and
the median. The machine may be shared: only the interleaved ratios mean anything.
--runs-dir DIR ingests an existing runs folder instead, e.g. 24 fleet runs
(`bench/build_fleet.py OUT --runs 24 --kernels 3000`, then --runs-dir OUT/traces).
--base DIR times another checkout's four commands in the same rounds (before/after).
One untimed warm-up round first; bytecode is cached privately (see `bench_env`).

--phases [N] also runs each side N times more (default once) with TRACEDB_TIMING
(tracedb.timing) and prints where the time went, measured inside the processes rather
than as a ratio of two loaded runs: start-up until discovery begins (interpreter,
imports), each phase of the caller (wall and CPU seconds), how long the workers were
busy, and the serial tail after the last read (commit, snapshot, pool shutdown, exit).
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


def ingest(runs: Path, wh: Path, jobs: int, env: dict, root: Path = ROOT) -> float:
    """One whole `tracedb ingest` of the checkout at `root` (this one, or --base)."""
    shutil.rmtree(wh, ignore_errors=True)
    env = {**env, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tracedb.cli", "ingest", str(runs), "--warehouse", str(wh),
                    "--jobs", str(jobs), "--quiet"], env=env, check=True, cwd=root)
    return time.perf_counter() - t


def bench_env(tmp: Path) -> dict:
    """The processes' environment: with PYTHONDONTWRITEBYTECODE set (as on the bench
    machine), every process would compile tracedb from source (~40 ms each for the caller
    and the forkserver) where an installed tracedb has its bytecode: compile once into a
    private PYTHONPYCACHEPREFIX instead (the warm-up round)."""
    env = dict(os.environ)
    if env.get("PYTHONDONTWRITEBYTECODE") and not env.get("PYTHONPYCACHEPREFIX"):
        env.pop("PYTHONDONTWRITEBYTECODE")
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    return env


def tree_cpu(fn, *args) -> tuple[object, float]:
    """fn's result and the CPU seconds of every process of the ingest it runs: the caller,
    and the forkserver and workers it does not wait for (this process is their subreaper,
    `subreaper`: orphans are reaped and counted here)."""
    def cpu():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    before = cpu()
    out = fn(*args)
    while True:  # the forkserver, and any worker, exit once the caller is gone
        try:
            os.wait()
        except ChildProcessError:
            break
    return out, cpu() - before


def subreaper() -> None:
    """Orphaned descendants (the forkserver, its workers) become this process's children."""
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def phases(runs: Path, wh: Path, jobs: int, env: dict, log: Path, root: Path = ROOT) -> None:
    """One traced ingest: its timeline, from tracedb.timing's lines."""
    subreaper()
    log.unlink(missing_ok=True)
    shutil.rmtree(wh, ignore_errors=True)  # not counted: ingest() removes it again, at once
    launch = time.time()
    _, tree = tree_cpu(ingest, runs, wh, jobs, {**env, "TRACEDB_TIMING": str(log)}, root)
    end = time.time()
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
    print(f"    CPU seconds: all processes {tree:.2f}" +  # the caller's own figure holds the workers it forked
          (f", of which workers {sum(x['cpu'] for x in lives):.2f} (their tasks {sum(x['cpu'] for x in tasks):.2f})"
           if lives else ""))
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
    ap.add_argument("--phases", type=int, nargs="?", const=1, default=0, metavar="N",
                    help="also trace N runs (default 1) of each side (TRACEDB_TIMING)")
    ap.add_argument("--base", type=Path, help="another checkout (e.g. `git worktree add /tmp/base main`): "
                    "its --jobs 1 and --jobs N are timed in the same rounds, interleaved")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tracedb-jobs-"))
    env = bench_env(tmp)
    sides = {"now": ROOT, **({"base": args.base.resolve()} if args.base else {})}
    try:
        runs = args.runs_dir.resolve() if args.runs_dir else build(tmp / "runs", args.runs)
        mb = sum(f.stat().st_size for f in runs.rglob("*") if f.is_file()) / 1e6
        n = sum(1 for d in runs.iterdir() if d.is_dir())
        print(f"{n} runs in {runs}, {mb:.1f} MB of traces; {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f} at start, {time.strftime('%H:%M UTC', time.gmtime())}")
        for root in sides.values():  # warm-up, untimed: bytecode compiled, files in the page cache
            for j in (1, args.jobs):
                ingest(runs, tmp / "wh", j, env, root)
        print(f"{'round':>5} " + " ".join(f"{k + ' -j1 s':>11} {k + f' -j{args.jobs} s':>11} {'ratio':>6}" for k in sides))
        times = {(k, j): [] for k in sides for j in (1, args.jobs)}
        for r in range(args.repeat):
            # alternate the order, so a load swing hurts every side alike
            order = list(times)
            if r % 2:
                order.reverse()
            for k, j in order:
                times[(k, j)].append(ingest(runs, tmp / "wh", j, env, sides[k]))
            print(f"{r + 1:5d} " + " ".join(f"{times[(k, 1)][-1]:11.2f} {times[(k, args.jobs)][-1]:11.2f} "
                                            f"{times[(k, 1)][-1] / times[(k, args.jobs)][-1]:6.2f}" for k in sides))
        for k in sides:
            one, many = times[(k, 1)], times[(k, args.jobs)]
            ratios = [a / b for a, b in zip(one, many)]
            print(f"{k}: median ratio --jobs 1 / --jobs {args.jobs}: {statistics.median(ratios):.2f}x "
                  f"(medians {statistics.median(one):.2f} s / {statistics.median(many):.2f} s; best times: "
                  f"{min(one):.2f} s / {min(many):.2f} s = {min(one) / min(many):.2f}x)")
        print(f"load average {os.getloadavg()[0]:.1f} at end, {time.strftime('%H:%M UTC', time.gmtime())}")
        for r in range(args.phases):
            for k, root in sides.items():
                for j in (1, args.jobs):
                    print(f"{k}, round {r + 1}: ", end="")
                    phases(runs, tmp / f"wh{j}", j, env, tmp / f"timing{j}.jsonl", root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
