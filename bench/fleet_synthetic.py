"""The lake of N runs that nightly ingests and tiered compaction leave, written at once
(`bench_fleet_scale.py --synthetic`): 100,000 runs in well under an hour instead of ~4 hours
of real batches.

What B nightly batches leave in a lake of schema 8-9 is decided by the files' sizes alone:
each batch adds one file a data table (the template batch's rows, its runs renamed
`<run>-n<night>` under the night's ingest id) and compaction merges, in run order, the
files of a full size tier (`Lake.compaction_plan`). So the compaction is played on paper:
`Lake.compaction_plan` itself is called on the simulated files' sizes after each batch
(a merged file of n nights: n times a night's file times the ratio measured by writing a
ten-night file; the real 1,000-run lake's 19-night kernels file is 7.16 MB, this model
says 8.0: the nights' rows repeat, and a merge of a merged file with nine nights kept
only ~0.3 of the nights' bytes, so the ratio applies to nights, not to the inputs'
sizes, or merged files stay in their tier and snowball). Every planned merge is made, as
ingests made them before session 17 (since then an ingest makes only those within its own
rows and `tracedb optimize` the others: this is the lake of nightly ingests each followed by
the merges it left). Then:

- each file live at the end is written once (`lake.write_merged`, as a real merge writes
  it: rows ordered by run then device, tracedb's row groups and stats), holding the
  nights the simulated compaction put in it (the template's own files where it merged them);
- one Delta commit a data table adds them (`lake.add_action`: run_id, device and
  ingest_id min/max) and removes the template files merged away; `checksums` gets a row
  for every file the real ingests and merges would have written (those no longer live with
  the size they would have had and no hash: `check` reads only live files' rows);
- `runs`, `files` and `ingest_log` get every night's rows, in as many files as the real
  ingests leave (a file a batch, all merged by delta-rs's `optimize.compact` whenever a
  table reaches `ingest.META_FILES`: the same call makes the merged file here);
- a checkpoint a table (delta-rs writes one every 100 commits: a real lake's log is a
  checkpoint and fewer than 100 commits after it);
- the last `tail` batches are real (`bench_fleet_scale._build_flat`: merge, commit and
  the ingest's compaction), so the log ends in real commits and the compaction after them
  runs on the files written here; then `catalog.publish`, as the last ingest's commit.

What differs from a lake built by real batches: the Delta log holds one commit for the
bulk (not a few thousand), and no remove actions of merged-away files older than that
commit, as a lake whose older commits were vacuumed and checkpointed a week on (a real
lake built in 4 hours keeps every tombstone in its checkpoint for the 7-day retention);
the merged-away files are not on disk (vacuum has nothing to delete). Sizes of merged
files are the measured ratio's estimate until written, so a file near a tier's bound may
land in the tier next to the real one's.
"""

from __future__ import annotations

import concurrent.futures
import os
import secrets
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path

from fleet_batches import BATCH, _build_flat, _reingested, _renamed

META_ROWS = ("runs", "files", "ingest_log")


def night_id(base: str, night: int) -> str:
    return f"{base}-n{night:05d}"


