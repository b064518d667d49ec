"""Nsight Systems SQLite export (`nsys export --type sqlite report.nsys-rep`).

Nsight Systems writes its report (`.nsys-rep`, formerly `.qdrep`) in an undocumented
binary format; `nsys export --type sqlite` turns it into a SQLite database with one table
per kind of event, and only the tables of what was captured. Table and column names moved
between export schema 2.9 (nsys 2022) and 3.16+ (nsys 2024.6): `EXPORT_META_DATA` became
`META_DATA_EXPORT`, columns were added (`greenContextId`, `memKind`, ...) and ENUM_* tables
appeared. So every table is looked up in `sqlite_master` and every column with
`PRAGMA table_info`: a missing table gives no rows, a missing column NULL.

What lands where:
- `kernels`: `CUPTI_ACTIVITY_KIND_KERNEL` (kind kernel; `name` the demangled name from
  `StringIds`, the short and mangled names in `params`; grid, block, registers per
  thread, shared memory = static + dynamic, stream, correlation), `..._MEMCPY` (kind
  memcpy, `bytes`, `copy_kind` HtoD/DtoH/DtoD/HtoH/PtoP/... from `copyKind`, named
  `Memcpy HtoD (Pageable -> Device)` as Kineto names copies) and `..._MEMSET` (kind
  memset, `Memset (Device)`), on `GPU:<deviceId>`.
- `runtime_calls`: `..._RUNTIME` (CUDA runtime and driver API; `eventClass` 0 is
  `cuda_runtime`, 1 `cuda_driver`; class 67 rows are a call's CUDA backtrace, repeating
  its correlation id: not calls, their `callchainId` goes to the call's `params`), on
  CPU:0 with the thread and process of `globalTid`;
  the API version suffix is dropped from the name (`cudaLaunchKernel_v7000` ->
  `cudaLaunchKernel`, as CUPTI's callback names and Kineto write it; the raw name is in
  `params.api_name`). Each call carries the activity it launched (`kernel_name`,
  `kernel_count`, `kernel_start_ns`, `kernel_device`).
- `annotations`: NVTX ranges from `NVTX_EVENTS` (push/pop and start/end ranges, event
  types 59/60 and the NVTXT 70/71), category `nvtx`, with the thread that opened the range;
  `params` has the NVTX domain (named by its `NvtxDomainCreate` event), the NVTX category
  name, whether it is a push/pop or start/end range, the thread that ended it and the
  payload. A range still open at the end of the capture has a NULL duration.
- `events`: `..._SYNCHRONIZATION` (category `cuda_sync`, named by its sync type: `Stream
  sync`, `Event sync`, ...; on its GPU and stream) and NVTX marks (category `nvtx_mark`,
  phase `i`).
- `steps`: NVTX ranges that mark steps (see below), with the device span of the
  activities launched in each.
- the file's metadata (`files.metadata`, `runs.metadata`): `devices` (per `GPU:N`, from
  `TARGET_INFO_GPU`: model, SMs, memory, clocks, bandwidth, compute capability, bus, and
  the raw row), `nsys` (export metadata with its schema version, session start, the
  processes with their pids, names and ranks), `rank` when the file holds one rank.

Reading: SQLite reads the file (a gzipped export is first decompressed to a temporary
file); the rows of the tables read are held in memory while the links are made (a few
hundred bytes a row), and batches are emitted table by table. Each table's rows are
turned into columns once, and every output column is made from whole columns (one
comprehension each, `base.ColumnBuilder`), not row by row: what varies little is worked
out once per distinct value (a runtime call's name, category and params per (name,
class, process, return value, callchain); an NVTX range's params per (kind, threads,
domain, category, color, range id) when it has no payload; pid and tid per globalTid;
a step number per range name), and the GC is paused while the reader computes (in
tracedb's own processes, `jsonstream.gc_paused`): the rows held would otherwise be walked
by every collection. The statements are the ones a plain `sqlite3` read of the needed
columns runs (bench/bench_decoders.py times the ingest against them).

Times: the export's timestamps are ns since the session start; rows are in absolute epoch
ns (`TARGET_INFO_SESSION_START_TIME.utcEpochNs` + timestamp; 0 where the table is missing),
so the files of an MPI job's ranks line up. Durations are `end - start` exactly.

Processes and threads: `globalTid` / `globalPid` pack the pid and tid (pid = bits 24-47,
tid = bits 0-23); `thread_id` is the tid. A process's rank: a thread named `MPI Rank N`
(nsys's MPI tracing names them, in `ThreadNames` or by an NVTX thread-naming event); else,
for a file of one CUDA process, `RANK` / `OMPI_COMM_WORLD_RANK` / `PMI_RANK` /
`PMIX_RANK` / `SLURM_PROCID` / `MV2_COMM_WORLD_RANK` in the launched process's
environment (`META_DATA_CAPTURE`) or nsys's own (`TARGET_INFO_SYSTEM_ENV`); else, with
several CUDA processes in one file, their order by pid (with a warning). A file of one
process without one leaves the rank to the ingest (several files of a run: by file name).

Links: an activity's launch call is the runtime call of the same process with its
`correlationId` (`launch_start_ns`). Its op (`kernels.node_name`, `link = 'launch'`) is
the innermost NVTX push/pop range on the launch call's thread that encloses the call's
start (start <= t <= end; the latest start wins, then the shortest): with PyTorch's
`torch.autograd.profiler.emit_nvtx()` that is the aten op, whose range name
`aten::addmm, seq = 12, op_id = 3, sizes = [...]` is cut at the first `, seq = ` /
`, op_id = ` / `, sizes = ` / `, stashed seq = ` (the full name stays in `annotations`).
Start/end ranges do not nest and may end on another thread, so they name no op. The
same enclosing range is the runtime call's `node_name`. NVTX ranges are not `nodes`
rows, so `node_seq` stays NULL.

Steps: an NVTX range (either kind, any domain) whose name matches
`ProfilerStep#N`, `step N`, `Step N`, `step_N`, `train_step N`, `iteration N`, `iter N`
(case-insensitive, `#`, `:`, `=`, `_`, `-` or spaces between word and number; the whole
name) marks step N of its process (rank). Set TRACEDB_NSYS_STEP_REGEX to a regular
expression with one group capturing the step number (matched against the whole name) to
use another rule. A host row takes the step whose range (on any thread of its process)
contains its start; an activity its launch call's step.

An `.nsys-rep` / `.qdrep` report (sniffed by its `NVIDIA Tegra Profiler Report` header) is
claimed so that it gets a one-line error naming the command that converts it; run
discovery skips one that has its SQLite export of the same stem beside it.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
import os
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from tracedb.errors import TracedbError, TraceFormatError
from tracedb.formats.base import (CUPTI_COPY_KINDS, GZIP_MAGIC, BatchBuilder, ColumnBuilder, ReadContext, open_trace,
                                  read_head)
from tracedb.formats.jsonstream import gc_paused

NAME = "nsys"
DESCRIPTION = "Nsight Systems SQLite export (nsys export --type sqlite): CUDA kernels, copies, API calls, NVTX"

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"
# Table names of an nsys export; one of them in the head claims it. nsys creates its
# schema before it writes data, StringIds, ThreadNames, ANALYSIS_* and TARGET_INFO_* first,
# so their CREATE statements lie in the first pages (in both fixtures, within 64 KB).
_MARKERS = (b"StringIds", b"CUPTI_ACTIVITY_KIND_", b"NVTX_EVENTS", b"TARGET_INFO_", b"ANALYSIS_DETAILS",
            b"EXPORT_META_DATA", b"META_DATA_EXPORT", b"ThreadNames")
_ACTIVITY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
_EVENT_TABLES = _ACTIVITY_TABLES + ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                                   "NVTX_EVENTS")

STEP_REGEX_ENV = "TRACEDB_NSYS_STEP_REGEX"
DEFAULT_STEP_REGEX = r"(?:ProfilerStep#|(?:train(?:ing)?[ _-]?)?(?:step|iteration|iter))[\s#:=_-]*(\d+)"
_OP_SUFFIX = re.compile(r", (?:seq|op_id|sizes|stashed seq) = ")
_API_VERSION = re.compile(r"_v\d{4,}$")
_MPI_RANK = re.compile(r"\bMPI Rank (\d+)\b")
_RANK_ENV = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK")

# NVTX_EVENTS.eventType (ENUM_NSYS_EVENT_TYPE)
_NVTX_CATEGORY = (33, 64)
_NVTX_MARK = (34, 65)
_NVTX_THREAD = (39, 72)
_NVTX_PUSH_POP = (59, 70)
_NVTX_START_END = (60, 71)
_NVTX_DOMAIN = 75

# Built-in enums (ENUM_* tables exist only from schema 3.x; those win where present).
_UVM_COPY = {11, 12, 13}
_MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
             6: "Managed Static", 7: "Unknown"}
_SYNC_TYPE = {0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync", 4: "Context sync"}
_EVENT_CLASS = {0: "cuda_runtime", 1: "cuda_driver"}
_BACKTRACE = 67  # TRACE_PROCESS_EVENT_CUDABACKTRACE: a call's backtrace, not a call
_PAYLOAD = ("int64Value", "uint64Value", "doubleValue", "int32Value", "uint32Value", "floatValue", "jsonText")
_NO_PAYLOAD = (None,) * len(_PAYLOAD)
_BATCH_ROWS = 65536

_KERNEL_COLS = ("device", "device_raw", "rank", "step", "stream", "kind", "name", "node_name", "start_ns",
                "duration_ns", "bytes", "copy_kind", "correlation_id", "launch_start_ns", "grid", "block",
                "registers_per_thread", "shared_memory_bytes", "params", "link")
_CALL_COLS = ("device", "device_raw", "rank", "step", "category", "name", "start_ns", "duration_ns",
              "thread_id", "correlation_id", "node_name", "kernel_name", "kernel_count", "kernel_start_ns",
              "kernel_device", "seq", "params")
_ANNOTATION_COLS = ("device", "device_raw", "rank", "step", "category", "name", "start_ns", "duration_ns",
                    "thread_id", "seq", "params")
_EVENT_COLS = ("device", "device_raw", "rank", "step", "category", "name", "phase", "start_ns",
               "duration_ns", "thread_id", "stream", "correlation_id", "seq", "params")
_STEP_COLS = ("device", "device_raw", "rank", "step", "name", "start_ns", "duration_ns", "thread_id",
              "device_start_ns", "device_end_ns", "kernel_count")


def sniff(head: bytes) -> bool:
    """An SQLite database whose first pages name an nsys table, or an nsys report."""
    if head.startswith(REPORT_MAGIC):
        return True
    return head.startswith(SQLITE_MAGIC) and any(m in head for m in _MARKERS)


def step_regex() -> re.Pattern:
    """The step rule: $TRACEDB_NSYS_STEP_REGEX (one group: the step number), else the default."""
    raw = os.environ.get(STEP_REGEX_ENV)
    if raw is None or not raw.strip():
        return re.compile(DEFAULT_STEP_REGEX, re.I)
    try:
        rx = re.compile(raw)
    except re.error as e:
        raise TracedbError(f"{STEP_REGEX_ENV}={raw!r}: not a regular expression ({e})") from e
    if rx.groups < 1:
        raise TracedbError(f"{STEP_REGEX_ENV}={raw!r}: needs a group capturing the step number, like 'step (\\d+)'")
    return rx


def pid_tid(global_id: Any) -> tuple[int | None, int | None]:
    """(pid, tid) of a serialized nsys globalTid / globalPid."""
    if type(global_id) is not int:
        return None, None
    return (global_id >> 24) & 0xFFFFFF, global_id & 0xFFFFFF


def op_name(range_name: str | None) -> str | None:
    """An NVTX range's op name: PyTorch emit_nvtx's `aten::mm, seq = 3, ...` -> `aten::mm`."""
    if range_name is None:
        return None
    m = _OP_SUFFIX.search(range_name)
    return range_name[: m.start()] if m else range_name


def api_name(raw: str | None) -> str | None:
    """`cudaLaunchKernel_v7000` -> `cudaLaunchKernel` (the CUPTI callback name)."""
    return _API_VERSION.sub("", raw) if raw else raw


class _Db:
    """The export, opened read-only: its tables, their columns, and the strings."""

    def __init__(self, path: Path):
        uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
        try:
            self.con = sqlite3.connect(uri, uri=True)
            self.tables = {n for (n,) in self.con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as e:
            raise TraceFormatError(f"not a readable SQLite database: {e}") from e
        if "StringIds" not in self.tables or not self.tables.intersection(_EVENT_TABLES):
            raise TraceFormatError("an SQLite database without Nsight Systems tables "
                                   "(StringIds and CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS)")
        self._cols: dict[str, set[str]] = {}
        self.strings = dict(self.rows("StringIds", ("id", "value")))

    def columns(self, table: str) -> set[str]:
        if table not in self._cols:
            self._cols[table] = ({r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')}
                                 if table in self.tables else set())
        return self._cols[table]

    def rows(self, table: str, wanted: tuple[str, ...], order: str | None = None) -> list[tuple]:
        """The table's rows as tuples of `wanted` columns (NULL where the column is missing);
        [] where the table is."""
        cols = self.columns(table)
        if not cols:
            return []
        select = ", ".join(f'"{c}"' if c in cols else "NULL" for c in wanted)
        sql = f'SELECT {select} FROM "{table}"'
        keys = [f'"{c}"' for c in (order or "").split(",") if c in cols]
        if keys:
            sql += " ORDER BY " + ", ".join(keys)
        try:
            return self.con.execute(sql).fetchall()
        except sqlite3.DatabaseError as e:
            raise TraceFormatError(f"table {table}: {e}") from e

    def string(self, v: Any) -> str | None:
        """A StringIds reference (or a text column of an older export) as text."""
        if v is None:
            return None
        if type(v) is int:
            return self.strings.get(v)
        return str(v)

    def enum(self, table: str, builtin: dict[int, Any]) -> dict[int, Any]:
        """An ENUM_* table's labels (schema 3.x), else the built-in map."""
        got = {i: label for i, label in self.rows(table, ("id", "label"))}
        return {**builtin, **got} if got else builtin


