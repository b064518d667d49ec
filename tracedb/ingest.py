"""`tracedb ingest`: find runs, sniff and read every trace, write parquet, commit groups.

Data flows one way: readers parse (each source file on its own, in a worker process
with --jobs > 1) and `store.FileWriter` writes their batches into the lake's partition
folders, with no lock held; then, per group of runs, the lake commits them (Delta Lake,
under the commit lock, see `tracedb.lake` for the publish protocol) and the catalog
publishes a new DuckDB snapshot. A file that fails is recorded with a one-line error and
leaves nothing behind, while the run's other files still land.

## Parallel reading (`--jobs N`, the CLI's default: one per core)

Sniffing, hashing and reading each file run in worker processes; only discovery, the
commits and the snapshot stay in the caller. `tracedb ingest` forks the workers from
itself right after discovery, having imported the readers and before it starts any
thread (`workers.ForkPoint`; the pool is made, and every sniff queued, before the
progress bar and the lake's threads start); elsewhere, e.g. `Warehouse.ingest` in a
user's process that may run threads, they fork from the process's forkserver, which
`tracedb ingest` has import the readers once (`workers.preload_forkserver`); a library call
leaves that process-wide setting alone (its workers import the readers with their first
task). Either way a worker starts in a few ms instead
of re-importing tracedb, pyarrow, duckdb and protobuf (~1 s each under `spawn`, which
made `--jobs 2` no faster than `--jobs 1`), and no DuckDB or delta-rs thread's lock can
be inherited mid-use. Forking from the caller saves the forkserver's interpreter and
imports, which ran beside the caller's start-up: 24 shipped traces, `--jobs 2`, first
read at 0.19-0.24 s instead of 0.63-0.76 s and 0.3-0.6 s less CPU for all processes
(`bench_jobs.py --phases`, see bench/RESULTS.md "Session 6: jobscale"). Workers get the
caller's environment at the start of each ingest. The workers' pyarrow is told pandas
and numpy are absent (`workers.arrow_without_pandas`: pyarrow imports
pandas on a process's first table, ~0.25 s of CPU per process, and numpy with itself, ~75 ms),
and the workers import no duckdb.
A new warehouse's Delta tables are created in a thread while the files are read, by the
workers or by the caller itself, after the rollups' DuckDB connection (`rollups.Writer`),
and then every table's handle and live files are read (`lake.Lake.preload`; at the
commit, ~60 ms of delta-rs for the 8-rank Kineto job ran beside the rollups' first
statements); the caller waits for them only at its first commit, once that group's
rollups are written (a small trace's read ends first: the rollups no longer wait for the lake).
Reads are queued run by run as their sniffs come back (queueing each group's largest
files first balanced the workers no better on the bench and held every read back until
all sniffs were in, so progress came in one burst). Commits go on in the caller while
the workers read the next runs, and so do the rollups: whenever the caller would wait
for a file and ROLLUP_EVERY_RUNS runs (or ROLLUP_EVERY_ROWS rows) are read but not
rolled up, it rolls them up then
(24 shipped traces: 0.21 s of rollups after the last read before, ~0.05 s now). A
commit and its snapshot cost ~0.15 s whether they land 1 run or 24 (`TRACEDB_TIMING`),
so they are not split further: the last one is the serial tail either way; within a
commit the Delta commits of different tables run in threads (`lake.concurrently`), and
the rollups of the runs not rolled up yet are computed beside the commit of their files
(`lake.Lake.commit`), as the new snapshot's file is made, on the rollups' DuckDB database. The
CLI then exits without the interpreter's teardown (0.12-0.2 s, `cli.main`). A worker that
dies (out-of-memory kill, a crash in native code) costs only the file it was reading:
the pool is rebuilt, the files it held are re-read one at a time, and the one that kills
its process again gets a one-line error. Measured with `bench/bench_jobs.py --phases` (see bench/RESULTS.md).

## What is read, and what a run's numbers say

A file that no reader claims (`errors.NotATraceError` from the sniff: a README, a log, a
config, an empty file) is not read: it is recorded in `files` with status `skipped` and
its run lands without it (a file named as PATH is the exception: reading it was asked for,
so it is an error). An ingest in which nothing at all is a trace is a request error, raised
before the warehouse is opened. Several Kineto traces of one run get their fallback ranks
(`discover.fallback_ranks`) before they are read, when the ranks the traces name
themselves are not known yet; when one turns out to take a rank another trace names
(`distributedInfo`), that trace is read again with a free one (`_rerank`: a run mixing
named and unnamed ranks, which costs one more read of the unnamed ones). A run's seconds
(`RunSummary.seconds`, the CLI's per-run line) are the sum of its files' read times,
measured where each was read: with workers, the caller's wait for a run read while it
committed the previous ones is near 0 and says nothing.
"""

from __future__ import annotations

import json
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from tracedb import etlink, faults, flops, formats, lake, rollups, schema, storage, timing
from tracedb.discover import (HIVE_NULL, RUN_LABELS, RunSpec, check_run_id, discover_runs, display,  # noqa: F401 (re-exported)
                              fallback_ranks, not_a_trace)
