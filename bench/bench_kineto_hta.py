"""One 8-rank PyTorch (Kineto) job: whole `tracedb ingest` against Holistic Trace Analysis.

    python bench/bench_kineto_hta.py [--repeat 5] [--ranks 8] [--jobs N] [--out DIR]

Builds the job from the H200 fixture (tests/data/kineto_h200_fp32): one plain-JSON file
per rank (`rank-<r>.json`, 4.1 MB each, 32.7 MB for 8 ranks), the fixture's text
unchanged but for a `distributedInfo` key naming the rank, as `torch.profiler` writes
one file per rank of a distributed job. Then, each in a fresh process as a user runs
it, interleaved round by round:

  hta      `TraceAnalysis(trace_dir=JOB).get_gpu_kernel_breakdown(visualize=False)`:
           HTA's loader (it parses the ranks in a fork pool of min(cores, ranks)
           processes) and its kernel breakdown
  tracedb  `tracedb ingest JOB --run-id job --jobs N -q` into a fresh warehouse
           (N defaults to the number of cores, as HTA's pool; the CLI's default too),
           then the `kernel_type_breakdown` canned query on it (the same breakdown)

and prints each round's seconds and the ratio HTA / tracedb (> 1: tracedb faster), with
the median ratio, the machine's core count and its load average before and after.

`--existing` also times the ingest into a warehouse that holds the job already (ingested
once before the rounds; each round adds the job as one more run): a nightly job's case,
where the lake's tables exist and the opener only reads them.

`--serial` runs both in one process (HTA's `parse_traces(use_multiprocessing=False)`,
`tracedb ingest --jobs 1`) and also prints their CPU seconds (user + system, from the
children's rusage): on a shared machine CPU time is steadier than wall time. (With
workers, tracedb's are children of its forkserver, which is not waited for, so their CPU
time would not be counted: the parallel rounds report wall time only.)

Bytecode: HTA runs from its installed package, whose modules pip compiled at install;
tracedb runs from a source tree, and this sandbox sets PYTHONDONTWRITEBYTECODE=1, so
without bytecode every tracedb process would compile its ~40 modules again (~80 ms of
CPU: a 1-rank ingest 1.14 against 1.05 s). The bench compiles the tree(s) it times
first (`compileall`, as pip does; `__pycache__` is git-ignored); `--no-compile` times
them as they are.
"""

from __future__ import annotations

import argparse
import compileall
import gzip
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
FIXTURE = ROOT / "tests" / "data" / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"

HTA = """
import logging, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
if sys.argv[2] == "serial":
    from hta.common.trace import Trace
    parse = Trace.parse_traces
    Trace.parse_traces = lambda self, max_ranks=-1, use_multiprocessing=True, use_memory_profiling=True: parse(
        self, max_ranks, False, use_memory_profiling)
a = TraceAnalysis(trace_dir=sys.argv[1])
a.get_gpu_kernel_breakdown(visualize=False)
"""


def build_job(out: Path, ranks: int) -> int:
    """rank-<r>.json for r < ranks; returns the job's bytes."""
    text = gzip.open(FIXTURE).read().decode()
    assert text.startswith("{") and '"distributedInfo"' not in text
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for r in range(ranks):
        info = f'"distributedInfo": {{"backend": "nccl", "rank": {r}, "world_size": {ranks}}}, '
        data = ("{" + info + text[1:]).encode()
        (out / f"rank-{r}.json").write_bytes(data)
        total += len(data)
    return total