def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    # the rows of the tables read are held until the last batch: the GC is paused while the
    # reader computes (in tracedb's own processes), or every collection walks them again
    return gc_paused(_read(path, ctx))


def _read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    if read_head(path, len(REPORT_MAGIC)).startswith(REPORT_MAGIC):
        raise TraceFormatError(f"an Nsight Systems report, not its SQLite export: convert it with "
                               f"`nsys export --type sqlite {path.name}` and ingest the .sqlite file")
    steps_rx = step_regex()
    with _plain(path) as plain:
        db = _Db(plain)
        try:
            yield from _Reader(db, ctx, steps_rx).rows()
        except sqlite3.DatabaseError as e:
            raise TraceFormatError(f"corrupt SQLite database: {e}") from e
        finally:
            db.con.close()


@contextlib.contextmanager
def _plain(path: Path) -> Iterator[Path]:
    """The export as a plain file SQLite can open: a gzipped one is decompressed (within
    TRACEDB_MAX_DECOMPRESSED_BYTES) to a temporary file, removed afterwards."""
    with open(path, "rb") as f:
        gzipped = f.read(2) == GZIP_MAGIC
    if not gzipped:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="tracedb-nsys-") as tmp:
        plain = Path(tmp) / "export.sqlite"
        try:
            with open_trace(path) as src, open(plain, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (OSError, EOFError) as e:
            raise TraceFormatError(f"truncated or corrupt gzip: {e}") from e
        yield plain


class _Reader:
    def __init__(self, db: _Db, ctx: ReadContext, steps_rx: re.Pattern):
        self.db, self.ctx, self.steps_rx = db, ctx, steps_rx
        start = db.rows("TARGET_INFO_SESSION_START_TIME", ("utcEpochNs",))
        self.base = start[0][0] if start and type(start[0][0]) is int else 0
        self.thread_names = {gtid: db.string(nid) for nid, gtid in db.rows("ThreadNames", ("nameId", "globalTid"))}

    # ---- NVTX -----------------------------------------------------------------------

    def _nvtx(self) -> None:
        """NVTX rows: the names of domains, categories and threads; the ranges (annotations,
        ops, steps) and marks (events) as columns (`_nvtx_columns`)."""
        db = self.db
        raw = db.rows("NVTX_EVENTS", ("start", "end", "eventType", "text", "textId", "globalTid", "endGlobalTid",
                                      "domainId", "category", "color", "rangeId", "int64Value", "uint64Value",
                                      "doubleValue", "int32Value", "uint32Value", "floatValue", "jsonText"),
                      order="start,end")
        self.domains: dict[Any, str] = {}
        self.categories: dict[tuple, str] = {}
        kept: list[tuple] = []
        for r in raw:
            kind = r[2]
            if kind in _NVTX_PUSH_POP or kind in _NVTX_START_END or kind in _NVTX_MARK:
                kept.append(r)
            elif kind == _NVTX_DOMAIN:
                self.domains[r[7]] = r[3] if r[3] is not None else db.string(r[4])
            elif kind in _NVTX_CATEGORY:
                self.categories[(r[7], r[8])] = r[3] if r[3] is not None else db.string(r[4])
            elif kind in _NVTX_THREAD and r[5] is not None:
                self.thread_names.setdefault(r[5], r[3] if r[3] is not None else db.string(r[4]))
        is_mark = [r[2] in _NVTX_MARK for r in kept]
        self.ranges = self._nvtx_columns([r for r, m in zip(kept, is_mark) if not m], ranges=True)
        self.marks = self._nvtx_columns([r for r, m in zip(kept, is_mark) if m], ranges=False)

    def _nvtx_columns(self, rows: list[tuple], ranges: bool) -> dict[str, list]:
        """NVTX_EVENTS rows of ranges (or marks) as columns: start, end, name, gtid, pid,
        tid, push (a push/pop range), params (JSON, with the pid)."""
        string = self.db.string
        cols = _columns(rows, 18)
        pid, tid = _split_ids(cols[5])
        # A range's params are made of its kind, threads, domain, category, color, range id
        # (integers: INTEGER columns hold no integral REAL, so equal keys are equal values)
        # and payload: made once per distinct key for the rows without payload.
        keys = list(zip(cols[2], *cols[5:11]))
        made = {key: self._nvtx_json(key, _NO_PAYLOAD, ranges) for key in set(keys)}
        params = [made[key] for key in keys]
        payload = [col for col in cols[11:] if col.count(None) < len(col)]
        for i in sorted({i for col in payload for i, v in enumerate(col) if v is not None}):
            params[i] = self._nvtx_json(keys[i], tuple(col[i] for col in cols[11:]), ranges)
        names = [text if text is not None else string(i) for text, i in zip(cols[3], cols[4])]
        return {"start": cols[0], "end": cols[1], "name": names, "gtid": cols[5], "pid": pid, "tid": tid,
                "push": [k in _NVTX_PUSH_POP for k in cols[2]], "params": params}

    def _nvtx_json(self, key: tuple, payload: tuple, ranges: bool) -> str | None:
        """An NVTX range's or mark's params (module docstring) as JSON, from its
        NVTX_EVENTS (eventType, globalTid, endGlobalTid, domainId, category, color, rangeId)
        and payload (_PAYLOAD)."""
        kind, gtid, end_gtid, domain, category, color, range_id = key
        params: dict[str, Any] = {}
        if domain is not None and domain != 0:
            params["domain"] = self.domains.get(domain, f"domain {domain}")
        if category is not None:
            params["nvtx_category"] = self.categories.get((domain, category),
                                                          self.categories.get((0, category), category))
        if color is not None:
            params["color"] = f"#{color & 0xFFFFFFFF:08x}"
        for name, v in zip(_PAYLOAD, payload):
            if v is not None:
                params["payload"] = v
                params["payload_type"] = name.removesuffix("Value").removesuffix("Text")
        if ranges:
            params["range"] = "push_pop" if kind in _NVTX_PUSH_POP else "start_end"
            if range_id is not None:
                params["range_id"] = range_id
            if end_gtid is not None and end_gtid != gtid:
                params["end_thread_id"] = pid_tid(end_gtid)[1]
        params["pid"] = pid_tid(gtid)[0]
        return _json(params)

    def _enclosing(self, starts: list, gtids: list) -> list[int | None]:
        """For each runtime call (its start and globalTid), the index in self.ranges of the
        innermost push/pop range on its thread that encloses its start (module docstring).

        A sweep per thread over the ranges by start (outer first on a tie) with a stack of
        the open ones (a range ended before the next one starts is popped) gives each range
        its parent: the stack's top when it is pushed. The stack at time t is then the
        chain of parents of the last range started by t, less its ended members, so a
        call's range is the first of that chain not ended before the call starts."""
        inf = float("inf")
        r_start = self.ranges["start"]
        end = [e if e is not None else inf for e in self.ranges["end"]]  # still open: to the end
        by_thread: dict[Any, list[int]] = {}
        for i, (gtid, push) in enumerate(zip(self.ranges["gtid"], self.ranges["push"])):
            if push:
                by_thread.setdefault(gtid, []).append(i)
        calls: dict[Any, list[int]] = {gtid: [] for gtid in by_thread}
        for k, gtid in enumerate(gtids):
            if gtid in calls:
                calls[gtid].append(k)
        out: list[int | None] = [None] * len(starts)
        for gtid, ranges in by_thread.items():
            rs = sorted(ranges, key=lambda i: (r_start[i], -end[i]))
            rs_start, rs_end = [r_start[i] for i in rs], [end[i] for i in rs]
            parent = _parents(rs_start, rs_end)
            for k in calls[gtid]:
                t = starts[k]
                c = bisect.bisect_right(rs_start, t) - 1
                while c >= 0 and rs_end[c] < t:
                    c = parent[c]
                if c >= 0:
                    out[k] = rs[c]
        return out

    # ---- processes, ranks, steps ----------------------------------------------------

    def _ranks(self, pids: set[int]) -> dict[int, int]:
        ranks: dict[int, int] = {}
        for gtid, name in self.thread_names.items():
            m = _MPI_RANK.search(name or "")
            pid = pid_tid(gtid)[0]
            if m and pid in pids:
                ranks.setdefault(pid, int(m[1]))
        missing = sorted(pids - set(ranks))
        if len(pids) == 1 and missing:
            rank = self._env_rank()
            if rank is not None:
                ranks[missing[0]] = rank
        elif len(missing) > 1 or (missing and ranks):
            taken = set(ranks.values())
            free = (r for r in range(len(pids) + len(taken)) if r not in taken)
            for pid in missing:
                ranks[pid] = next(free)
            self.ctx.warn(f"{len(missing)} processes name no MPI rank: ranks by pid order")
        return ranks

    def _env_rank(self) -> int | None:
        env: dict[str, str] = {}
        for name, value in self.db.rows("META_DATA_CAPTURE", ("name", "value")):
            if isinstance(name, str) and name.endswith(":ENVIRONMENT_VARIABLE") and isinstance(value, str):
                k, _, v = value.partition("=")
                env.setdefault(k, v.strip('"'))
        for name, value in self.db.rows("TARGET_INFO_SYSTEM_ENV", ("name", "value")):
            if name == "DeviceEnvironment" and isinstance(value, str):
                for kv in value.split(";"):
                    k, _, v = kv.partition("=")
                    env.setdefault(k, v)
        for key in _RANK_ENV:
            if env.get(key, "").strip().isdigit():
                return int(env[key])
        return None

    def _steps(self) -> None:
        """Step spans per process from the NVTX ranges that mark steps (each distinct range
        name matched once)."""
        self.steps: dict[Any, list[tuple]] = {}  # pid -> sorted (start, end, n, name, gtid)
        number: dict[str, int] = {}
        for name in set(self.ranges["name"]):
            m = self.steps_rx.fullmatch(name or "") if name else None
            if m:
                try:
                    number[name] = int(m[1])
                except (TypeError, ValueError):
                    continue
        if number:
            r = self.ranges
            for start, end, name, gtid, pid in zip(r["start"], r["end"], r["name"], r["gtid"], r["pid"]):
                if end is not None and name in number:
                    self.steps.setdefault(pid, []).append((start, end, number[name], name, gtid))
        for spans in self.steps.values():
            spans.sort()
        self._step_starts = {pid: [s[0] for s in spans] for pid, spans in self.steps.items()}
        # the latest end among each span and those starting before it: where it is before t,
        # no earlier span holds t (`step_at` stops there)
        self._step_reach = {pid: list(itertools.accumulate((s[1] for s in spans), max))
                            for pid, spans in self.steps.items()}

    def steps_of(self, pids: list, times: list) -> list[int | None]:
        """`step_at` of each (pid, time); all None without step ranges."""
        if not self.steps:
            return [None] * len(times)
        return [self.step_at(pid, t) for pid, t in zip(pids, times)]

    def step_at(self, pid: Any, t: Any) -> int | None:
        """The step whose span (of this process) contains t: the latest-starting one."""
        starts = self._step_starts.get(pid)
        if not starts or t is None:
            return None
        spans, reach = self.steps[pid], self._step_reach[pid]
        for k in range(bisect.bisect_right(starts, t) - 1, -1, -1):
            if reach[k] < t:  # no span from here back reaches t
                return None
            if t <= spans[k][1]:  # (and spans[k][0] <= t, by the bisection)
                return spans[k][2]
        return None

    # ---- metadata -------------------------------------------------------------------

    def _metadata(self, ranks: dict[int, int], pids: set[int]) -> None:
        db = self.db
        export = dict(db.rows("META_DATA_EXPORT", ("name", "value")) or db.rows("EXPORT_META_DATA", ("name", "value")))
        names = {pid: name for _, pid, name in db.rows("PROCESSES", ("globalPid", "pid", "name")) if pid in pids}
        info: dict[str, Any] = {
            "schema_version": export.get("EXPORT_SCHEMA_VERSION"),
            "product_version": export.get("EXPORT_PRODUCT_VERSION"),
            "session_start_utc_ns": self.base or None,
            "processes": [{"pid": pid, "name": names.get(pid), "rank": ranks.get(pid)} for pid in sorted(pids)],
            "export": export,
        }
        self.ctx.metadata["nsys"] = info
        devices: dict[str, Any] = {}
        cols = sorted(db.columns("TARGET_INFO_GPU"))
        for row in db.rows("TARGET_INFO_GPU", tuple(cols)):
            g = dict(zip(cols, row))
            idx = g.get("cuDevice") if g.get("cuDevice") is not None else g.get("id")
            major, minor = g.get("computeMajor", g.get("smMajor")), g.get("computeMinor", g.get("smMinor"))
            devices[f"GPU:{idx}"] = {
                "model": g.get("name"), "sm_count": g.get("smCount"), "memory_bytes": g.get("totalMemory"),
                "clock_hz": g.get("clockRate"), "memory_bandwidth_bytes_per_s": g.get("memoryBandwidth"),
                "l2_cache_bytes": g.get("l2CacheSize"), "chip": g.get("chipName"), "bus": g.get("busLocation"),
                "uuid": g.get("uuid"),
                "compute_capability": f"{major}.{minor}" if major is not None and minor is not None else None,
                "nsys": g,
            }
        if devices:
            self.ctx.metadata["devices"] = devices
        if len(set(ranks.values())) == 1 and len(ranks) == len(pids):
            self.ctx.metadata["rank"] = next(iter(ranks.values()))

    # ---- rows -----------------------------------------------------------------------

    def _activities(self) -> list[list]:
        """Kernels, copies and sets as columns (start, end, device, stream, corr, gpid, kind,
        name, bytes, copy_kind, grid, block, regs, shared, params JSON), by start."""
        db = self.db
        acts: list[tuple] = []
        for r in db.rows("CUPTI_ACTIVITY_KIND_KERNEL",
                         ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName",
                          "shortName", "mangledName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
                          "registersPerThread", "staticSharedMemory", "dynamicSharedMemory", "contextId",
                          "launchType", "gridId", "localMemoryPerThread", "localMemoryTotal",
                          "sharedMemoryExecuted", "graphNodeId", "name")):
            demangled, short, mangled = db.string(r[6]), db.string(r[7]), db.string(r[8])
            name = demangled or short or mangled or db.string(r[25])
            params = {k: v for k, v in (("short_name", short), ("mangled_name", mangled), ("context_id", r[18]),
                                        ("launch_type", r[19]), ("grid_id", r[20]),
                                        ("local_memory_per_thread", r[21]), ("local_memory_total", r[22]),
                                        ("shared_memory_executed", r[23]), ("graph_node_id", r[24]))
                      if v is not None}
            shared = [v for v in (r[16], r[17]) if v is not None]
            acts.append((r[0], r[1], r[2], r[3], r[4], r[5], "kernel", name, None, None,
                         _dims(r[9:12]), _dims(r[12:15]), r[15], sum(shared) if shared else None, _json(params)))
        copy_kinds = db.enum("ENUM_CUDA_MEMCPY_OPER", {})
        mem_kinds = db.enum("ENUM_CUDA_MEM_KIND", _MEM_KIND)
        for r in db.rows("CUPTI_ACTIVITY_KIND_MEMCPY",
                         ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind",
                          "srcKind", "dstKind", "srcDeviceId", "dstDeviceId", "contextId", "graphNodeId",
                          "migrationCause")):
            copy = CUPTI_COPY_KINDS.get(r[7])
            src, dst = mem_kinds.get(r[8]), mem_kinds.get(r[9])
            name = f"Memcpy {copy or 'Unknown'}" + (f" ({src} -> {dst})" if src and dst else "")
            params = {k: v for k, v in (("copy_kind_label", copy_kinds.get(r[7])), ("src_kind", src),
                                        ("dst_kind", dst), ("src_device", r[10]), ("dst_device", r[11]),
                                        ("context_id", r[12]), ("graph_node_id", r[13]),
                                        ("migration_cause", r[14])) if v is not None}
            if r[7] in _UVM_COPY:
                params["unified_memory"] = True
            if r[7] not in CUPTI_COPY_KINDS:
                params["copy_kind_id"] = r[7]
            acts.append((r[0], r[1], r[2], r[3], r[4], r[5], "memcpy", name, r[6], copy, None, None, None, None,
                         _json(params)))
        for r in db.rows("CUPTI_ACTIVITY_KIND_MEMSET",
                         ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "value",
                          "memKind", "contextId", "graphNodeId")):
            kind = mem_kinds.get(r[8]) if r[8] is not None else None
            params = {k: v for k, v in (("value", r[7]), ("mem_kind", kind), ("context_id", r[9]),
                                        ("graph_node_id", r[10])) if v is not None}
            acts.append((r[0], r[1], r[2], r[3], r[4], r[5], "memset", f"Memset ({kind or 'Device'})", r[6], None,
                         None, None, None, None, _json(params)))
        acts.sort(key=lambda a: (a[0], a[1]))
        return _columns(acts, 15)

    def _calls(self) -> list[list]:
        """CUDA runtime and driver calls as columns (start, gtid, end, class, corr, nameId,
        returnValue, callchainId, name, pid, tid), by start; a backtrace row's callchain on
        its call, the backtrace rows dropped."""
        raw = self.db.rows("CUPTI_ACTIVITY_KIND_RUNTIME",
                           ("start", "globalTid", "end", "eventClass", "correlationId", "nameId", "returnValue",
                            "callchainId", "name"), order="start,end")
        # eventClass 67 (CUDA backtrace) rows repeat a call (same correlation, its callchain)
        backtraces = {(pid_tid(c[1])[0], c[4]): c[7] for c in raw if c[3] == _BACKTRACE}
        cols = _columns([c for c in raw if c[3] != _BACKTRACE] if backtraces else raw, 9)
        pid, tid = _split_ids(cols[1])
        if backtraces:
            cols[7] = [chain if chain is not None else backtraces.get((p, corr))
                       for chain, p, corr in zip(cols[7], pid, cols[4])]
        return cols + [pid, tid]

    def _call_names(self, cols: list[list]) -> tuple[list, list, list]:
        """Each call's name, category and params JSON, made once per distinct (nameId, name,
        class, pid, returnValue, callchainId): integers (INTEGER columns hold no integral REAL)."""
        made: dict[tuple, tuple] = {}
        out = []
        for key in zip(cols[5], cols[8], cols[3], cols[9], cols[6], cols[7]):
            got = made.get(key)
            if got is None:
                got = made[key] = self._call_name(*key)
            out.append(got)
        return [o[0] for o in out], [o[1] for o in out], [o[2] for o in out]

    def _call_name(self, name_id: Any, text: Any, cls: Any, pid: Any, ret: Any, chain: Any) -> tuple:
        raw = self.db.string(name_id) if name_id is not None else text
        name = api_name(raw)
        category = _EVENT_CLASS.get(cls) if cls is not None else None
        if category is None:
            driver = bool(name) and name.startswith("cu") and not name.startswith("cuda")
            category = "cuda_driver" if driver else "cuda_runtime"
        params = {key: v for key, v in (("api_name", raw if raw != name else None), ("pid", pid),
                                        ("return_value", ret or None), ("callchain_id", chain)) if v is not None}
        return name, category, _json(params)

    def rows(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        db, base = self.db, self.base
        self._nvtx()
        self._steps()
        c_start, _, c_end, _, c_corr, _, _, _, _, c_pid, c_tid = calls = self._calls()
        (a_start, a_end, a_dev, a_stream, a_corr, a_gpid, a_kind, a_name, a_bytes, a_copy, a_grid, a_block, a_regs,
         a_shared, a_params) = self._activities()
        a_pid = _split_ids(a_gpid)[0]
        syncs = db.rows("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                        ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "syncType", "eventId",
                         "contextId"), order="start,end")
        rng, marks = self.ranges, self.marks
        pids = set(c_pid) | set(a_pid) | set(rng["pid"]) | set(marks["pid"])
        pids.discard(None)
        ranks = self._ranks(pids)
        self._metadata(ranks, pids)

        # launch call of each activity: (pid, correlation) -> the first call's index
        n = len(c_start)
        call_of = dict(zip(zip(reversed(c_pid), reversed(c_corr)), range(n - 1, -1, -1)))
        act_call = [call_of.get(key) if key[1] is not None else None for key in zip(a_pid, a_corr)]
        launched: dict[int, list[int]] = {}  # call index -> activity indices (by start)
        for i, k in enumerate(act_call):
            if k is not None:
                launched.setdefault(k, []).append(i)
        enclosing = self._enclosing(c_start, calls[1])
        ops = {i: op_name(rng["name"][i]) for i in set(enclosing) if i is not None}
        call_step = self.steps_of(c_pid, c_start)

        a_step = [call_step[k] if k is not None else None for k in act_call]
        a_dur = _durations(a_start, a_end)
        work: dict[tuple, list[int]] = {}  # (pid, step) -> [first start, last end, count]
        for pid, step, start, dur in zip(a_pid, a_step, a_start, a_dur):
            if step is not None:
                w = work.get((pid, step))
                if w is None:
                    work[(pid, step)] = [base + start, base + start + (dur or 0), 1]
                else:
                    w[0], w[1], w[2] = min(w[0], base + start), max(w[1], base + start + (dur or 0)), w[2] + 1
        a_op = [enclosing[k] if k is not None else None for k in act_call]
        gpu = {dev: (f"GPU:{dev}", f"GPU {dev}") for dev in set(a_dev)}
        kernels = ColumnBuilder("kernels", _BATCH_ROWS, _KERNEL_COLS)
        yield from kernels.extend((
            [gpu[d][0] for d in a_dev], [gpu[d][1] for d in a_dev], [ranks.get(p) for p in a_pid], a_step,
            a_stream, a_kind, a_name, [ops[i] if i is not None else None for i in a_op],
            [base + start for start in a_start], a_dur, a_bytes, a_copy, a_corr,
            [base + c_start[k] if k is not None else None for k in act_call], a_grid, a_block, a_regs, a_shared,
            a_params, ["launch" if i is not None else None for i in a_op]))
        yield from kernels.flush()

        name, category, params = self._call_names(calls)
        k_name, k_count, k_start, k_device = [None] * n, [0] * n, [None] * n, [None] * n
        for k, acts in launched.items():
            first = acts[0]
            k_name[k], k_count[k], k_start[k] = a_name[first], len(acts), base + a_start[first]
            k_device[k] = f"GPU:{a_dev[first]}"
        out = ColumnBuilder("runtime_calls", _BATCH_ROWS, _CALL_COLS)
        yield from out.extend((
            ["CPU:0"] * n, ["CPU"] * n, [ranks.get(p) for p in c_pid], call_step, category, name,
            [base + start for start in c_start],
            _durations(c_start, c_end), c_tid, c_corr,
            [ops[i] if i is not None else None for i in enclosing], k_name, k_count, k_start, k_device,
            list(range(n)), params))
        yield from out.flush()

        m = len(rng["start"])
        notes = ColumnBuilder("annotations", _BATCH_ROWS, _ANNOTATION_COLS)
        yield from notes.extend((
            ["CPU:0"] * m, ["CPU"] * m, [ranks.get(p) for p in rng["pid"]], self.steps_of(rng["pid"], rng["start"]),
            ["nvtx"] * m, rng["name"], [base + start for start in rng["start"]],
            _durations(rng["start"], rng["end"]),
            rng["tid"], list(range(m)), rng["params"]))
        yield from notes.flush()

        events = BatchBuilder("events", columns=_EVENT_COLS)
        sync_types = db.enum("ENUM_CUPTI_SYNC_TYPE", _SYNC_TYPE)
        for i, (start, end, dev, stream, corr, gpid, stype, event_id, context) in enumerate(syncs):
            pid = pid_tid(gpid)[0]
            k = call_of.get((pid, corr)) if corr is not None else None
            params = {key: v for key, v in (("sync_type", stype), ("event_id", event_id), ("context_id", context),
                                            ("pid", pid)) if v is not None}
            yield from events.append((
                f"GPU:{dev if dev is not None else 0}", f"GPU {dev}", ranks.get(pid),
                call_step[k] if k is not None else self.step_at(pid, start), "cuda_sync",
                sync_types.get(stype, f"sync type {stype}"), "X", base + start,
                end - start if end is not None else None, None, stream, corr, i, _json(params)))
        for i, (start, name, pid, tid, params) in enumerate(zip(
                marks["start"], marks["name"], marks["pid"], marks["tid"], marks["params"])):
            yield from events.append((
                "CPU:0", "CPU", ranks.get(pid), self.step_at(pid, start), "nvtx_mark", name, "i", base + start,
                None, tid, None, None, len(syncs) + i, params))
        yield from events.flush()

        steps = BatchBuilder("steps", columns=_STEP_COLS)
        for pid, spans in self.steps.items():
            for start, end, n, name, gtid in spans:
                w = work.get((pid, n))
                yield from steps.append(("CPU:0", "CPU", ranks.get(pid), n, name, base + start, end - start,
                                         pid_tid(gtid)[1], w[0] if w else None, w[1] if w else None,
                                         w[2] if w else 0))
        yield from steps.flush()