from tracedb.errors import NotATraceError, TracedbError, TraceFormatError, WarehouseError
from tracedb.formats.base import ReadContext
from tracedb import store as store_mod
from tracedb.store import FileResult, FileWriter  # noqa: F401 (FileResult re-exported)
from tracedb.validate import Validator
from tracedb import workers

# A commit lands at most this many runs, and at least every this many seconds.
COMMIT_EVERY_RUNS = 50
COMMIT_EVERY_SECONDS = 10.0
# With workers, the caller rolls up (`tracedb.rollups`) the runs read so far while it would
# wait for the next file, once this many are waiting, so the last commit's rollups are not
# all serial (24 shipped traces: 0.21 s of rollups after the last read with none). One
# computation of the eight metrics costs ~100 ms of CPU plus a few ms a run, taken from the
# workers on 2 cores: `bench_jobs.py --jobs 2`, 24 shipped traces, alternating windows at
# load ~2: 12 runs a batch 1.37-1.39x, 4 runs 1.27-1.31x; 24 fleet runs 1.61x / 1.58x.
# A batch also closes at this many rows of the tables the metrics read: their cost is
# ~6-8 us a row, so large runs' batches would leave most of it after the last read (24
# fleet runs of 7.5 k rows, load ~10, medians of 4: last read to exit 1.22 -> 0.84 s for
# 0.4 s more CPU before it, 7.9 -> 7.5 s wall; the shipped traces' batches stay at 12 runs;
# where the ingest gets about one core, that CPU shows: see bench/RESULTS.md, "Session 6: jobscale").
ROLLUP_EVERY_RUNS = 12
ROLLUP_EVERY_ROWS = 30_000


@dataclass
class RunSummary:
    run_id: str
    files: list[FileResult]  # the files read (or that failed)
    seconds: float  # reading its files took (the sum over its files, whichever process read them)
    # A problem of the run rather than of one trace: (where, message), e.g. a bad run.json.
    run_error: tuple[str, str] | None = None
    replaced: bool = True  # False: the run kept its previous version (or did not land)
    skipped: list[FileResult] = field(default_factory=list)  # files no reader claims: not read

    @property
    def rows(self) -> dict[str, int]:
        total = {t: 0 for t in schema.SOURCE_TABLES}
        for f in self.files:
            for t, n in f.rows.items():
                total[t] += n
        return total

    @property
    def errors(self) -> list[tuple[str, str]]:
        errs = [(f.path, f.error) for f in self.files if f.error]
        if self.run_error:
            errs.append(self.run_error)
        return errs


@dataclass
class IngestSummary:
    warehouse: Path | str
    runs: list[RunSummary]
    compacted: dict[str, int] = field(default_factory=dict)  # files merged away, per table (`_compact`)
    # the runs landed, but compacting the files after them failed (`tracedb optimize` retries)
    compaction_error: str | None = None
    # rows of the merges left to `tracedb optimize`, per table: above this ingest's budget
    # (`lake.Lake.ingest_compaction`)
    compaction_deferred: dict[str, int] = field(default_factory=dict)

    @property
    def compaction_hint(self) -> str | None:
        """A line telling that merges were left to `tracedb optimize`, or None."""
        if not self.compaction_deferred:
            return None
        rows = sum(self.compaction_deferred.values())
        return (f"merges of {rows:,} rows ({', '.join(sorted(self.compaction_deferred))}) are more than this ingest's "
                f"own rows: left to `tracedb optimize` (run it after the nightly ingests; docs/scale.md)")

    @property
    def errors(self) -> list[tuple[str, str]]:
        return [e for r in self.runs for e in r.errors]

    @property
    def ok(self) -> bool:
        return not self.errors


LABEL_DEPTH = 64  # run.json labels are flat; a deeper nesting is refused as invalid


