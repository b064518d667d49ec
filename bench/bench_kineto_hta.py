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
"""

from __future__ import annotations

import argparse
import gzip
import os
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


def timed(cmd: list[str], env: dict | None = None) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                   cwd=ROOT)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, help="keep the job here (default: a temporary folder)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tracedb-kineto-hta-"))
    job = args.out or tmp / "job"
    size = build_job(job, args.ranks)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    py = sys.executable
    print(f"{args.ranks}-rank Kineto job, {size / 1e6:.1f} MB of JSON; {os.cpu_count()} cores, "
          f"tracedb --jobs {args.jobs}, HTA's pool {min(os.cpu_count() or 1, args.ranks)} processes; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'round':>5} {'HTA s':>8} {'ingest s':>9} {'+query s':>9} {'HTA/ingest':>11} {'HTA/(ingest+query)':>19}")
    ratios, ratios_q = [], []
    for n in range(args.repeat):
        h = timed([py, "-c", HTA, str(job)], env)
        wh = tmp / f"wh{n}"
        i = timed([py, "-m", "tracedb.cli", "ingest", str(job), "-w", str(wh), "--run-id", "job",
                   "--jobs", str(args.jobs), "-q"], env)
        q = timed([py, "-m", "tracedb.cli", "query", "kernel_type_breakdown", "-w", str(wh),
                   "--format", "csv"], env)
        shutil.rmtree(wh)
        ratios.append(h / i)
        ratios_q.append(h / (i + q))
        print(f"{n + 1:>5} {h:8.2f} {i:9.2f} {i + q:9.2f} {h / i:11.2f} {h / (i + q):19.2f}")
    print(f"median HTA / tracedb ingest: {statistics.median(ratios):.2f}x "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}); with the query: {statistics.median(ratios_q):.2f}x; "
          f"load average after {os.getloadavg()[0]:.1f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
