"""Compaction after each nightly ingest: what each night pays for it (issue 22).

    nice python bench/bench_compaction_spread.py --runs 2000 [--work DIR]

Builds the lake of bench_fleet_scale.py (a real 50-run template batch, then synthetic
nightly batches of it under their own ingest ids, runs renamed `<run>-n<night>`), timing
`ingest._compact` after each batch. Prints the nights' compaction seconds and files merged
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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_fleet_scale as bfs  # noqa: E402


def build(work: Path, tpl: Path, runs: int) -> dict:
    import pyarrow.parquet as pq

    from tracedb import catalog, ingest as ingest_mod, lake as lake_mod, schema

    wh = work / "wh"
    shutil.rmtree(wh, ignore_errors=True)
    shutil.copytree(tpl / "wh", wh)
    lk = catalog.open_lake(wh)
    src = lake_mod.Lake(tpl / "wh")
    tables = list(schema.TABLES)
    actions = {t: src.add_actions(t).to_pylist() for t in tables}
    meta = {t: src.read_table(t) for t in ("runs", "files", "ingest_log")}
    data = {t: [pq.read_table(tpl / "wh" / a["path"]) for a in actions[t]] for t in tables}
    nights = []
    for b in range(1, runs // bfs.BATCH):
        rename = {r: f"{r}-n{b:05d}" for r in meta["runs"].column("run_id").to_pylist()}
        ingest_id = f"{meta['runs'].column('ingest_id')[0].as_py()}-n{b:05d}"
        files = []
        for table in tables:
            parts = [bfs._renamed(bfs._reingested(d, ingest_id), rename) for d in data[table]]
            f = lake_mod.write_merged(lk.storage, table, parts, f"{table}/part-{ingest_id}-g{table[:3]}.parquet", ingest_id)
            if f is not None:
                files.append(f)
        rows = {t: bfs._renamed(bfs._reingested(meta[t], ingest_id), rename) for t in ("ingest_log", "files", "runs")}
        with lk.lock():
            lk._add_files(files)
            bfs._append(lk, rows)
        t = time.perf_counter()
        done = ingest_mod._compact(lk, ingest_id)
        nights.append((round(time.perf_counter() - t, 3), sum(done.values())))
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
