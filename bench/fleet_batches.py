"""A fleet lake's nightly batches, as bench_fleet_scale.py and fleet_synthetic.py write them:
the template batch's files under each night's ingest id with its runs renamed
`<run>-n<night>`, committed a batch a commit, then the ingest's compaction (`_build_flat`).
Shared by both, so that neither imports the other."""

from __future__ import annotations

import sys
import time
from pathlib import Path

BATCH = 50


def _build_flat(wh: Path, tpl: Path, src, lk, runs: int, first: int = 1, nights: list | None = None) -> Path:
    """Schema 8's lake of `runs` runs (see the docstring): a batch a commit, then compaction;
    batches from `first` (`synthetic.build` writes the ones before). `nights`, if given,
    gets each batch's compaction (seconds, files merged): bench_compaction_spread.py."""
    import pyarrow.parquet as pq

    from tracedb import catalog, ingest as ingest_mod, lake as lake_mod, schema

    tables = list(schema.TABLES)
    actions = {t: src.add_actions(t).to_pylist() for t in tables}
    meta = {t: src.read_table(t) for t in ("runs", "files", "ingest_log")}
    data = {t: [pq.read_table(tpl / "wh" / a["path"]) for a in actions[t]] for t in tables}
    t0 = time.perf_counter()
    for b in range(first, runs // BATCH):
        rename = {r: f"{r}-n{b:05d}" for r in meta["runs"].column("run_id").to_pylist()}
        ingest_id = f"{meta['runs'].column('ingest_id')[0].as_py()}-n{b:05d}"
        files = []
        for table in tables:
            parts = [_renamed(_reingested(d, ingest_id), rename) for d in data[table]]
            rel = f"{table}/part-{ingest_id}-g{table[:3]}.parquet"
            f = lake_mod.write_merged(lk.storage, table, parts, rel, ingest_id)
            if f is not None:
                files.append(f)
        rows = {t: _renamed(_reingested(meta[t], ingest_id), rename) for t in ("ingest_log", "files", "runs")}
        with lk.lock():
            lk._add_files(files)
            _append(lk, rows)
        t = time.perf_counter()
        done, _ = ingest_mod._compact(lk, ingest_id, sum(f.rows for f in files))  # its budget: the batch's rows
        if nights is not None:
            nights.append((round(time.perf_counter() - t, 3), sum(done.values())))
        if b % 20 == 0:
            print(f"  batch {b}: {b * BATCH + BATCH} runs, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    with lk.lock():
        catalog.publish(lk)
    return wh


def _reingested(t, ingest_id: str):
    import pyarrow as pa

    col = t.schema.get_field_index("ingest_id")
    return t if col < 0 else t.set_column(col, "ingest_id", pa.repeat(pa.scalar(ingest_id), t.num_rows))


def _renamed(t, rename: dict):
    """`t` with its run ids renamed: `rename` a dict, or a suffix every run id takes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = t.schema.get_field_index("run_id")
    if isinstance(rename, str):
        return t.set_column(col, "run_id", pc.binary_join_element_wise(t.column(col), pa.scalar(rename), ""))
    return t.set_column(col, "run_id", pa.array([rename[r] for r in t.column("run_id").to_pylist()], pa.string()))


def _append(lk, rows: dict) -> None:
    from deltalake import write_deltalake

    from tracedb import lake as lake_mod

    lake_mod.concurrently([lambda t=t, d=d: write_deltalake(lk.table(t), d, mode="append", storage_options=lk._opts)
                           for t, d in rows.items()])
