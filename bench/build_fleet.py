"""Build a benchmark fleet from the real traces we ship, with run-to-run variation.

    python bench/build_fleet.py OUT --runs 1000 [--kernels 10000] [--jobs 2] [--seed 0]

writes OUT/traces/<run_id>/ (trace + run.json labels) and ingests them into OUT/wh with
`tracedb.ingest.ingest(..., jobs=--jobs)`. Nine runs in ten are Kineto: eight the H200
fixture and the six `fleet_dev` nightly traces, rotated; one (run index 4 of each ten) a
distributed job with NCCL kernels, in turn HTA's one-rank all-reduce trace and its two-rank
job (one file per rank), so `collectives` and `nccl_bandwidth` have real communication to
read. The tenth is, in turn, the TF RunMetadata text, the TF StepStats text, the MegEngine
profile or the JAX XSpace, so the fleet mixes formats as a real one does. --kernels is the GPU kernel rows per Kineto run (shared by a job's ranks): the base
trace's GPU activity (kernels, memcpy, memset) is repeated as further steps after its end
until the run holds about that many (1000 runs x 10,500 = 10 M kernel rows: 9.6 M at 10,000; host ops
stay one copy, so the node rows do not grow with it).

Variation, seeded by --seed and the run index, so the same arguments give the same fleet:
every GPU event's duration is scaled by a per-run factor (lognormal, sigma 3%: the
machine) times a per-event one (sigma 1%: noise); one run in 25 slows one kernel name
by 20% (a regression for the report to find). Traces are written as plain JSON
(generation ~1 s per 10k-kernel run; the whole 1000-run build takes tens of minutes on
2 cores, mostly ingest).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = ROOT / "tests" / "data"
SHARED = Path("/work/shared/fixtures")
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
OTHER = [  # (folder in tests/data, file)
    ("tf_runmetadata_text", "000_6b18107121892edf.txt"),
    ("tf_stepstats_gpu_streams", "001_5e9237699abafb68.txt"),
    ("megengine_graph_profile", "004_825e28a4f520ddc2.txt"),
    ("xspace_jax_h200", "jax_h200.xplane.pb"),
]


def kineto_bases() -> list[tuple[str, dict]]:
    paths = [DATA / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"]
    fleet_dev = SHARED / "fleet_dev"
    if fleet_dev.is_dir():  # the nightly fleet fixtures, when this machine has them
        paths += sorted(fleet_dev.glob("*/trace.json.gz"))
    return [(p.parent.name, json.load(gzip.open(p))) for p in paths]


NCCL = [  # (folder in tests/data, its ranks' files): HTA's NCCL traces
    ("hta_nccl_allreduce", ["rank-0.json.gz"]),
    ("hta_nccl_two_ranks", ["rank-0.json.gz", "rank-1.json.gz"]),
]


def nccl_bases() -> list[tuple[str, list[tuple[str, dict]]]]:
    return [(folder, [(f.removesuffix(".gz"), json.load(gzip.open(DATA / folder / f))) for f in files])
            for folder, files in NCCL]


def vary(base: dict, rng: random.Random, kernels: int, slow_name: str | None) -> dict:
    events = base["traceEvents"]
    gpu = [e for e in events if e.get("cat") in GPU_CATS and e.get("ph") == "X"]
    n_kernels = sum(1 for e in gpu if e["cat"] == "kernel") or 1
    copies = max(1, round(kernels / n_kernels))
    run_factor = math.exp(rng.gauss(0, 0.03))
    start = min(e["ts"] for e in gpu)
    span = max(e["ts"] + e["dur"] for e in gpu) - start
    gpu_ids = {id(e) for e in gpu}
    out = [_scaled(e, run_factor, rng, slow_name, 0, 0) if id(e) in gpu_ids else e for e in events]
    for c in range(1, copies):  # further steps: the GPU activity again, after the last
        shift = c * span * 1.05
        out.extend(_scaled(e, run_factor, rng, slow_name, shift, c) for e in gpu)
    trace = dict(base)
    trace["traceEvents"] = out
    return trace


def _scaled(e: dict, run_factor: float, rng: random.Random, slow_name: str | None,
            shift: float, copy: int) -> dict:
    e = dict(e)
    f = run_factor * math.exp(rng.gauss(0, 0.01)) * (1.2 if e["name"] == slow_name else 1.0)
    e["dur"] = round(e["dur"] * f, 3)
    e["ts"] = round(e["ts"] + shift, 3)
    if copy and "args" in e and "correlation" in e["args"]:
        e["args"] = dict(e["args"], correlation=e["args"]["correlation"] + copy * 10_000_000)
    return e


def build(out: Path, runs: int, kernels: int, seed: int) -> Path:
    traces = out / "traces"
    shutil.rmtree(traces, ignore_errors=True)
    traces.mkdir(parents=True)
    bases = kineto_bases()
    jobs = nccl_bases()
    kineto_i = other_i = nccl_i = 0
    for i in range(runs):
        rng = random.Random(seed * 1_000_003 + i)
        run = traces / f"run{i:05d}"
        run.mkdir()
        day = i // 24
        labels = {"model": "", "hardware": "H200", "commit": f"c{i // 10:04d}",
                  "started_at": f"2026-{1 + day // 28 % 12:02d}-{1 + day % 28:02d}T{i % 24:02d}:00:00Z"}
        if i % 10 == 9:
            folder, name = OTHER[other_i % len(OTHER)]
            other_i += 1
            shutil.copy(DATA / folder / name, run / name)
            labels["model"] = folder
        elif i % 10 == 4:
            folder, ranks = jobs[nccl_i % len(jobs)]
            nccl_i += 1
            for name, base in ranks:
                (run / name).write_text(json.dumps(vary(base, rng, kernels // len(ranks), None)))
            labels["model"] = folder
        else:
            bname, base = bases[kineto_i % len(bases)]
            kineto_i += 1
            names = sorted({e["name"] for e in base["traceEvents"] if e.get("cat") == "kernel"})
            slow = rng.choice(names) if i % 25 == 24 else None
            (run / "trace.json").write_text(json.dumps(vary(base, rng, kernels, slow)))
            labels["model"] = bname
        (run / "run.json").write_text(json.dumps(labels))
    return traces


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--kernels", type=int, default=10_500, help="kernel rows per Kineto run")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from tracedb import catalog
    from tracedb.ingest import ingest

    t = time.perf_counter()
    traces = build(args.out, args.runs, args.kernels, args.seed)
    gen = time.perf_counter() - t
    wh = args.out / "wh"
    shutil.rmtree(wh, ignore_errors=True)
    t = time.perf_counter()
    summary = ingest([traces], wh, jobs=args.jobs)
    ing = time.perf_counter() - t
    if summary.errors:
        raise SystemExit(f"ingest errors: {summary.errors[:3]}")
    con = catalog.connect(wh)
    counts = {tb: con.execute(f"SELECT count(*) FROM {tb}").fetchone()[0]
              for tb in ("runs", "kernels", "nodes")}
    print(json.dumps({"runs": args.runs, "generate_s": round(gen, 1), "ingest_s": round(ing, 1),
                      "jobs": args.jobs, **counts}))


if __name__ == "__main__":
    main()