def _parents(starts: list, ends: list) -> list[int]:
    """For ranges sorted by start (outer first on a tie), each one's parent: the innermost
    range still open when it starts on a stack that pops the ranges ended before (-1: none)."""
    parent, stack = [], []
    for start in starts:
        while stack and ends[stack[-1]] < start:
            stack.pop()
        parent.append(stack[-1] if stack else -1)
        stack.append(len(parent) - 1)
    return parent


def _durations(starts: list, ends: list) -> list:
    """end - start of each row (None where it has no end: a range left open)."""
    return [end - start if end is not None else None for start, end in zip(starts, ends)]


def _columns(rows: list[tuple], width: int) -> list[list]:
    """Rows of `width` values as `width` columns."""
    return [list(c) for c in zip(*rows)] if rows else [[] for _ in range(width)]


def _split_ids(global_ids: list) -> tuple[list, list]:
    """The pid and tid columns of a globalTid / globalPid column (`pid_tid`, once per distinct id)."""
    split = {g: pid_tid(g) for g in set(global_ids)}
    return [split[g][0] for g in global_ids], [split[g][1] for g in global_ids]


def _dims(v: tuple) -> list[int] | None:
    return None if any(x is None for x in v) else list(v)


# json.dumps(d, separators=(",", ":"), default=str), without a new encoder per call
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)


def _json(d: dict) -> str | None:
    return _ENCODER.encode(d) if d else None
