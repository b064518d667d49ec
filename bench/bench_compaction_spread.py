"""Compaction after each nightly ingest: what each night pays for it (issue 22).

    nice python bench/bench_compaction_spread.py --runs 2000 [--work DIR]

Builds the lake of bench_fleet_scale.py (a real 50-run template batch, then synthetic
nightly batches of it under their own ingest ids, runs renamed `<run>-n<night>`:
`fleet_batches._build_flat`), timing `ingest._compact` after each batch. Prints the nights' compaction seconds and files merged
(each night, mean, max, the nights that compacted) and the live files at the end.
Results: bench/RESULTS.md."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_fleet_scale as bfs  # noqa: E402
import fleet_batches  # noqa: E402


def build(work: Path, tpl: Path, runs: int) -> dict:
    from tracedb import catalog, lake as lake_mod

    wh = work / "wh"
    shutil.rmtree(wh, ignore_errors=True)
    shutil.copytree(tpl / "wh", wh)
    nights: list[tuple[float, int]] = []
    fleet_batches._build_flat(wh, tpl, lake_mod.Lake(tpl / "wh"), catalog.open_lake(wh), runs, nights=nights)
    secs = [s for s, _ in nights]
    out = {"nights": len(nights), "compact_mean_s": round(statistics.mean(secs), 3),
           "compact_max_s": max(secs), "nights_compacting": sum(1 for _, n in nights if n),
           "files_merged": sum(n for _, n in nights), "live_files": bfs.live_files(wh),
           "per_night": nights}
    shutil.rmtree(wh, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench_compaction_spread")
    ap.add_argument("--kernels", type=int, default=2000, help="kernel rows per Kineto run of the template")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    tpl = bfs.template(args.work, args.kernels)
    res = {"runs": args.runs, "load_before": os.getloadavg()[0]}
    res.update(build(args.work, tpl, args.runs))
    res["load_after"] = os.getloadavg()[0]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