def timed(cmd: list[str], env: dict | None = None, cwd: Path = ROOT) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the waited-for processes) of a command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                   cwd=cwd)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, help="keep the job here (default: a temporary folder)")
    ap.add_argument("--serial", action="store_true", help="both sides in one process; CPU seconds too")
    ap.add_argument("--existing", action="store_true",
                    help="also time the ingest into a warehouse that holds the job already (a new run each round)")
    ap.add_argument("--before", type=Path, metavar="TREE",
                    help="also time the ingest of another tracedb source tree (e.g. `git archive` of an "
                         "older commit), interleaved, to show the change under the same load")
    ap.add_argument("--no-compile", action="store_true",
                    help="do not byte-compile the tracedb tree(s) first (see the docstring)")
    args = ap.parse_args()
    if not args.no_compile:
        for tree in [ROOT] + ([args.before] if args.before else []):
            compileall.compile_dir(tree / "tracedb", quiet=1)
    jobs = 1 if args.serial else args.jobs
    tmp = Path(tempfile.mkdtemp(prefix="tracedb-kineto-hta-"))
    job = args.out or tmp / "job"
    size = build_job(job, args.ranks)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    py = sys.executable
    hta_procs = 1 if args.serial else min(os.cpu_count() or 1, args.ranks)
    print(f"{args.ranks}-rank Kineto job, {size / 1e6:.1f} MB of JSON; {os.cpu_count()} cores, "
          f"tracedb --jobs {jobs}, HTA {hta_procs} process(es) parsing; load average {os.getloadavg()[0]:.1f}")
    print(f"{'round':>5} {'HTA s':>8} {'ingest s':>9} {'+query s':>9} {'HTA/ingest':>11} {'HTA/(ingest+query)':>19}"
          + (f" {'HTA cpu s':>10} {'ingest cpu s':>13} {'cpu ratio':>10}" if args.serial else ""))
    ratios, ratios_q, ratios_cpu = [], [], []
    befores: list[tuple[float, float, float, float]] = []
    existing: list[tuple[float, float, float, float]] = []  # (HTA wall, HTA CPU, ingest wall, ingest CPU)
    if args.existing:
        timed([py, "-m", "tracedb.cli", "ingest", str(job), "-w", str(tmp / "existing"), "--run-id", "seed",
               "--jobs", str(jobs), "-q"], env)
    for n in range(args.repeat):
        h, h_cpu = timed([py, "-c", HTA, str(job), "serial" if args.serial else "pool"], env)
        wh = tmp / f"wh{n}"
        i, i_cpu = timed([py, "-m", "tracedb.cli", "ingest", str(job), "-w", str(wh), "--run-id", "job",
                          "--jobs", str(jobs), "-q"], env)
        q, _ = timed([py, "-m", "tracedb.cli", "query", "kernel_type_breakdown", "-w", str(wh),
                      "--format", "csv"], env)
        shutil.rmtree(wh)
        if args.before:
            b_env = {**os.environ, "PYTHONPATH": str(args.before)}
            b, b_cpu = timed([py, "-m", "tracedb.cli", "ingest", str(job), "-w", str(tmp / f"before{n}"),
                              "--run-id", "job", "--jobs", str(jobs), "-q"], b_env, cwd=args.before)
            shutil.rmtree(tmp / f"before{n}")
            befores.append((b, b_cpu, i, i_cpu))
        if args.existing:
            e, e_cpu = timed([py, "-m", "tracedb.cli", "ingest", str(job), "-w", str(tmp / "existing"),
                              "--run-id", f"job{n}", "--jobs", str(jobs), "-q"], env)
            existing.append((h, h_cpu, e, e_cpu))
        ratios.append(h / i)
        ratios_q.append(h / (i + q))
        ratios_cpu.append(h_cpu / i_cpu)
        print(f"{n + 1:>5} {h:8.2f} {i:9.2f} {i + q:9.2f} {h / i:11.2f} {h / (i + q):19.2f}"
              + (f" {h_cpu:10.2f} {i_cpu:13.2f} {h_cpu / i_cpu:10.2f}" if args.serial else ""))
    print(f"median HTA / tracedb ingest: {statistics.median(ratios):.2f}x "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}); with the query: {statistics.median(ratios_q):.2f}x"
          + (f"; CPU: {statistics.median(ratios_cpu):.2f}x" if args.serial else "")
          + f"; load average after {os.getloadavg()[0]:.1f}")
    if existing:
        print("into an existing warehouse, same rounds: ingest s " + " ".join(f"{e:.2f}" for _, _, e, _ in existing)
              + f"; median HTA / tracedb ingest: {statistics.median(h / e for h, _, e, _ in existing):.2f}x"
              + (f" (CPU {statistics.median(hc / ec for _, hc, _, ec in existing):.2f}x)" if args.serial else ""))
    if befores:
        print(f"before ({args.before}), same rounds: ingest s " + " ".join(f"{b:.2f}" for b, *_ in befores)
              + f"; median before / now: {statistics.median(b / i for b, _, i, _ in befores):.2f}x"
              + (f" (CPU {statistics.median(bc / ic for _, bc, _, ic in befores):.2f}x)" if args.serial else ""))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