class Template:
    """The template batch's rows: a data table's (per template file) and the metadata
    tables', and a night's copy of them (runs renamed, the night's ingest id)."""

    def __init__(self, wh: Path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        from tracedb import lake as lake_mod, schema

        src = lake_mod.Lake(wh)
        self.actions = {t: src.add_actions(t).to_pylist() for t in schema.TABLES}
        self.files = {a["path"]: pq.read_table(wh / a["path"]) for t in schema.TABLES for a in self.actions[t]}
        self.data = {t: pa.concat_tables([self.files[a["path"]] for a in self.actions[t]]) if self.actions[t] else None
                     for t in schema.TABLES}
        self.sorted = {p: _by_run(t) for p, t in self.files.items()}
        self.sorted.update({t: _by_run(d) for t, d in self.data.items() if d is not None})
        self.meta = {t: src.read_table(t) for t in META_ROWS}
        self.meta_files = {t: len(src.table(t).file_uris()) for t in (*META_ROWS, "checksums")}
        self.base = self.meta["runs"].column("ingest_id")[0].as_py()

    def rows(self, table: str, member) -> object:
        """A member of a file: a template file's path (its rows as they are) or a night."""
        if isinstance(member, str):
            return self.files[member]
        return self.night(self.data[table], member)

    def night(self, t, night: int):
        return _renamed(_reingested(t, night_id(self.base, night)), f"-n{night:05d}")

    def merged(self, table: str, members: list) -> object:
        """The rows of `members` as `lake.write_merged` orders them (by run_id, then device,
        a run's rows in their order), made of slices of the template sorted once: each
        (run, member) pair's rows are one slice under its run id (no sort, no gather)."""
        import pyarrow as pa

        pieces = []
        for m in members:
            data, spans = self.sorted[m if isinstance(m, str) else table]
            sfx, ing = ("", None) if isinstance(m, str) else (f"-n{m:05d}", night_id(self.base, m))
            pieces += [(run + sfx, data, start, n, ing) for run, (start, n) in spans.items()]
        pieces.sort(key=lambda p: p[0])
        if all(p[1] is pieces[0][1] for p in pieces):  # nights only: one gather (a concat of slices wrote slower)
            return self._gathered(pieces)
        out = []
        for run, data, start, n, ing in pieces:
            t = data.slice(start, n)
            t = t.set_column(t.schema.get_field_index("run_id"), "run_id", pa.repeat(pa.scalar(run, pa.string()), n))
            if ing is not None:
                t = t.set_column(t.schema.get_field_index("ingest_id"), "ingest_id", pa.repeat(pa.scalar(ing, pa.string()), n))
            out.append(t)
        return pa.concat_tables(out)


    @staticmethod
    def _gathered(pieces: list) -> object:
        import numpy as np
        import pyarrow as pa

        lengths = np.array([p[3] for p in pieces])
        starts = np.array([p[2] for p in pieces])
        offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        index = np.arange(lengths.sum()) + offsets
        step = 1 << 20  # a gather of more rows overflows a string column's 2 GiB (a file of hundreds of nights)
        t = pa.concat_tables([pieces[0][1].take(pa.array(index[i:i + step])) for i in range(0, len(index), step)])
        which = pa.array(np.repeat(np.arange(len(pieces)), lengths))
        for col, k in (("run_id", 0), ("ingest_id", 4)):
            values = pa.array([p[k] for p in pieces], pa.string())
            t = t.set_column(t.schema.get_field_index(col), col, pa.chunked_array(
                [values.take(which[i:i + step]) for i in range(0, len(which), step)]))
        return t


def _by_run(t) -> tuple:
    """`t` sorted as a merge sorts it (run_id, device; stable), and each run's (start, rows)."""
    import pyarrow.compute as pc

    t = t.take(pc.sort_indices(t, [("run_id", "ascending"), ("device", "ascending")]))
    runs = t.column("run_id").to_pylist()
    spans: dict = {}
    for i, r in enumerate(runs):
        start, n = spans.get(r, (i, 0))
        spans[r] = (start, n + 1)
    return t, spans


def calibrate(tpl: Template, scratch: Path) -> dict[str, tuple[int, float]]:
    """Per data table: the size of a night's file and the ratio a ten-night merge keeps."""
    from tracedb import lake as lake_mod, storage

    st = storage.open_storage(scratch)
    out = {}
    for t, d in tpl.data.items():
        if d is None or d.num_rows == 0:
            continue
        one = lake_mod.write_merged(st, t, [tpl.night(d, 1)], f"{t}/one.parquet", "x")
        ten = lake_mod.write_merged(st, t, [tpl.night(d, n) for n in range(1, 11)], f"{t}/ten.parquet", "x")
        out[t] = (one.size, ten.size / (10 * one.size))
    shutil.rmtree(scratch, ignore_errors=True)
    return out


def simulate(tpl: Template, table: str, nights: int, size: int, ratio: float) -> tuple[list[dict], list[dict], list[int]]:
    """The compaction on paper over nights 1..`nights`: (live files, every file written,
    compaction commits a night). A file: path, size, run_id (its least), members, tag."""
    import pyarrow as pa

    from tracedb import lake as lake_mod

    live = [{"path": a["path"], "size": a["size"], "rows": a["rows"], "run_id": a["run_id"], "members": [a["path"]],
             "tag": ""} for a in tpl.actions[table]]
    lo = min(r for r in tpl.data[table].column("run_id").to_pylist())
    nightly = tpl.data[table].num_rows
    L = lake_mod.Lake
    fake = types.SimpleNamespace(
        **{k: getattr(L, k) for k in ("TIER_ROWS", "FANOUT", "FILE_BYTES", "FILE_ROWS")},
        live_file_ranges=lambda _t, _p: pa.Table.from_pylist(
            [{k: r[k] for k in ("path", "size", "rows", "run_id")} for r in live]))
    for name in ("_full", "_tier", "_bounded"):
        setattr(fake, name, getattr(L, name).__get__(fake))
    written, merges = [], []
    for b in range(1, nights + 1):
        ing = night_id(tpl.base, b)
        f = {"path": f"{table}/part-{ing}-g{table[:3]}.parquet", "size": size, "rows": nightly,
             "run_id": f"{lo}-n{b:05d}", "members": [b], "tag": ing}
        live.append(f)
        written.append(f)
        chunks = lake_mod.Lake.compaction_plan(fake, table, {})
        for chunk in chunks:
            gone = {r["path"] for r in chunk}
            old = [r for r in live if r["path"] in gone]
            live = [r for r in live if r["path"] not in gone]
            members = [x for r in old for x in r["members"]]
            m = {"path": f"{table}/part-{ing}-c{secrets.token_hex(4)}.parquet",
                 "size": int(size * ratio * len(members)), "rows": sum(r["rows"] for r in old),
                 "run_id": min(r["run_id"] for r in old),
                 "members": members, "tag": ing}
            live.append(m)
            written.append(m)
        merges.append(len(chunks))
    return live, written, merges


_TPL: Template | None = None


def _init(wh: str, code: str) -> None:
    global _TPL
    sys.path.insert(0, code)
    _TPL = Template(Path(wh))


def _write(wh: str, table: str, f: dict):
    """One live file, written as `lake.write_merged` writes it, from rows already in its
    order (`Template.merged`; `lake.write_ordered`): its sort and gather were ~half the
    time. A worker process: the template is its own."""
    from tracedb import lake as lake_mod, storage

    st = storage.open_storage(Path(wh))
    if f.get("exists"):
        return _found(st, table, f)
    return lake_mod.write_ordered(st, table, _TPL.merged(table, f["members"]), f["path"])


def _key(members: list) -> frozenset:
    """What a file holds, as its ingest ids tell: nights, and "tpl" for the template's rows."""
    return frozenset(m if isinstance(m, int) else "tpl" for m in members)


def written_before(wh: Path, tpl: Template, table: str) -> dict:
    """Files of `table` a build stopped by an error wrote (not the template's): their `_key`
    (read from each file's ingest_id dictionary) -> path; unreadable ones are deleted."""
    import pyarrow.parquet as pq

    mine = {a["path"] for a in tpl.actions[table]}
    out = {}
    for p in sorted((wh / table).glob("*.parquet")):
        rel = f"{table}/{p.name}"
        if rel in mine:
            continue
        try:
            col = pq.read_table(p, columns=["ingest_id"], read_dictionary=["ingest_id"]).column(0)
        except Exception:  # noqa: BLE001 - a file cut short by the stop
            p.unlink()
            continue
        ids = {v for c in col.chunks for v in c.dictionary.to_pylist()}
        out[frozenset(int(i.rsplit("-n", 1)[1]) if i.startswith(f"{tpl.base}-n") else "tpl" for i in ids)] = rel
    return out


def _found(st, table: str, f: dict):
    """The DataFile of a file written before (its row groups' statistics are exact)."""
    import pyarrow.parquet as pq

    from tracedb import lake as lake_mod

    md = pq.ParquetFile(st.root / f["path"]).metadata
    names = [md.schema.column(i).name for i in range(md.num_columns)]
    stats = {c: [md.row_group(g).column(names.index(c)).statistics for g in range(md.num_row_groups)]
             for c in ("run_id", "device", "ingest_id")}
    lo = {c: min(s.min for s in v) for c, v in stats.items()}
    hi = {c: max(s.max for s in v) for c, v in stats.items()}
    size, digest = st.size_and_hash(f["path"])
    return lake_mod.DataFile(table, lo["run_id"], lo["device"], f["path"], md.num_rows, size, digest,
                             ingest_id=lo["ingest_id"], run_hi=hi["run_id"], device_hi=hi["device"],
                             ingest_hi=hi["ingest_id"])


def meta_file_counts(tpl: Template, merges: list[int]) -> dict[str, int]:
    """Files each metadata table holds after the nights (`ingest._compact`: a file a commit,
    all merged once a table holds `META_FILES`); `merges`: compaction commits a night."""
    from tracedb import ingest as ingest_mod

    n = dict(tpl.meta_files)
    for k in merges:
        for t in n:
            n[t] += 1 + (k if t == "checksums" else 0)  # each compaction commit records its file's checksum
        for t in n:
            if n[t] >= ingest_mod.META_FILES:
                n[t] = 1
    return n


def build(work: Path, tpl_dir: Path, runs: int, tail: int = 20, jobs: int = 2, log=print, resume: bool = False) -> Path:
    """The lake of `runs` runs at WORK/wh_<runs> (see the docstring); `resume`: keep the
    files a build stopped before its commit wrote there."""
    from tracedb import lake as lake_mod, schema

    wh = work / f"wh_{runs}"
    tpl = Template(tpl_dir / "wh")
    resume = (resume and (wh / lake_mod.LAKE_JSON).is_file()  # and nothing committed yet
              and lake_mod.Lake(wh).versions() == lake_mod.Lake(tpl_dir / "wh").versions())
    if not resume:
        shutil.rmtree(wh, ignore_errors=True)
        shutil.copytree(tpl_dir / "wh", wh, copy_function=os.link)
    lk = lake_mod.Lake(wh)
    nights = max(0, runs // BATCH - 1 - tail)
    t0 = time.perf_counter()
    sizes = calibrate(tpl, Path(tempfile.mkdtemp(dir=work)))
    plans = {t: simulate(tpl, t, nights, *sizes[t]) for t in sizes}
    todo = [(t, f) for t, (live, _, _) in plans.items() for f in live if f["tag"]]
    if resume:  # a build stopped by an error: the files it wrote are kept, the others go
        before = {t: written_before(wh, tpl, t) for t in plans}
        for t, f in todo:
            rel = before[t].pop(_key(f["members"]), None)
            if rel is not None:
                f.update(path=rel, exists=True)
        for rel in (r for b in before.values() for r in b.values()):
            (wh / rel).unlink()
        log(f"  resumed: {sum(1 for _, f in todo if f.get('exists'))} of {len(todo)} files written before")
    log(f"  plan: {nights} nights, {len(todo)} files to write, ~{sum(f['size'] for _, f in todo) / 1e9:.1f} GB "
        f"({time.perf_counter() - t0:.0f} s)")
    written: list = []
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(jobs, multiprocessing.get_context("spawn"), initializer=_init,  # delta-rs: no fork
                                                initargs=(str(tpl_dir / "wh"), str(Path(lake_mod.__file__).parent.parent))) as ex:
        futs = [ex.submit(_write, str(wh), t, f) for t, f in sorted(todo, key=lambda x: -x[1]["size"])]
        for k, fut in enumerate(concurrent.futures.as_completed(futs)):
            written.append(fut.result())
            if k % 50 == 0:
                log(f"  written {k + 1}/{len(futs)} ({time.perf_counter() - t0:.0f} s)")
    # one commit a data table: the files live at the end; the template's merged away removed
    now = int(time.time() * 1000)
    live_paths = {f["path"] for live, _, _ in plans.values() for f in live}
    dead = [lake_mod.DataFile(t, f["run_id"], "", f["path"], 0, f["size"], "", f["tag"])
            for t, (_, every, _) in plans.items() for f in every if f["path"] not in live_paths]
    sums = sorted(dead + written, key=lambda f: f.ingest_id)
    merges = [sum(m[i] for _, _, m in plans.values()) for i in range(nights)]
    counts = meta_file_counts(tpl, merges)
    with lk.lock():
        _meta_appends(lk, "checksums", _checksum_rows(sums), counts["checksums"])
        for t in plans:
            mine = [f for f in written if f.table == t]
            gone = [a for a in tpl.actions[t] if a["path"] not in live_paths]
            lk.transact(t, [lake_mod.add_action(f, now) for f in mine] + [lake_mod.remove_action(a, now) for a in gone])
        for t in META_ROWS:
            rows = [_reingested(tpl.meta[t], night_id(tpl.base, b)) for b in range(1, nights + 1)]
            rows = [_renamed(r, f"-n{b:05d}") for b, r in enumerate(rows, 1)]
            _meta_appends(lk, t, rows, counts[t])
        for t in schema.ALL_TABLES:
            lk.table(t).create_checkpoint()
    log(f"  bulk committed: {nights} nights ({time.perf_counter() - t0:.0f} s); {tail} real batches next")
    _build_flat(wh, tpl_dir, lake_mod.Lake(tpl_dir / "wh"), lk, runs, first=nights + 1)  # and publishes
    log(f"  built {runs} runs in {time.perf_counter() - t0:.0f} s")
    return wh


def _checksum_rows(files: list) -> list:
    import pyarrow as pa

    from tracedb import lake as lake_mod

    rows = [{"table_name": f.table, "run_id": f.run_id, "path": f.rel, "size_bytes": f.size,
             "sha256": f.sha256, "ingest_id": f.ingest_id} for f in files]
    t = pa.Table.from_pylist(rows, schema=lake_mod.delta_schema("checksums"))
    return [t.slice(i, 1) for i in range(t.num_rows)]


def _meta_appends(lk, table: str, rows: list, files: int) -> None:
    """Append a metadata table's rows (a list of tables, in order) so that it ends with
    `files` live files: all but the last `files - 1` in one append merged with what it
    held (delta-rs's `optimize.compact`, as `ingest._compact`), then one append each."""
    import pyarrow as pa
    from deltalake import write_deltalake

    if not rows:
        return
    if files >= len(lk.table(table).file_uris()) + len(rows):  # never merged: a file a night
        for r in rows:
            write_deltalake(lk.table(table), r, mode="append", storage_options=lk._opts)
        return
    keep = min(files - 1, len(rows) - 1)
    head, rest = rows[:len(rows) - keep], rows[len(rows) - keep:]
    write_deltalake(lk.table(table), pa.concat_tables(head), mode="append", storage_options=lk._opts)
    lk.table(table).optimize.compact()
    for r in rest:
        write_deltalake(lk.table(table), r, mode="append", storage_options=lk._opts)
