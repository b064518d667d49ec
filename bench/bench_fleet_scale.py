"""What a fleet's lake costs as it grows: the figures of issue 22, at N runs, in fresh processes.

    nice python bench/bench_fleet_scale.py --runs 1000 [--work DIR] [--repeat 3] [--kernels 2000]
        [--synthetic [--tail 20] | --validate | --lake DIR]

A template batch of 50 runs is built once by `bench/build_fleet.py` (Kineto, NCCL jobs, TF,
MegEngine and JAX traces, with variation) and ingested with real `tracedb ingest` into
WORK/template/wh. The lake of N runs is that lake plus N/50 - 1 synthetic nightly batches,
committed the way an ingest commits a group (`Lake.commit`'s step 1 per table, then
`ingest_log`, `files`, `checksums` and the `runs` rows of the batch: one Delta commit a
table a batch), so the log, the live-file lists and the snapshot are those of N ingested
runs, at a fraction of ingest's cost. The snapshot is published once at the end
(`catalog.publish`, as the last commit does).

- Schema 8 (files of many runs): each batch's files are the template's live files with
  the runs renamed `<run>-n<batch>` (so a night's runs sort among every other night's, as
  model-named runs do: no file's run range is a night's alone) under the batch's own
  ingest id, written sorted by run; after each batch the ingest's compaction runs
  (`ingest._compact`: a full tier's files merged), as nightly ingests do.
- Schema <= 7 (`--code` of an older tree, partitioned by run and device): the template's
  files hard-linked into each run's partition folders under the names `b00001-run00000`.

`--synthetic` (bench/fleet_synthetic.py) writes the same lake at once: the compaction
played on paper, each file live at the end written once, all but the last --tail batches
in one commit; `--validate` builds a lake both ways and compares them (rows, `check`,
every canned query). At 20,000 runs the ingest's compaction of ~48 MB of these (very
compressible) kernels needed >15 GB; since the streaming merge a 14.7 M-row chunk takes
574 MB, and 50,000 runs were built in 42 min at load 7-16 (bench/RESULTS.md, "Session 13").

Then, each in a fresh process, wall time (and peak RSS where it matters), median of
--repeat:

  nightly      `tracedb ingest` of a real 50-run batch into the N-run lake; of it the
               commit (lock held, without the publish) and the publish (TRACEDB_TIMING
               phases); the same batch into an empty lake, for the ratio
  bi_one       plain DuckDB (no tracedb import): connect to catalog.duckdb read-only +
               one run's kernel count; wall from connect, RSS of the process
  bi_fleet     plain DuckDB: sum(duration_ns) by run over `kernels`; and the same
               aggregation over the same rows copied into one Parquet file
  q_one/q_fleet `tracedb query top_kernels` with --param run_id / fleet-wide
  rm           `tracedb rm` of one run (wall, RSS); then bi_one/bi_fleet again (after_rm_*)
  vacuum       `tracedb vacuum` (default retention: what it reads, not what it deletes)
  check        `tracedb check` (reads every live file)
  optimize     with --optimize: `tracedb optimize` once, then bi_one/bi_fleet/q_* again
  sizes        catalog.duckdb bytes, its views' SQL bytes, live Parquet files (Delta log)

Prints one JSON object (also written to WORK/result-<N>.json). Results: bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleet_batches import BATCH, _append, _build_flat, _renamed  # noqa: E402  (bench/ is sys.path[0])
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def timed(args: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """Wall and peak RSS (MB) of a fresh process, measured by a wrapper around it."""
    wrap = ("import resource, subprocess, sys, time, json; t = time.perf_counter(); "
            "p = subprocess.run(sys.argv[1:], capture_output=True); w = time.perf_counter() - t; "
            "r = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024; "
            "sys.stderr.write(p.stderr.decode()); sys.stdout.write(p.stdout.decode()); "
            "print(json.dumps({'wall': w, 'rss': r, 'rc': p.returncode}))")
    p = subprocess.run([sys.executable, "-c", wrap, *args], capture_output=True, env=env or ENV)
    lines = p.stdout.decode().rstrip().splitlines()
    meta = json.loads(lines[-1])
    if meta["rc"] != 0:
        raise RuntimeError(f"{args[:5]} failed ({meta['rc']}): {p.stderr.decode()[-2000:]}")
    return meta["wall"], meta["rss"], "\n".join(lines[:-1])


def med(values: list[float]) -> float:
    return round(statistics.median(values), 3)


# -- building the lake ----------------------------------------------------------------
def template(work: Path, kernels: int) -> Path:
    out = work / "template"
    if not (out / "wh" / "_tracedb" / "lake.json").is_file():
        subprocess.run([sys.executable, str(ROOT / "bench" / "build_fleet.py"), str(out), "--runs", str(BATCH),
                        "--kernels", str(kernels), "--jobs", "1"], check=True, env=ENV)
    return out


def build_lake(work: Path, tpl: Path, runs: int, every: int = 1) -> Path:
    """The template lake plus synthetic batches up to `runs` runs (see the docstring)."""
    import pyarrow as pa

    from tracedb import catalog, lake as lake_mod, schema

    wh = work / f"wh_{runs}"
    shutil.rmtree(wh, ignore_errors=True)
    shutil.copytree(tpl / "wh", wh, copy_function=os.link)
    src = lake_mod.Lake(tpl / "wh")
    lk = lake_mod.Lake(wh)
    if hasattr(lk, "partitioned") and not lk.partitioned("kernels"):
        return _build_flat(wh, tpl, src, lk, runs)
    tables = list(schema.TABLES)
    actions = {t: src.add_actions(t).to_pylist() for t in tables}
    meta = {t: src.read_table(t) for t in ("runs", "files", "ingest_log", "checksums")}
    sums = {r["path"]: r["sha256"] for r in meta["checksums"].to_pylist()}
    t0 = time.perf_counter()
    files: list = []
    rows: dict = {t: [] for t in ("ingest_log", "files", "runs")}
    for b in range(1, runs // BATCH):
        rename = {r: f"b{b:05d}-{r}" for r in meta["runs"].column("run_id").to_pylist()}
        for table in tables:
            for a in actions[table]:
                run = rename[a["run_id"]]
                rel = f"{lake_mod.partition_dir(table, run, a['device'])}/{a['path'].rsplit('/', 1)[1]}"
                (wh / rel).parent.mkdir(parents=True, exist_ok=True)
                os.link(tpl / "wh" / a["path"], wh / rel)
                files.append(lake_mod.DataFile(table, run, a["device"], rel, a["rows"] or 0, a["size"],
                                               sums.get(a["path"], ""), a["max_ingest"]))
        for t in rows:
            rows[t].append(_renamed(meta[t], rename))
        if b % every and b != runs // BATCH - 1:
            continue
        with lk.lock():
            lk._add_files(files)
            _append(lk, {t: pa.concat_tables(v) for t, v in rows.items()})
        files, rows = [], {t: [] for t in rows}
        if b % 20 == 0:
            print(f"  batch {b}: {b * BATCH + BATCH} runs, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    with lk.lock():
        catalog.publish(lk)
    return wh


RUN = {"flat": "run00000-n00001", "partitioned": "b00001-run00000"}  # a run of the first synthetic batch


# -- measuring ------------------------------------------------------------------------
BI = """
import duckdb, json, sys, time
t = time.perf_counter()
con = duckdb.connect(sys.argv[1], read_only=sys.argv[1] != ":memory:")
con.execute("SET enable_progress_bar = false")  # it writes to stdout on queries of seconds
rows = con.execute(sys.argv[2], sys.argv[3:] or None).fetchall()
print(json.dumps({"inner": time.perf_counter() - t, "rows": len(rows)}))
"""


def bi(cat: Path, sql: str, *params: str) -> tuple[float, float]:
    """Plain DuckDB in a fresh process: (wall from connect to result, peak RSS MB)."""
    _, rss, out = timed([sys.executable, "-c", BI, str(cat), sql, *params])
    return json.loads(out.splitlines()[-1])["inner"], rss


def tracedb(*args: str, env: dict | None = None) -> tuple[float, float, str]:
    return timed([sys.executable, "-m", "tracedb", *args], env=env)


def nightly(work: Path, tpl: Path, wh: Path, k: int) -> dict:
    """One real 50-run batch into `wh`: whole ingest, commit and publish phases."""
    night = work / f"night_{os.getpid()}_{k}"
    shutil.rmtree(night, ignore_errors=True)
    shutil.copytree(tpl / "traces", night / f"n{k}", copy_function=os.link)
    tfile = work / f"timing_{k}.jsonl"
    tfile.unlink(missing_ok=True)
    wall, rss, _ = tracedb("ingest", str(night), "--warehouse", str(wh), env={**ENV, "TRACEDB_TIMING": str(tfile)})
    from tracedb import timing

    phases = timing.read(tfile)
    main_pid = [p["pid"] for p in phases if p["phase"] == "commit"][0]
    get = {p["phase"]: p["end"] - p["start"] for p in phases if p["pid"] == main_pid}
    shutil.rmtree(night, ignore_errors=True)
    return {"wall": wall, "rss": rss, "commit": get.get("commit", 0.0), "publish": get.get("publish", 0.0),
            "merge": get.get("merge", 0.0), "compact": get.get("compact", 0.0)}


def live_files(wh: Path) -> int:
    from tracedb import lake as lake_mod, schema

    lk = lake_mod.Lake(wh)
    return sum(lk.add_actions(t).num_rows for t in schema.ALL_TABLES)


def sizes(wh: Path) -> dict:
    import duckdb

    cat = wh / "catalog.duckdb"
    con = duckdb.connect(str(cat), read_only=True)
    view_sql = con.execute("SELECT sum(length(sql)) FROM duckdb_views() WHERE NOT internal").fetchone()[0]
    con.close()
    return {"catalog_mb": round(cat.stat().st_size / 1e6, 2), "view_sql_mb": round(view_sql / 1e6, 2),
            "live_files": live_files(wh)}


def queries(wh: Path, run: str, repeat: int, work: Path) -> dict:
    cat = wh / "catalog.duckdb"
    one = [bi(cat, "SELECT count(*) FROM kernels WHERE run_id = ?", run) for _ in range(repeat)]
    fleet_sql = "SELECT run_id, sum(duration_ns) FROM kernels GROUP BY run_id"
    fleet = [bi(cat, fleet_sql) for _ in range(repeat)]
    flat = work / "kernels_flat.parquet"
    import duckdb

    con = duckdb.connect(str(cat), read_only=True)
    # only the aggregate's columns, under a memory limit: `SELECT *` of 41.9 M kernel rows
    # (20,000 runs) held >16 GB (bench/RESULTS.md, session 12)
    con.execute("SET memory_limit = '3GB'; SET preserve_insertion_order = false")
    con.execute(f"COPY (SELECT run_id, duration_ns FROM kernels) TO '{flat}' (FORMAT parquet, COMPRESSION zstd)")
    nrows = con.execute("SELECT count(*) FROM kernels").fetchone()[0]
    con.close()
    flat_t = [bi(Path(":memory:"), f"SELECT run_id, sum(duration_ns) FROM read_parquet('{flat}') GROUP BY run_id")[0]
              for _ in range(repeat)]
    flat.unlink()
    q1 = [tracedb("query", "top_kernels", "--warehouse", str(wh), "--param", f"run_id={run}", "-f", "csv")
          for _ in range(repeat)]
    qf = [tracedb("query", "top_kernels", "--warehouse", str(wh), "-f", "csv") for _ in range(repeat)]
    start = [tracedb("--version")[0] for _ in range(repeat)]
    return {"kernel_rows": nrows,
            "bi_one_s": med([w for w, _ in one]), "bi_one_rss_mb": med([r for _, r in one]),
            "bi_fleet_s": med([w for w, _ in fleet]), "bi_fleet_rss_mb": med([r for _, r in fleet]),
            "flat_parquet_fleet_s": med(flat_t),
            "q_one_s": med([w for w, _, _ in q1]), "q_fleet_s": med([w for w, _, _ in qf]),
            "tracedb_startup_s": med(start)}


def note(res: dict, phase: str) -> None:
    """The load average (1 min) at the end of a phase, into the result and on stderr."""
    res.setdefault("load", {})[phase] = round(os.getloadavg()[0], 1)
    print(f"  {time.strftime('%H:%M:%S')} {phase} done, load {res['load'][phase]}", file=sys.stderr, flush=True)
    print(f"  so far: {json.dumps(res)}", file=sys.stderr, flush=True)  # a long run's figures survive its end


def validate(work: Path, tpl_dir: Path, runs: int, tail: int, jobs: int, sample: int = 6, reuse: bool = False) -> dict:
    """The lake of `runs` runs built by real batches (WORK/real, reused when there) and
    synthetically (WORK/synthetic), compared: rows of every view, `tracedb check`, every
    canned query fleet-wide and for a sample of runs (the template's, a synthetic night's,
    a real night's), live files a table, catalog.duckdb's size."""
    import random

    from fleet_synthetic import build

    from tracedb import catalog, lake as lake_mod, query as q, schema, sqllib

    real = work / "real" / f"wh_{runs}"
    if not (real / lake_mod.CATALOG).is_file():
        (work / "real").mkdir(exist_ok=True)
        t = time.perf_counter()
        real = build_lake(work / "real", tpl_dir, runs)
        print(f"  real lake built in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    (work / "synthetic").mkdir(exist_ok=True)  # with reuse (--keep), lakes there from an earlier run
    t = time.perf_counter()
    syn = work / "synthetic" / f"wh_{runs}"
    if not (reuse and (syn / lake_mod.CATALOG).is_file()):
        syn = build(work / "synthetic", tpl_dir, runs, tail, jobs, log=lambda m: print(m, file=sys.stderr, flush=True))
    res: dict = {"runs": runs, "tail": tail, "synthetic_build_s": round(time.perf_counter() - t, 1), "problems": []}
    cons = {k: catalog.connect(wh) for k, wh in (("real", real), ("synthetic", syn))}
    views = list(schema.TABLES) + ["runs", "files", "ingest_log", "acceptances"]
    counts = {k: {v: c.execute(f"SELECT count(*) FROM {v}").fetchall()[0][0] for v in views} for k, c in cons.items()}
    res["rows"] = counts["synthetic"]
    res["problems"] += [f"{v}: {counts['synthetic'][v]} rows, real {counts['real'][v]}" for v in views
                        if counts["synthetic"][v] != counts["real"][v]]
    for k, wh in (("real", real), ("synthetic", syn)):
        res[f"{k}_checksum_rows"] = lake_mod.Lake(wh).read_table("checksums").num_rows
        res[f"{k}_sizes"] = sizes(wh)
        res[f"{k}_files_by_table"] = {t: lake_mod.Lake(wh).add_actions(t).num_rows for t in schema.ALL_TABLES}
        res[f"{k}_data_mb"] = round(sum(lake_mod.Lake(wh).add_actions(t).column("size").to_numpy().sum()
                                        for t in schema.TABLES) / 1e6, 1)
        try:
            tracedb("check", "--warehouse", str(wh))
            res[f"{k}_check"] = "ok"
        except RuntimeError as e:
            res[f"{k}_check"] = str(e)[-500:]
            res["problems"].append(f"{k}: check failed")
    all_runs = [r for (r,) in cons["real"].execute("SELECT run_id FROM runs ORDER BY 1").fetchall()]
    rng = random.Random(0)
    last = runs // BATCH - 1
    picked = ["run00000", "run00004-n00001", f"run00009-n{last:05d}", f"run00014-n{max(1, last - tail - 1):05d}"]
    picked = [r for r in picked if r in all_runs] + rng.sample(all_runs, sample)
    res["sample_runs"] = picked
    compared = differ = nonempty = 0
    for cq in sqllib.list_queries():
        if any(p.required and p.name != "run_id" for p in cq.params):
            continue
        names = {p.name for p in cq.params}
        for run in ([None, *picked] if "run_id" in names else [None]):
            bound = sqllib.bind(cq, {"run_id": run} if run else {})
            got, want = (q.execute(cons[k], cq, bound) for k in ("synthetic", "real"))
            compared += 1
            nonempty += want.num_rows > 0
            if not got.equals(want):
                same_rows = sorted(map(str, got.to_pylist())) == sorted(map(str, want.to_pylist()))
                differ += 1
                res["problems"].append(f"{cq.name} run={run}: " + ("same rows, another order" if same_rows else
                                       f"{got.num_rows} rows, real {want.num_rows}"))
    res.update({"queries_compared": compared, "queries_nonempty": nonempty, "queries_differ": differ})
    res["ok"] = not res["problems"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench_fleet_scale")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kernels", type=int, default=2000, help="kernel rows per Kineto run of the template")
    ap.add_argument("--optimize", action="store_true", help="also run `tracedb optimize` and measure again")
    ap.add_argument("--empty-repeat", type=int, help="ingests of the batch into an empty lake (default --repeat)")
    ap.add_argument("--commit-every", type=int, default=1,
                    help="synthetic batches a commit (1: one Delta commit a table a batch, as nightly ingests)")
    ap.add_argument("--nightly-repeat", type=int, help="nightly batches into the N-run lake (default --repeat)")
    ap.add_argument("--code", type=Path, default=ROOT,
                    help="the tracedb source tree measured (e.g. a checkout of main for the baseline)")
    ap.add_argument("--keep", action="store_true", help="keep the built lake")
    ap.add_argument("--synthetic", action="store_true",
                    help="write the lake at once (bench/fleet_synthetic.py; schema >= 8): all but --tail batches")
    ap.add_argument("--tail", type=int, default=20, help="with --synthetic: the last batches built for real")
    ap.add_argument("--jobs", type=int, default=2, help="with --synthetic: processes writing files")
    ap.add_argument("--resume", action="store_true",
                    help="with --synthetic: keep the files of a build stopped before its commit")
    ap.add_argument("--validate", action="store_true",
                    help="only build the lake both ways (real batches, --synthetic) and compare them")
    ap.add_argument("--lake", type=Path, help="measure this lake (built before, e.g. with --keep) instead of building")
    args = ap.parse_args()
    sys.path.insert(0, str(args.code.resolve()))  # before any tracedb import: this process builds with it too
    ENV["PYTHONPATH"] = str(args.code.resolve())
    args.work.mkdir(parents=True, exist_ok=True)
    tpl = template(args.work, args.kernels)
    if args.validate:
        res = validate(args.work, tpl, args.runs, args.tail, args.jobs, reuse=args.keep)
        print(json.dumps(res, indent=1))
        sys.exit(0 if res["ok"] else 1)
    t = time.perf_counter()
    if args.lake:
        wh = args.lake
    elif args.synthetic:
        import fleet_synthetic

        wh = fleet_synthetic.build(args.work, tpl, args.runs, args.tail, args.jobs,
                                   log=lambda m: print(m, file=sys.stderr, flush=True), resume=args.resume)
    else:
        wh = build_lake(args.work, tpl, args.runs, args.commit_every)
    res: dict = {"runs": args.runs, "commit_every": args.commit_every, "code": str(args.code),
                 "synthetic": args.synthetic and not args.lake, "tail": args.tail if args.synthetic else None,
                 "build_s": round(time.perf_counter() - t, 1), "load_before": os.getloadavg()[0]}
    print(json.dumps(res), file=sys.stderr, flush=True)
    res.update(sizes(wh))
    note(res, "sizes")
    from tracedb import lake as lake_mod

    run = RUN["flat" if hasattr(lake_mod.Lake, "partitioned") else "partitioned"]
    res.update(queries(wh, run, args.repeat, args.work))
    note(res, "queries")
    empty = args.work / "wh_empty"
    base = []
    for k in range(args.repeat if args.empty_repeat is None else args.empty_repeat):
        shutil.rmtree(empty, ignore_errors=True)
        base.append(nightly(args.work, tpl, empty, 100 + k))
    shutil.rmtree(empty, ignore_errors=True)
    nights = [nightly(args.work, tpl, wh, k) for k in range(args.repeat if args.nightly_repeat is None
                                                             else args.nightly_repeat)]
    res.update({"nightly_empty_s": med([b["wall"] for b in base]) if base else None,
                "nightly_empty_rss_mb": med([b["rss"] for b in base]) if base else None,
                "nightly_s": med([n["wall"] for n in nights]), "nightly_rss_mb": med([n["rss"] for n in nights]),
                "commit_s": med([n["commit"] for n in nights]), "publish_s": med([n["publish"] for n in nights]),
                "lock_s": med([n["commit"] + n["publish"] for n in nights]),
                "merge_s": med([n["merge"] for n in nights]), "compact_s": med([n["compact"] for n in nights])})
    res["nights"] = [{k: round(v, 3) for k, v in n.items()} for n in nights]
    note(res, "nightly")
    victims = ([f"run00001-n{2 + k:05d}" for k in range(args.repeat)] if run == RUN["flat"]
               else [f"b{2 + k:05d}-run00001" for k in range(args.repeat)])
    rms = [tracedb("rm", v, "--warehouse", str(wh)) for v in victims]
    note(res, "rm")
    res.update({"rm_s": med([w for w, _, _ in rms]), "rm_rss_mb": med([r for _, r, _ in rms])})
    # the removed runs' rows stay in files other runs keep live: those files are read with
    # the live filter (Lake.whole_files) until a merge leaves them out
    res.update({f"after_rm_{k}": v for k, v in queries(wh, run, args.repeat, args.work).items()
                if k.startswith(("bi_", "flat_"))})
    note(res, "after_rm_queries")
    vac = [tracedb("vacuum", "--warehouse", str(wh)) for _ in range(args.repeat)]
    res.update({"vacuum_s": med([w for w, _, _ in vac]), "vacuum_rss_mb": med([r for _, r, _ in vac])})
    note(res, "vacuum")
    w, r, _ = tracedb("check", "--warehouse", str(wh))
    res.update({"check_s": round(w, 3), "check_rss_mb": round(r, 1)})
    note(res, "check")
    if args.optimize:
        w, r, _ = tracedb("optimize", "--warehouse", str(wh))
        res.update({"optimize_s": round(w, 3), "optimize_rss_mb": round(r, 1)})
        note(res, "optimize")
        res.update({f"after_optimize_{k}": v for k, v in {**sizes(wh), **queries(wh, run, args.repeat, args.work)}.items()})
    res["load_after"] = os.getloadavg()[0]
    (args.work / f"result-{args.runs}.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res))
    if not args.keep and not args.lake:
        shutil.rmtree(wh, ignore_errors=True)


if __name__ == "__main__":
    main()
