"""A lake on object storage (moto's S3 server on 127.0.0.1) vs the same lake in a folder.

    python bench/bench_object_storage.py [--runs 50] [--writers 4] [--repeat 2]

Times, in this process, against the folder as the baseline: ingest of --runs small runs
(one node/shape dump each) by one `tracedb ingest` process, then by --writers processes
at once (each its share of the runs: the distributed-ingest recipe), a one-run canned
query from a fresh process (snapshot cached) and `tracedb vacuum`. Loopback S3 has no
network latency: the ratios show tracedb's own request count and the lease, not a real
region's round trips (~10-30 ms each on AWS).
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


def make_runs(folder: Path, n: int, shards: int) -> list[Path]:
    out = [folder / f"shard{s}" for s in range(shards)]
    for i in range(n):
        run = out[i % shards] / f"run{i:05d}"
        run.mkdir(parents=True)
        shutil.copy(TRACE, run / TRACE.name)
    return out


def s3_env(endpoint: str) -> dict:
    return {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint}


def run_all(cmds: list[list[str]], env: dict) -> float:
    t = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "tracedb.cli", *c], env=env, cwd=ROOT,
                              stdout=subprocess.DEVNULL) for c in cmds]
    if any(p.wait() for p in procs):
        raise SystemExit(f"failed: {cmds}")
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
    from s3server import moto_server  # the tests' loopback S3 server

    with moto_server() as endpoint:
        run(args, s3_env(endpoint))


def run(args: argparse.Namespace, s3env: dict) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-s3-"))
    env = {**os.environ, **s3env, "PYTHONPATH": str(ROOT), "TRACEDB_CACHE_DIR": str(tmp / "cache")}
    os.environ.update(s3env)
    from tracedb import storage

    storage.ObjectStorage("s3://bench").fs.call_s3("create_bucket", Bucket="bench")
    try:
        one = make_runs(tmp / "one", args.runs, 1)
        shards = make_runs(tmp / "many", args.runs, args.writers)
        results: dict[str, dict[str, float]] = {}
        for rep in range(args.repeat):
            for kind in ("folder", "s3"):
                wh = str(tmp / f"wh-{kind}-{rep}") if kind == "folder" else f"s3://bench/wh-{rep}"
                wh2 = wh + "-many"
                r = results.setdefault(kind, {})
                times = {
                    "ingest, 1 writer": run_all([["ingest", str(one[0]), "-w", wh, "-q", "--jobs", "1"]], env),
                    f"ingest, {args.writers} writers": run_all(
                        [["ingest", str(s), "-w", wh2, "-q", "--jobs", "1"] for s in shards], env),
                    "query (fresh process)": run_all(
                        [["query", "top_kernels", "-w", wh, "-p", "run_id=run00000", "-o", os.devnull]], env),
                    "vacuum": run_all([["vacuum", "-w", wh, "--retention-hours", "0"]], env),
                }
                for k, v in times.items():
                    r[k] = min(r.get(k, v), v)
        print(f"{args.runs} runs of one node/shape dump; best of {args.repeat}; S3 = moto on 127.0.0.1")
        for k in results["folder"]:
            f, s = results["folder"][k], results["s3"][k]
            print(f"{k:28s} folder {f:6.2f} s   s3 {s:6.2f} s   ratio {s / f:5.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
