"""Compaction's merge of ten files of a fleet's kernels (issue 22): the streaming merge
(`lake.merge_files`, session 13) against the in-memory merge it replaced (every file read
whole, then `lake.write_merged`: a sort and a gather), each in a fresh process, the two
alternated; wall seconds and peak RSS (the child's VmHWM).

    nice python bench/bench_merge.py [--work DIR] [--nights 20] [--files 10] [--repeat 3]

The inputs are what a tier of the bench fleet holds (bench_fleet_scale.py's template: the
real 50-run batch of Kineto, JAX, MegEngine and TF traces): `--files` kernels files, each
`--nights` nights of the template's kernels (runs renamed `<run>-n<night>`) merged as a
compaction writes them. The rows of ten such files are what a merge of a higher tier
reads; the old merge's peak grows with them, the new one's with the files' count."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_fleet_scale import ENV, template  # noqa: E402
from fleet_batches import _reingested, _renamed  # noqa: E402

CHILD = """
import sys, time
from pathlib import Path
import pyarrow.parquet as pq
from tracedb import lake, storage
how, root, files = sys.argv[1], sys.argv[2], sys.argv[3:]
st = storage.open_storage(root)
t = time.perf_counter()
if how == "stream":
    f = lake.merge_files(st, "kernels", files, f"out-{how}.parquet")
else:  # the merge before session 13: every file whole in memory, sorted, gathered
    parts = [pq.read_table(st.parquet_source(p), schema=lake.file_schema("kernels")) for p in files]
    f = lake.write_merged(st, "kernels", parts, f"out-{how}.parquet", "x")
wall = time.perf_counter() - t
hwm = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM:"))
print(wall, int(hwm.split()[1]) // 1024, f.rows)
"""


def inputs(work: Path, nights: int, files: int) -> list[str]:
    import pyarrow.parquet as pq

    from tracedb import lake, storage

    tpl = template(work, 2000)
    src = lake.Lake(tpl / "wh")
    data = [pq.read_table(tpl / "wh" / a) for a in src.add_actions("kernels").column("path").to_pylist()]
    base = src.read_table("runs").column("ingest_id")[0].as_py()
    runs = src.read_table("runs").column("run_id").to_pylist()
    st = storage.open_storage(work / "merge")
    out = []
    for i in range(files):
        parts = []
        for n in range(i * nights + 1, (i + 1) * nights + 1):
            parts += [_renamed(_reingested(d, f"{base}-n{n:05d}"), {r: f"{r}-n{n:05d}" for r in runs}) for d in data]
        rel = f"kernels/tier-{nights}-{i}.parquet"
        if not (work / "merge" / rel).is_file():
            lake.write_merged(st, "kernels", parts, rel, "x")
        out.append(rel)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_merge"))
    ap.add_argument("--nights", type=int, default=20, help="nights of the template in each input file")
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rels = inputs(args.work, args.nights, args.files)
    size = sum((args.work / "merge" / r).stat().st_size for r in rels)
    got: dict[str, list[tuple[float, int]]] = {"stream": [], "in-memory": []}
    for _ in range(args.repeat):
        for how in got:
            p = subprocess.run([sys.executable, "-c", CHILD, how, str(args.work / "merge"), *rels],
                               capture_output=True, text=True, env=ENV)
            if p.returncode:
                print(f"{how}: exit {p.returncode} {p.stderr[-500:]}")
                got[how].append((float("nan"), 0))
                continue
            wall, rss, rows = p.stdout.split()
            got[how].append((float(wall), int(rss)))
    print(f"{args.files} kernels files of {args.nights} nights: {size / 1e6:.1f} MB of Parquet, {rows} rows")
    for how, vals in got.items():
        walls = sorted(w for w, _ in vals)
        print(f"  {how:10s} wall min/median/max {walls[0]:.2f} / {statistics.median(walls):.2f} / {walls[-1]:.2f} s,"
              f" peak RSS {max(r for _, r in vals)} MB")
    s, m = (statistics.median(w for w, _ in got[k]) for k in ("stream", "in-memory"))
    print(f"  stream / in-memory wall: {s / m:.2f}x")


if __name__ == "__main__":
    main()