def _depth(value) -> int:
    """How deeply lists and objects nest in a decoded JSON value (without recursion)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            todo.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _read_labels(path: Path | None) -> tuple[dict, str | None]:
    if path is None:
        return {}, None
    try:
        labels = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return {}, f"invalid run labels: {e}"
    except RecursionError:  # Python's decoder recurses per level: `[[[[...` 100,000 deep
        return {}, f"invalid run labels: nested deeper than {LABEL_DEPTH} levels"
    if not isinstance(labels, dict):
        return {}, "invalid run labels: expected a JSON object"
    if _depth(labels) > LABEL_DEPTH:  # json.dumps would recurse as deep when the run is written
        return {}, f"invalid run labels: nested deeper than {LABEL_DEPTH} levels"
    labels = {str(k): v for k, v in labels.items()}
    if "started_at" in labels and _timestamp(labels["started_at"]) is None:
        return labels, f"invalid run labels: started_at {labels['started_at']!r} is not an ISO 8601 timestamp"
    return labels, None


def _timestamp(value) -> datetime | None:
    """An ISO 8601 label as an aware datetime (UTC when no zone is given), else None."""
    if not isinstance(value, str):
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


@dataclass
class _Job:
    path: Path
    display: str
    rel: str
    run_id: str
    format: str | None
    ordinal: int
    root: storage.Storage  # the warehouse's storage (pickled into a worker: its location)
    ingest_id: str
    file_tag: str
    sniff_error: str | None = None
    rank: int | None = None  # when the trace itself names none (discover.fallback_ranks)
    rank_note: str | None = None


def _read_one(job: _Job) -> FileResult:
    """Read one trace into staging. Never raises: errors land in the result."""
    res = FileResult(path=job.display, rel=job.rel, format=job.format)
    start = time.perf_counter()
    try:
        res.size_bytes, res.sha256 = lake.size_and_hash(job.path)
    except OSError as e:
        res.error = f"cannot read: {e.strerror or e}"
        return res
    if job.sniff_error:
        res.error = job.sniff_error
        return res
    ctx = ReadContext(run_id=job.run_id, source_file=job.rel, file_ordinal=job.ordinal)
    fill = {"source_format": job.format, "source_file": job.rel}
    if job.rank is not None:
        fill["rank"] = job.rank  # fills only rows whose reader found no rank
    writer = FileWriter(job.root, job.run_id, job.ingest_id, job.file_tag, fill=fill)
    checks = Validator()
    try:
        for table, batch in formats.read(job.path, ctx, job.format):
            _store(writer.write, table, checks.check(table, batch))
        written = _store(writer.close)
        ctx.warnings.update(checks.finish())
        res.format = ctx.format or job.format  # a fallback reader may have read it
    except TracedbError as e:  # TraceFormatError (the source) or WarehouseError
        writer.abort()
        res.error = str(e)
    except MemoryError:
        writer.abort()  # the reader's frames are gone: the memory is back, the batch goes on
        res.error = ("out of memory while reading (every reader streams; what is held whole is one "
                     "element - a device's step stats, a MegEngine graph - or a file parsed whole under "
                     "TRACEDB_MAX_WHOLE_FILE_BYTES: lower it, or give the machine more memory)")
    except KeyboardInterrupt:
        writer.abort()
        raise
    except Exception as e:  # noqa: BLE001 - a reader bug on odd input must not stop the batch
        writer.abort()
        res.error = f"unexpected {type(e).__name__} while reading: {e}"
    else:
        res.rows = {t: 0 for t in schema.SOURCE_TABLES}
        for w in written:
            res.rows[w.table] += w.rows
        res.written = written
        res.metadata = ctx.metadata
        res.metadata.update(flops.device_facts(ctx.metadata))  # the GPU model the peak queries look up
        res.warnings = dict(getattr(ctx, "warnings", None) or {})
        res.own_rank = ctx.metadata.get("rank")
        if job.rank is not None and "rank" not in ctx.metadata:
            res.metadata["rank"] = job.rank
            res.warning = job.rank_note
        if sum(res.rows.values()) == 0:
            res.error = "no rows: the trace holds no events tracedb can store"
            for w in written:
                job.root.unlink(w.rel)
            res.written = []
    res.error = " ".join(res.error.split()) if res.error else None  # one line
    res.seconds = time.perf_counter() - start
    return res


def _store(fn, *args):
    """A write into the lake; its OSError (disk full, file size limit, permissions) is the
    warehouse's, not the source trace's."""
    try:
        return fn(*args)
    except OSError as e:
        raise WarehouseError(f"cannot write {getattr(e, 'filename', None) or 'a data file'}: "
                             f"{e.strerror or e} (the source file is not at fault)") from e


def _sniff(path: Path) -> tuple[str | None, str | None, bool]:
    """(format name, None, False), or (None, the one-line reason, whether it is no trace at
    all: no reader claims it, `NotATraceError`)."""
    try:
        return formats.detect(path).NAME, None, False
    except NotATraceError as e:
        return None, str(e), True
    except TraceFormatError as e:
        return None, str(e), False
    except OSError as e:
        return None, f"cannot read: {e.strerror or e}", False


def _plan(run: RunSpec, root: storage.Storage, ingest_id: str, start_index: int,
          sniffed: list[tuple[str | None, str | None, bool]]) -> tuple[list[_Job], list[FileResult]]:
    """Each file with its sniffed format and its ordinal among the run's files of that
    format; and the files no reader claims, skipped (unless named as PATH: then the
    read reports it)."""
    jobs: list[_Job] = []
    skipped: list[FileResult] = []
    counts: dict[str, int] = {}
    for i, (path, (fmt, err, unclaimed)) in enumerate(zip(run.files, sniffed)):
        rel = run.rel(path)
        if unclaimed and not run.named:
            skipped.append(_skipped(path, rel, not_a_trace(err)))
            continue
        ordinal = counts.get(fmt, 0) if fmt else 0
        if fmt:
            counts[fmt] = ordinal + 1
        jobs.append(_Job(path, display(path), rel, run.run_id, fmt, ordinal, root, ingest_id,
                         f"{ingest_id}-{start_index + i:05d}", err))
    # Several PyTorch (or Nsight Systems) traces of one run are several processes: each
    # keeps its own rank.
    for fmt in ("kineto", "nsys"):
        same = [j for j in jobs if j.format == fmt]
        if len(same) > 1:
            for j, (rank, note) in zip(same, fallback_ranks([j.path for j in same])):
                j.rank, j.rank_note = rank, note
    return jobs, skipped


def _skipped(path: Path, rel: str, why: str) -> FileResult:
    """A file that is not read, with its size on record (not its hash: a stray file may
    be a checkpoint of many GB, and hashing it would cost more than the traces' ingest)."""
    res = FileResult(path=display(path), rel=rel, skipped=why)
    try:
        res.size_bytes = path.stat().st_size
    except OSError:
        pass
    return res


def _rerank(jobs: list[_Job], results: list[FileResult]) -> list[_Job]:
    """After a run's reads: the Kineto traces whose fallback rank (given before anything
    was read, `_plan`) is not the one they get now that the ranks the traces name
    themselves are known: a fallback never takes a rank another trace of the run names
    (a trace of another program with `distributedInfo` rank 0 beside one without: the
    second is not rank 0 too). Returns those jobs with the new rank, to be read again."""
    kineto = [(j, r) for j, r in zip(jobs, results) if j.rank is not None and r.ok]
    taken = {r.own_rank for _, r in kineto if r.own_rank is not None}
    guessed = [(j, r) for j, r in kineto if r.own_rank is None]
    if not taken or not guessed:
        return []  # every trace names its rank, or none does: the plan's ranks stand
    redo = []
    for (j, r), (rank, note) in zip(guessed, fallback_ranks([j.path for j, _ in guessed], taken)):
        if rank != j.rank:
            j.rank, j.rank_note = rank, note
            redo.append(j)
        elif r.warning:
            r.warning = j.rank_note = note  # the same rank, now also clear of the named ones
    return redo


_DIED = ("the worker process reading this file died (killed, e.g. for running out of memory, "
         "or a crash in native code); the other files went on")


def _run_row(run: RunSpec, results: list[FileResult], labels: dict) -> dict:
    ok = [r for r in results if r.ok]
    # Run-level metadata: the first file's value of each key (every file's own is in `files`).
    metadata: dict = {}
    for r in ok:
        for k, v in r.metadata.items():
            metadata.setdefault(k, v)
    row = {
        "run_id": run.run_id,
        "ingested_at": datetime.now(timezone.utc),
        "source_files": [r.rel for r in ok],
        "formats": sorted({r.format for r in ok}),
        "labels": json.dumps(labels, sort_keys=True) if labels else None,
        "metadata": json.dumps(metadata, sort_keys=True, default=str) if metadata else None,
    }
    for key in ("model", "commit", "hardware"):
        if labels.get(key) is not None:
            row[key] = labels[key] if isinstance(labels[key], str) else json.dumps(labels[key])
    row["started_at"] = _timestamp(labels.get("started_at"))
    return row


def _labels_row(run: RunSpec, error: str, ingest_id: str, when: datetime) -> dict:
    """A `files` row for a run.json that could not be used, so the error is on record."""
    size, digest = lake.size_and_hash(run.labels_file) if run.labels_file and run.labels_file.is_file() else (0, "")
    return {"run_id": run.run_id, "path": RUN_LABELS, "size_bytes": size, "sha256": digest, "format": "run.json",
            **{f"rows_{t}": None for t in schema.SOURCE_TABLES}, "status": "error", "error": error, "seconds": 0.0,
            "ingest_id": ingest_id, "ingested_at": when, "metadata": None, "warnings": None}


def _file_row(r: FileResult, run_id: str, ingest_id: str, when: datetime) -> dict:
    return {
        "run_id": run_id, "path": r.rel, "size_bytes": r.size_bytes, "sha256": r.sha256,
        "format": r.format,
        **{f"rows_{t}": r.rows.get(t, 0) if r.status == "ok" else None for t in schema.SOURCE_TABLES},
        "status": r.status, "error": r.error or r.skipped, "seconds": round(r.seconds, 6),
        "ingest_id": ingest_id, "ingested_at": when,
        "metadata": json.dumps(r.metadata, sort_keys=True, default=str) if r.metadata else None,
        "warnings": json.dumps(r.warnings, sort_keys=True) if r.warnings else None,
    }


def ingest(
    paths: list[Path],
    warehouse: Path | str | storage.Storage | None = None,
    run_id: str | None = None,
    jobs: int = 1,
    exclude: tuple[str, ...] | list[str] = (),
    on_run: Callable[[RunSummary], None] | None = None,
    on_file: Callable[[FileResult], None] | None = None,
    partial: bool = False,
    on_plan: Callable[[list[RunSpec]], None] | None = None,
) -> IngestSummary:
    """Ingest runs into the warehouse; see the module docstring. Raises TracedbError only
    for problems with the request itself (no such path, warehouse cannot be opened).
    `on_plan` sees the runs found before anything is read; `on_file` each file as it is
    read, `on_run` each run as it lands (progress reporting)."""
    # No catalog (DuckDB) import before the first read: the lake's opener thread imports it
    # (~50-75 ms of the caller's start-up before; the workers, which import this module,
    # need no DuckDB at all).
    warehouse = storage.open_storage(warehouse)  # `Warehouse` hands its own down
    with timing.phase("discover"):
        runs = discover_runs([Path(p) for p in paths], run_id, tuple(exclude))
    if jobs < 1:
        raise TracedbError("--jobs must be at least 1")
    n_files = sum(len(run.files) for run in runs)
    with timing.phase("start pool"):  # before any thread of ours (progress, lake): it may fork this process
        pool = workers.Workers(min(jobs, n_files)) if min(jobs, n_files) > 1 else None
    landing = None
    results: list[FileResult] = []  # the files read of the run being read
    marked = ExitStack()
    try:
        _sniff_all(runs, pool)
        if on_plan:
            on_plan(runs)
        landing = _Landing(warehouse, on_run)
        # Ids sort in the order ingests started, to the microsecond (`Lake.live_file_rows`
        # tells a crash's left-behind rows from a later failed attempt's by that order; with
        # whole seconds, two ingests of one second were ordered by their random suffix).
        # An older id of the same second ('...T080512-ab12cd') sorts before ('-' < '.').
        ingest_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%f") + "-" + secrets.token_hex(3)
        planned = _queue(runs, warehouse, ingest_id, pool)
        _some_trace(paths, planned)  # before the lake is opened: no warehouse made for nothing
        # live from before its first file to its last commit: vacuum spares its files (`tracedb.storage`)
        marked.enter_context(warehouse.ingest_mark(lake.INGESTS_DIR, ingest_id))
        _submit(planned, pool)  # the reads (which write files) only once the ingest is marked live
        landing.start()
        rows: list[int] = []  # each run's rows of the tables the metrics read, in landing order
        for run, run_jobs, skipped in planned:
            results = []
            told = [job.rank_note is None for job in run_jobs]  # a guessed rank is told once it is final
            for job, tell in zip(run_jobs, told):
                if pool and _roll_up_now(rows, landing.unrolled()) and not pool.ready(job.file_tag):
                    landing.roll_up()  # the caller would only wait: it rolls up the runs read so far meanwhile
                results.append(pool.result(job.file_tag) if pool else _read_one(job))
                if on_file and tell:
                    on_file(results[-1])
            for job in _rerank(run_jobs, results):  # read again with a rank no other trace names
                i = run_jobs.index(job)
                landing.drop(results[i].written)
                job.file_tag += "r"
                results[i] = _read_one(job)
            for res, tell in zip(results, told):
                if on_file and not tell:
                    on_file(res)
            for res in skipped:
                if on_file:
                    on_file(res)
            for where, message in run.errors:  # what discovery could not list
                results.append(FileResult(path=display(where), rel=run.rel(where), error=message))
                if on_file:
                    on_file(results[-1])
            etlink.link_run(results, warehouse)  # an execution trace's ops to its Kineto trace's
            # how long reading it took (by workers, in parallel with other runs): not how
            # long this process waited for it, which is ~0 for a run read while it committed
            landing.add(run, results, skipped, ingest_id, partial, sum(r.seconds for r in results))
            rows.append(sum(n for r in results for t, n in r.rows.items() if t in rollups.WHOLE_SOURCES))
            results = []  # the landing's now
        landing.commit()
        # under the ingest's mark: vacuum spares its files
        compacted, deferred, compaction_error = landing.compact(ingest_id)
    except BaseException:
        if landing:
            landing.discard(results + (pool.finished() if pool else []))
        raise
    finally:
        if pool:
            with timing.phase("close pool"):
                pool.close()
        if landing:
            landing.close()
        marked.close()
    return IngestSummary(warehouse.root, landing.summaries, compacted, compaction_error, deferred)


def _some_trace(paths: list[Path], planned: list[tuple[RunSpec, list[_Job], list[FileResult]]]) -> None:
    """TracedbError when nothing found is a trace: every file skipped as no reader claims
    it, and no run folder (`run.json`) or unreadable folder to report on."""
    if any(jobs or run.errors or run.labels_file for run, jobs, _ in planned):
        return
    skipped = [f for _, _, s in planned for f in s]
    names = ", ".join(f.rel for f in skipped[:3]) + (", ..." if len(skipped) > 3 else "")
    raise TracedbError(f"no trace files found in {', '.join(display(Path(p)) for p in paths)}: "
                       f"no reader claims any of its {len(skipped)} file(s) ({names})")


def _roll_up_now(rows: list[int], unrolled: int) -> bool:
    """Whether the last `unrolled` runs read (`rows`: each run's rows of the tables the
    metrics read) make a rollup batch: ROLLUP_EVERY_RUNS runs, or ROLLUP_EVERY_ROWS rows."""
    return unrolled >= ROLLUP_EVERY_RUNS or (unrolled > 0 and sum(rows[-unrolled:]) >= ROLLUP_EVERY_ROWS)


def _sniff_all(runs: list[RunSpec], pool: workers.Workers | None) -> None:
    """With workers, every sniff is queued at once (a few ms each)."""
    for i, path in enumerate(p for run in runs for p in run.files) if pool else ():
        pool.submit(f"sniff-{i:06d}", _sniff, path, lambda: (None, _DIED, False))


def _queue(runs: list[RunSpec], warehouse: storage.Storage, ingest_id: str,
           pool: workers.Workers | None) -> list[tuple[RunSpec, list[_Job], list[FileResult]]]:
    """Each run with its read jobs and its files skipped as no trace, from the sniffs
    (with workers, `_sniff_all` queued them all)."""
    planned, index = [], 0
    sniffs = iter(range(sum(len(run.files) for run in runs)))
    for run in runs:
        sniffed = ([pool.result(f"sniff-{next(sniffs):06d}") for _ in run.files] if pool
                   else [_sniff(p) for p in run.files])
        run_jobs, skipped = _plan(run, warehouse, ingest_id, index, sniffed)
        index += len(run.files)
        planned.append((run, run_jobs, skipped))
    return planned


def _submit(planned: list[tuple[RunSpec, list[_Job], list[FileResult]]], pool: workers.Workers | None) -> None:
    """With workers, every read queued (behind the sniffs in the workers' queue anyway)."""
    for j in (j for _, run_jobs, _ in planned for j in run_jobs) if pool else ():
        pool.submit(j.file_tag, _read_one, j,
                    lambda j=j: FileResult(path=j.display, rel=j.rel, format=j.format, error=_DIED))


class _Landing:
    """The caller's side of an ingest after the reads: the runs read but not committed,
    their rollups, and the commits of groups of them into the lake."""

    def __init__(self, warehouse: storage.Storage, on_run: Callable[[RunSummary], None] | None) -> None:
        self.warehouse, self.on_run = warehouse, on_run
        self.pending: list[tuple[lake.RunCommit, RunSummary]] = []
        self.rolled = 0  # pending[:rolled] have their rollup files
        self.summaries: list[RunSummary] = []
        self.rows = 0  # rows of the data and rollup files committed (`compact`'s budget)
        self.roll: rollups.Writer | None = None  # from the first rollup on
        self.opening = self.store_future = self.roll_future = self.preload_future = None
        # A new warehouse's Delta tables (0.04-0.1 s of delta-rs, ~0.25 s with its import in a
        # fresh process) and the rollups' DuckDB connection are made in a thread while the
        # files are read (by the workers, or by this process: delta-rs releases the GIL; the
        # 17 MB TF text ingest, bench_tf_text.py, was ~40 ms faster so); an existing lake opens
        # at once (a cheap check, and no file is written into a warehouse that needs `tracedb migrate`).
        folder = warehouse.local_path()  # on object storage the check is requests: opened at once
        self.later = folder is not None and not (folder / lake.LAKE_JSON).exists() and not (folder / lake.CATALOG).exists()
        self.store = None if self.later else _open_lake(warehouse)
        self.last_commit = time.monotonic()

    def start(self) -> None:
        """As the reads begin: a new lake and the rollups' connection, in a thread."""
        self.opening = ThreadPoolExecutor(1, thread_name_prefix="tracedb-open-lake")
        # the rollups' first (they need no lake: a small run's read is over before the rest)
        self.roll_future = self.opening.submit(rollups.Writer)  # its DuckDB connection, metrics parsed
        if self.later:
            self.store_future = self.opening.submit(_open_lake, self.warehouse)
        self.preload_future = self.opening.submit(self._preload)  # then the lake's handles (commit waits for it)
        self.last_commit = time.monotonic()

    def _preload(self) -> None:
        """The lake's table handles and live files (`lake.Lake.preload`), read while the
        files are read rather than at the commit; a failure here is left for the commit
        to meet and report."""
        try:
            (self.store or self.store_future.result()).preload()
        except Exception:  # noqa: BLE001 - the commit reads the same logs and reports
            pass

    def unrolled(self) -> int:
        return len(self.pending) - self.rolled

    def drop(self, written: list[lake.DataFile]) -> None:
        """Delete files written for a read that is done again (`_rerank`)."""
        (self.store or lake.Lake(self.warehouse)).discard(written)

    def add(self, run: RunSpec, results: list[FileResult], skipped: list[FileResult], ingest_id: str,
            partial: bool, seconds: float) -> None:
        """A run whose files are all read joins the pending group, which commits when full.
        `skipped`: its files that no reader claims, on record but no part of it; a run of
        only those (and no run.json) is no run, and no error."""
        labels, label_error = _read_labels(run.labels_file)
        run_error = (f"{run.run_id}/{RUN_LABELS}", label_error) if label_error else None
        if not results and (run.labels_file or not skipped):
            why = f" ({len(skipped)} file(s) skipped: no reader claims them)" if skipped else ""
            run_error = (display(run.root), "no trace files in this run folder" + why)
        ok = [r for r in results if r.ok]
        when = datetime.now(timezone.utc)
        # A run is replaced only by a complete version (every file read and written,
        # its run.json valid); --partial accepts what is readable, marked as such.
        complete = len(ok) == len(results) and run_error is None
        replace = bool(ok) and (complete or partial)
        file_rows = [_file_row(r, run.run_id, ingest_id, when) for r in results + skipped]
        if label_error:
            file_rows.append(_labels_row(run, label_error, ingest_id, when))
        if not replace and ok:
            (self.store or lake.Lake(self.warehouse)).discard([w for r in ok for w in r.written])
        written = [w for r in ok for w in r.written] if replace else []
        self.pending.append((
            lake.RunCommit({**_run_row(run, results, labels), "status": "complete" if complete else "partial"},
                           written, file_rows, replace=replace, ingest_id=ingest_id),
            RunSummary(run.run_id, results, seconds, run_error, replace, skipped),
        ))
        # Runs land in groups: a reader sees whole runs, and a commit (a few Delta
        # commits and a new snapshot) is paid once a group rather than once a run.
        if len(self.pending) >= COMMIT_EVERY_RUNS or time.monotonic() - self.last_commit >= COMMIT_EVERY_SECONDS:
            self.commit()

    def roll_up(self) -> None:
        if self.rolled < len(self.pending):
            with timing.phase("rollups"):
                self.roll = self.roll or self.roll_future.result()
                _add_rollups(self.roll, self.warehouse, [c for c, _ in self.pending[self.rolled:]])
            self.rolled = len(self.pending)

    def commit(self) -> None:
        if self.pending:
            # Before the commit lock (other writers wait for it): the runs' rollups, then
            # the group's files merged into one a table (`store.merge_group`), while a new
            # lake is made and its handles opened
            self.roll_up()
            self._merge()
            self.store = self.store or self.store_future.result()  # the lake is needed from here on only
            if self.preload_future:
                self.preload_future.result()  # its handles are used by one thread at a time
            _commit(self.store, [c for c, _ in self.pending], None, self.roll or self.roll_future.result())
            self.rows += sum(f.rows for c, _ in self.pending for f in c.files)
            for _, summary in self.pending:
                self.summaries.append(summary)
                if self.on_run:
                    self.on_run(summary)
            self.pending.clear()
            self.rolled = 0
        self.last_commit = time.monotonic()

    def _merge(self) -> None:
        """The group's files of each table merged into one (`store.merge_group`); the
        first run that has files carries them in its commit (a commit adds every run's
        files in one Delta commit a table, `lake.Lake.commit`)."""
        runs = [c for c, _ in self.pending if c.replace and c.files]
        files = [f for c in runs for f in c.files]
        if len(files) < 2:
            return
        with timing.phase("merge"):
            merged = _store(store_mod.merge_group, self.warehouse, files, runs[0].ingest_id)
        for c in runs:
            c.files = []
        runs[0].files = merged

    def compact(self, ingest_id: str) -> tuple[dict[str, int], dict[str, int], str | None]:
        """After the last commit: merge each table's files where a tier is full, within a
        budget of this ingest's rows (`_compact`). A failure is reported, not raised: the
        runs have landed."""
        import duckdb
        from deltalake.exceptions import DeltaError

        if self.store is None or not self.summaries:
            return {}, {}, None
        try:
            with timing.phase("compact"):
                return *_compact(self.store, ingest_id, self.rows), None
        except (DeltaError, OSError, duckdb.Error, TracedbError) as e:
            return {}, {}, (f"the runs landed, but compacting the lake's files after them failed (`tracedb optimize` "
                            f"compacts them): {' '.join(str(e).split())}")

    def discard(self, finished: list) -> None:
        """After a failure: what was written for runs that did not commit is no one's
        (`finished`: the files read of the run being read, the pool's results not yet
        collected); delete it now (vacuum would, after its retention)."""
        store = self.store or lake.Lake(self.warehouse)
        store.discard([w for c, _ in self.pending for w in c.files])
        store.discard([w for r in finished if isinstance(r, FileResult) for w in r.written])

    def close(self) -> None:
        if self.opening:
            self.opening.shutdown()
            if self.roll is None and not self.roll_future.cancelled() and self.roll_future.exception() is None:
                self.roll = self.roll_future.result()  # made, never used (an interrupted ingest)
        if self.roll:
            self.roll.close()


def _open_lake(warehouse: storage.Storage) -> lake.Lake:
    from tracedb import catalog

    with timing.phase("open lake"):
        return catalog.open_lake(warehouse, create=True)


def _add_rollups(roll: rollups.Writer, warehouse: storage.Storage, runs: list[lake.RunCommit]) -> None:
    """Each replaced run's rollup files (`tracedb.rollups`), computed from its files of the
    tables the metrics read that it is about to commit, join its files (one computation for
    the group; their rows tell the Writer whether to copy them, `rollups.TABLE_ROWS`)."""
    todo = [c for c in runs if c.replace
            and any(rollups.has_inputs(t, {f.table for f in c.files}) for t in schema.ROLLUP_TABLES)]
    runs_files = [(c.run_row["run_id"], c.ingest_id, [f for f in c.files if f.table in rollups.WHOLE_SOURCES])
                  for c in todo]
    made = _store(lambda: roll.write_runs(warehouse, [(r, i, [f.rel for f in fs]) for r, i, fs in runs_files],
                                          rows=sum(f.rows for _, _, fs in runs_files for f in fs)))
    for c in todo:
        c.files += [f for f in made if f.run_id == c.run_row["run_id"]]


# A metadata table (`runs`, `files`, `ingest_log`, `checksums`) gains a file a commit;
# compacted after an ingest once it has this many (delta-rs optimize: the table is small).
META_FILES = 32
# Compaction chunks of more bytes than this are merged one at a time (`_compact`).
CONCURRENT_MERGE_BYTES = 16 << 20


def _compact(store: lake.Lake, ingest_id: str, rows: int) -> tuple[dict[str, int], dict[str, int]]:
    """Tiered compaction after an ingest that wrote `rows` rows (`lake.Lake.compaction_plan`):
    where a table's tier holds `Lake.FANOUT` files, they (or the first of them that fit a
    merge's bounds) are merged into one, written outside the commit lock (files never
    change once written) and committed under it, with a new snapshot; a chunk that another
    writer changed meanwhile is dropped (`commit_compacted`). Only the merges within the
    ingest's budget (`Lake.ingest_compaction`: MERGE_BUDGET x `rows`) are made; returns the
    files merged away and the rows left to `tracedb optimize`, per table. An ingest that
    fills no tier pays one reading of the logs."""
    from tracedb import catalog

    published = store.published()
    plans, left = store.ingest_compaction(published, rows)
    deferred: dict[str, int] = {}
    for table, chunk in left:
        deferred[table] = deferred.get(table, 0) + lake.chunk_rows(chunk)
    meta = [t for t in lake.META_WRITTEN if len(store.table(t).file_uris()) >= META_FILES]
    if not plans and not meta:
        return {}, deferred
    # small merges in threads; a large one alone (a merge's memory is a row group and a batch
    # of each input, ~0.5 GB for kernels: two at once would double it)
    large = [sum(r["size"] for r in c) > CONCURRENT_MERGE_BYTES for _, c in plans]
    small = iter(lake.concurrently([lambda t=t, c=c: store.write_compacted(t, c, published, ingest_id)
                                    for (t, c), big in zip(plans, large) if not big]))
    written = [store.write_compacted(t, c, published, ingest_id) if big else next(small)
               for (t, c), big in zip(plans, large)]
    done: dict[str, int] = {}
    with store.lock():
        try:
            for (table, chunk), merged in zip(plans, written):
                done[table] = done.get(table, 0) + store.commit_compacted(table, chunk, merged, published)
            for table in meta:  # a file a commit: `runs` is read whole at each commit and publish
                store._guard()
                done[table] = store.compact_table(table)
        finally:
            if any(done.values()):
                catalog.publish(store)
    return {t: n for t, n in done.items() if n}, deferred


def _commit(store: lake.Lake, runs: list[lake.RunCommit], roll_up: Callable[[], None] | None,
            duck: rollups.Writer) -> None:
    """The store commits the group, then the catalog publishes the snapshot: one lock.
    Beside the commit of the files read (in threads: DuckDB and delta-rs release the GIL),
    `roll_up` adds the runs' rollup files and the new snapshot's DuckDB file is made (on
    the rollups' DuckDB database: no database started for it)."""
    import duckdb
    from deltalake.exceptions import DeltaError

    from tracedb import catalog

    made: list[catalog.NewSnapshot] = []

    def beside() -> None:
        lake.concurrently([lambda: made.append(catalog.new_snapshot(store, duck.con)), *([roll_up] if roll_up else [])])

    faults.step("ingest_before_commit")
    with store.lock():
        try:
            try:
                with timing.phase("commit"):
                    store.commit(runs, beside)
            except (DeltaError, OSError, duckdb.Error) as e:
                raise WarehouseError(f"warehouse error: commit to {store.root} failed (the runs keep their previous "
                                     f"version): {' '.join(str(e).split())}") from e
            try:
                with timing.phase("publish"):
                    catalog.publish(store, made[0])
            except (OSError, duckdb.Error) as e:
                raise WarehouseError(
                    f"warehouse error: the runs were committed to {store.root}, but its snapshot {lake.CATALOG} could "
                    f"not be written (the one in place is left whole; readers build a new one from the lake): "
                    f"{' '.join(str(e).split())}") from e
        finally:
            for new in made:
                new.discard()
