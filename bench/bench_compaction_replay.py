"""Many nights of ingest compaction replayed on paper through the real plan (issue 22).

    nice python bench/bench_compaction_replay.py --night LAKE [--dense LAKE] [--nights 2000]
        [--budget 1.0] [--budget none] [--optimize-every 7] [--start LAKE]

Each night adds the files one real nightly ingest wrote (`--night`: a lake holding one
ingest of the 50-run template batch into an empty lake: rows and bytes of each table's
group files), then the ingest's compaction is played: `Lake.ingest_compaction` (the
plan an ingest follows, within its merge budget) on a stand-in lake whose live files are
these sizes (`PaperLake`); each chunk merged becomes one file of its rows, whose bytes
are its rows at the density of `--dense`'s largest file of that table (a grown lake:
merged files compress better than a night's). `--optimize-every N` also plays `tracedb
optimize` (every chunk of `compaction_plan(everything=True)`) every N nights.

Prints, for each budget (`none`: every chunk the plan names, as before session 17), the
live data files at the end, the worst night's merged rows against a night's rows, rows
written by merges against rows ingested, and the rows `optimize` merged. No file is
read or written past the two lakes' logs. Results: bench/RESULTS.md."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracedb import lake as lake_mod, schema  # noqa: E402


class PaperLake(lake_mod.Lake):
    """A lake of live files known by their sizes alone: what `compaction_plan` and
    `ingest_compaction` read of a lake (`live_file_ranges`, `dead_row_files`)."""

    def __init__(self, budget: float | None) -> None:  # no storage: nothing is read
        self.files: dict[str, list[dict]] = {t: [] for t in schema.TABLES}
        self.n = 0
        if budget is not None:
            self.MERGE_BUDGET = budget
        else:
            self.MERGE_BUDGET = float("inf")

    def live_file_ranges(self, table: str, published=None):
        import pyarrow as pa

        return pa.Table.from_pylist(self.files[table]) if self.files[table] else \
            pa.table({"run_id": pa.array([], pa.string()), "path": pa.array([], pa.string()),
                      "rows": pa.array([], pa.int64()), "size": pa.array([], pa.int64())})

    def dead_row_files(self) -> set[str]:
        return set()

    def add(self, table: str, rows: int, size: int, night: int) -> None:
        self.n += 1
        self.files[table].append({"run_id": f"run00000-n{night:05d}", "path": f"{table}/f{self.n:08d}",
                                  "rows": rows, "size": size})

    def merge(self, table: str, chunk: list[dict], density: dict[str, float]) -> int:
        gone = {r["path"] for r in chunk}
        self.files[table] = [r for r in self.files[table] if r["path"] not in gone]
        rows = sum(r["rows"] for r in chunk)
        size = int(rows * density[table]) if table in density else sum(r["size"] for r in chunk)
        self.n += 1
        self.files[table].append({"run_id": min(r["run_id"] for r in chunk), "path": f"{table}/m{self.n:08d}",
                                  "rows": rows, "size": size})
        return rows


def night_files(lake_dir: Path) -> dict[str, list[tuple[int, int]]]:
    lk = lake_mod.Lake(lake_dir)
    published = lk.published()
    return {t: [(r["rows"], r["size"]) for r in lk.live_file_ranges(t, published).to_pylist()]
            for t in schema.TABLES}


def densities(lake_dir: Path) -> dict[str, float]:
    """Bytes a row of each table's largest live file (of at least a million rows)."""
    lk = lake_mod.Lake(lake_dir)
    published = lk.published()
    out = {}
    for t in schema.TABLES:
        big = max(lk.live_file_ranges(t, published).to_pylist(), key=lambda r: r["rows"] or 0, default=None)
        if big and (big["rows"] or 0) >= 1_000_000:
            out[t] = big["size"] / big["rows"]
    return out


def replay(night: dict[str, list[tuple[int, int]]], density: dict[str, float], nights: int,
           budget: float | None, optimize_every: int | None,
           start: dict[str, list[tuple[int, int]]] | None = None) -> dict:
    paper = PaperLake(budget)
    for t, files in (start or {}).items():
        for rows, size in files:
            paper.add(t, rows, size, 0)
    batch = sum(r for files in night.values() for r, _ in files)
    worst = written = optimized = deferring = 0
    per_night, first_big = [], None
    for n in range(1, nights + 1):
        for t, files in night.items():
            for rows, size in files:
                paper.add(t, rows, size, n)
        taken, deferred = paper.ingest_compaction({}, batch)
        merged = sum(paper.merge(t, c, density) for t, c in taken)
        deferring += bool(deferred)
        per_night.append(merged)
        if first_big is None and merged > 2 * batch:
            first_big = (n, merged, sorted({t for t, _ in taken}))
        worst, written = max(worst, merged), written + merged
        if optimize_every and n % optimize_every == 0:
            for t in schema.TABLES:
                for chunk in paper.compaction_plan(t, {}, everything=True):
                    optimized += paper.merge(t, chunk, density)
    files = {t: len(v) for t, v in paper.files.items()}
    return {"budget": budget, "optimize_every": optimize_every, "nights": nights, "night_rows": batch,
            "live_data_files": sum(files.values()), "live_files_by_table": files,
            "worst_night_merged_rows": worst, "worst_night_x_batch": round(worst / batch, 2),
            "ingest_merged_x_ingested": round(written / (batch * nights), 2),
            "optimize_merged_x_ingested": round(optimized / (batch * nights), 2),
            "nights_deferring": deferring,
            "nights_merging_over_1x_batch": sum(1 for m in per_night if m > batch),
            "median_night_x_batch": round(sorted(per_night)[len(per_night) // 2] / batch, 2),
            "first_night_over_2x_batch": first_big,
            "first_nights_x_batch": [round(m / batch, 2) for m in per_night[:12]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--night", type=Path, required=True, help="a lake of one nightly ingest")
    ap.add_argument("--dense", type=Path, help="a grown lake: bytes a row of merged files")
    ap.add_argument("--nights", type=int, default=2000)
    ap.add_argument("--budget", action="append", default=[],
                    help="MERGE_BUDGET to replay (repeatable; 'none': no budget, every chunk planned)")
    ap.add_argument("--optimize-every", type=int, help="also play `tracedb optimize` every N nights")
    ap.add_argument("--start", type=Path, help="a grown lake whose live files the nights start from (default: empty)")
    args = ap.parse_args()
    night = night_files(args.night)
    density = densities(args.dense) if args.dense else {}
    start = night_files(args.start) if args.start else None
    for b in args.budget or [str(lake_mod.Lake.MERGE_BUDGET)]:
        print(json.dumps(replay(night, density, args.nights, None if b == "none" else float(b), args.optimize_every,
                                start)), flush=True)


if __name__ == "__main__":
    main()
