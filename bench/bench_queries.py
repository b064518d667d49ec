"""Every canned query on a fleet warehouse: whole fleet and one run, plus memory and fixed costs.

    python bench/bench_queries.py WAREHOUSE [--repeat 3] [--run RUN_ID] [--queries a,b] [--rss a,b]
                                  [--old issue12|raw] [--params '{"name_like": "%"}']

Prints one row per canned query: best-of --repeat seconds over the whole fleet
(run_id NULL) and filtered to one run (a Kineto run, or --run), on one open connection;
for the queries rewritten for issue 12 (each one with its old text in
tests/data/sql_before_issue12: top_kernels, top_ops, megengine_op_types, kernel_summary,
collectives, gpu_busy_idle, stream_overlap; fourth pass: kernel_type_breakdown,
temporal_breakdown, comm_comp_overlap, step_times, idle_time_breakdown, queue_length,
fleet_trend, kernel_duration_histogram) also the old text timed interleaved with the
new one, as the ratio old / new (--old raw: the old text is instead the metric's raw-row
text `sql/metrics/<query>.sql`, for the queries with a per-run rollup: what they computed
before the rollup). Then: peak RSS of fleet-wide top_kernels, gpu_busy_idle,
stream_overlap and collectives (--rss), old and new, each in a fresh subprocess; the cost of opening the warehouse (views) and of a one-run count(*); and the
start-up of `python -m tracedb.cli --help` against `python -c pass`.

One run: a query with `-- scope: run_id` runs against views over that run's files alone;
the "unscoped" column times the same text against the snapshot's whole views (every
file of every run), interleaved, as before run scoping. Run the bench on a 100- and a
1000-run fleet to see whether the one-run cost grows with the fleet.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracedb import catalog  # noqa: E402
from tracedb import query as q  # noqa: E402
from tracedb import sqllib  # noqa: E402

BEFORE = ROOT / "tests" / "data" / "sql_before_issue12"


def best(fn, repeat: int) -> float:
    out = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def interleaved(fns: dict, repeat: int) -> dict[str, float]:
    """Best time of each function, taking turns so machine load hits all alike."""
    out = {k: float("inf") for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            out[k] = min(out[k], time.perf_counter() - t)
    return out


def params_for(cq, run: str | None, runs: list[str], extra: dict | None = None) -> dict:
    values: dict = {k: v for k, v in (extra or {}).items() if any(p.name == k for p in cq.params)}
    others = iter(r for r in runs if r != run)
    for p in cq.params:
        if p.name == "run_id":
            values["run_id"] = run
        elif p.required and p.type == "VARCHAR":  # baseline/candidate, run_a/run_b
            values[p.name] = run if run and not values.get("_first") else next(others)
            values["_first"] = True
    values.pop("_first", None)
    return sqllib.bind(cq, values)


def rss_of(warehouse: Path, sql_path: Path, params: dict | None = None) -> tuple[float, float]:
    code = (
        "import sys, time; sys.path.insert(0, %r)\n"
        "from pathlib import Path\nfrom tracedb import query as q\n"
        "cq = q.load(Path(%r)); t = time.perf_counter()\n"
        "q.run_query(cq, %r, Path(%r))\n"
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
        "print(time.perf_counter() - t, int(hwm) / 1024)\n"
    ) % (str(ROOT), str(sql_path), params or {}, str(warehouse))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    secs, mb = out.stdout.splitlines()[-1].split()[-2:]  # after any DuckDB progress bar
    return float(secs), float(mb)


def startup(args: list[str], repeat: int) -> float:
    return best(lambda: subprocess.run(args, capture_output=True, check=True), repeat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("warehouse", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--run", default=None)
    ap.add_argument("--queries", default=None, help="comma-separated names (default: every canned query)")
    ap.add_argument("--no-old", action="store_true", help="skip the old texts (tests/data/sql_before_issue12)")
    ap.add_argument("--one-run-only", action="store_true", help="time only the one-run column (no fleet-wide runs)")
    ap.add_argument("--rss", default="top_kernels,gpu_busy_idle,stream_overlap,collectives",
                    help="queries (with an old text) whose fleet-wide peak RSS to measure, new and old; '' for none")
    ap.add_argument("--old", choices=("issue12", "raw"), default="issue12",
                    help="old text: the query before issue 12 (tests/data/sql_before_issue12), or the "
                         "metric's raw-row text (sql/metrics/) for the queries with a per-run rollup")
    ap.add_argument("--params", type=json.loads, default={},
                    help="JSON object of further parameters for every query that has them")
    args = ap.parse_args()
    wh = args.warehouse
    before = BEFORE if args.old == "issue12" else ROOT / "sql" / "metrics"
    t = time.perf_counter()
    con = catalog.connect(wh)
    connect_s = time.perf_counter() - t
    runs = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
    run = args.run or con.execute(
        "SELECT run_id FROM kernels GROUP BY run_id ORDER BY count(*) DESC, run_id LIMIT 1").fetchall()[0][0]
    n_k, n_n = (con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in ("kernels", "nodes"))
    print(f"warehouse {wh}: {len(runs)} runs, {n_k:,} kernel rows, {n_n:,} node rows; one run = {run}")
    print(f"best of {args.repeat}, one open connection; ratio = old text / new text, same process\n")
    print("| query | fleet s | one run s | one run unscoped s | old fleet s | old one run s | fleet ratio | one-run ratio |")
    print("|---|---|---|---|---|---|---|---|")
    within = {"fleet": 0, "one": 0}
    queries = sqllib.list_queries()
    if args.queries:
        queries = [c for c in queries if c.name in args.queries.split(",")]
    for cq in queries:
        row = {}
        olds = before / f"{cq.name}.sql"
        old = sqllib.load(olds) if olds.is_file() and not args.no_old else None
        if old is not None and args.old == "raw":  # the metric on raw rows, never its rollup
            old = dataclasses.replace(old, rollup=None, text="")
        for scope, r in (("fleet", None), ("one", run)):
            if scope == "fleet" and args.one_run_only:
                row["fleet"] = None
                continue
            if scope == "one" and not any(p.name == "run_id" for p in cq.params):
                row[scope] = row["fleet"]
                row["old_" + scope] = row.get("old_fleet")
                continue
            values = params_for(cq, r, runs, args.params)
            texts = {scope: cq} if old is None else {scope: cq, "old_" + scope: old}
            if scope == "one" and cq.scope:
                texts["unscoped"] = dataclasses.replace(cq, scope=())
            # each text gets the values it takes (a metric has no `limit`)
            for key, t in interleaved({k: (lambda c=c: q.execute(con, c, {n: v for n, v in values.items() if c.param(n)}))
                                       for k, c in texts.items()},
                                      args.repeat).items():
                row[key] = t
        within["fleet"] += row["fleet"] is not None and row["fleet"] <= 1.0
        within["one"] += row["one"] is not None and row["one"] <= 0.1

        def fmt(x):
            return "" if x is None else f"{x:.3f}"

        ratio = lambda s: f"{row['old_' + s] / row[s]:.2f}" if row.get("old_" + s) else ""  # noqa: E731
        print(f"| {cq.name} | {fmt(row['fleet'])} | {fmt(row['one'])} | {fmt(row.get('unscoped'))} | {fmt(row.get('old_fleet'))} "
              f"| {fmt(row.get('old_one'))} | {ratio('fleet')} | {ratio('one')} |")
    print(f"\nwithin goal: {within['fleet']}/{len(queries)} fleet-wide <= 1 s, "
          f"{within['one']}/{len(queries)} one-run <= 100 ms")

    print()
    for name in args.rss.split(",") if args.rss else ():
        params = {k: v for k, v in args.params.items() if any(p.name == k for p in sqllib.load(name).params)}
        new_s, new_mb = rss_of(wh, ROOT / "sql" / f"{name}.sql", params)
        old_s, old_mb = rss_of(wh, before / f"{name}.sql", params)
        print(f"{name} fleet-wide, fresh process: new {new_s:.2f} s peak RSS {new_mb:.0f} MB; "
              f"old {old_s:.2f} s {old_mb:.0f} MB (ratio old/new: time {old_s / new_s:.2f}, memory {old_mb / new_mb:.2f})")

    one = best(lambda: con.execute("SELECT count(*) FROM kernels WHERE run_id = ?", [run]).fetchall(), args.repeat)
    count = sqllib.parse("-- param: run_id VARCHAR REQUIRED run\n-- scope: run_id\n"
                    "SELECT count(*) AS n FROM kernels WHERE run_id = $run_id", "count")
    scoped = best(lambda: q.execute(con, count, {"run_id": run}), args.repeat)
    print(f"open warehouse (catalog + views): {connect_s * 1e3:.0f} ms; one-run count(*): {one * 1e3:.1f} ms "
          f"on the whole view, {scoped * 1e3:.1f} ms as a scoped query")
    py = startup([sys.executable, "-c", "pass"], args.repeat)
    imp = startup([sys.executable, "-c", "import tracedb"], args.repeat)
    cli = startup([sys.executable, "-m", "tracedb.cli", "--help"], args.repeat)
    print(f"start-up: python -c pass {py * 1e3:.0f} ms; import tracedb {imp * 1e3:.0f} ms; "
          f"tracedb --help {cli * 1e3:.0f} ms (minus bare python: {(cli - py) * 1e3:.0f} ms)")
    print(json.dumps({"runs": len(runs), "kernels": n_k, "nodes": n_n}))


if __name__ == "__main__":
    main()
