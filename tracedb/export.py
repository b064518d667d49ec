"""Export an ingested run, whatever its source format, as a Kineto-shaped Chrome-trace JSON
that re-ingests to the same rows (`formats.tracedb_export`), or as a native Perfetto trace
(`tracedb.export_perfetto`).

The JSON opens in Perfetto UI, chrome://tracing, TensorBoard and HTA: events carry
Kineto's categories and args. GPU activity: `kernel` / `gpu_memcpy` / `gpu_memset` on a
process per device named `GPU:0` (rank and device in the process_name args), a thread
per stream (`stream <n>`; an activity that overlaps its stream's others without nesting,
which JSON viewers would drop, on an extra thread `stream <n> (2)`), with Kineto's `device`, `stream`, `correlation`, `External id`,
`grid`, `block`, `registers per thread`, `shared memory`, `est. achieved occupancy %`,
`bytes` args. Host: `cpu_op` ops, the runtime calls with their real durations
(`cuda_runtime`, `cuda_driver`, ... with `correlation`), `user_annotation` ranges and
`ProfilerStep#N` spans on the threads that ran them (ops placed on another device, TF's,
on TF timeline's `/device:GPU:0 Compute` process); `gpu_user_annotation` on its stream.
Memory: Kineto's `[memory]` instant events (`Addr`, `Bytes`, `Total Allocated`, `Total
Reserved`, `Device Type`, `Device Id`) and, for the eye, memory in use per allocator as
counter tracks (`C` events). Launch arrows: Kineto's `ac2g` flow events (`s` at the launch
call, `f` with `bp: e` at the activity), from the runtime call with the activity's
correlation id in the same source file; an XSpace kernel's from the host launch event
(`cuLaunchKernel`, `cuGraphLaunch`) with its correlation id (Kineto's correlation ids and
External ids are different id spaces, so ops are matched only within XSpace sources).
Other events (cuda_sync, instants, python functions) keep their category.

Exact both ways: every event's `args.tracedb` holds the table it is a row of and that
row's columns, but the ones the event itself carries (the time as `ts`, the duration as
`dur`, the name as `name`): NULL columns are left out, a NULL name or duration is written
as an explicit null. A step spanning the same time as a ProfilerStep annotation (or op)
rides on that event (`args.tracedb.also`) instead of drawing the span twice. Rows without
a time (untimed nodes, planned chunks, tensors) have no place on a timeline: each is an
`M` event named `tracedb_row`, which viewers ignore. Times: as Kineto writes them, `ts`
is µs after `baseTimeNanoseconds` (the run's first time, cut to a whole µs), so a reader
that parses `ts` as a double (Perfetto's JSON importer, HTA) keeps every ns; written as
decimal text with exactly 3 decimals (`_us`), exact for any reader that parses decimals. A row's
source_format and source_file come back as they were (the file is a carrier; `files`
and `runs.formats` name the export and `tracedb_export`). What does not round-trip: a NaN
float (written as NULL: NaN is no JSON a viewer loads) and run_id (chosen at ingest).
Counters and flows are drawn from the rows, not read back. The top-level
`tracedbExport` key, written first, is what the reader sniffs.

Events are written as they are fetched, never collected into one string. A run with no
timed event (node lists and dumps) has nothing to draw: TracedbError.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
from pathlib import Path
from typing import IO, Any, Callable, Iterator

import duckdb

from tracedb import catalog, devices as devmod, schema
from tracedb.errors import TracedbError

EXPORT_VERSION = 1  # of the `args.tracedb` layout; the reader refuses a newer one
_BATCH = 8192
_MAX_TID = 2**31 - 1  # Perfetto and chrome://tracing want small non-negative ints
_NO_STREAM = "stream (unknown)"  # kernels whose source has no stream number (MegEngine)

# Per table: the column the event's `ts` carries, and the one its `name` carries.
# (A table without a time column, tensors, travels as untimed rows.)
TIME_COLUMN = {t: next(c for c in ("start_ns", "ts_ns") if c in s.names) for t, s in schema.SOURCE_TABLES.items()
               if {"start_ns", "ts_ns"} & set(s.names)}
NAME_COLUMN = {"kernels": "name", "nodes": "node_name", "runtime_calls": "name", "annotations": "name",
               "steps": "name", "events": "name"}
_GPU_CAT = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
# Kineto's `[memory]` `Device Type`: c10::DeviceType codes.
_DEVICE_TYPE_CODE = {"CPU": 0, "GPU": 1, "XLA": 9, "XPU": 12, "MPS": 13, "HPU": 15, "MTIA": 19}
_ORDER = {"kernels": "device, stream, start_ns, duration_ns DESC", "nodes": "device, thread_id, start_ns, seq",
          "runtime_calls": "device, thread_id, start_ns, seq", "annotations": "device, start_ns, seq",
          "steps": "rank, start_ns", "allocations": "device, ts_ns", "events": "device, start_ns, seq",
          "tensors": "device, node_name, slot"}


def _us(ns: int) -> str:
    """ns as a µs JSON number written exactly: a float would lose ns beyond ~2^53 ns."""
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> Iterator[dict[str, Any]]:
    cur = con.execute(sql, params)
    cols = [d[0] for d in cur.description]
    while batch := cur.fetchmany(_BATCH):
        for row in batch:
            yield dict(zip(cols, row))


def _has_rows(con, sql: str, params: list) -> bool:
    return con.execute(f"SELECT EXISTS ({sql})", params).fetchone()[0]


def table_rows(con, table: str, params: list, where: str, timed: bool | None = None) -> Iterator[dict]:
    """Every column of a table's rows of the run (`timed`: only rows with / without a time)."""
    cols = ", ".join(f'"{c}"' for c in schema.SOURCE_TABLES[table].names if c != "run_id")
    cond = ""
    if timed is not None and table in TIME_COLUMN:
        cond = f" AND {TIME_COLUMN[table]} IS {'NOT ' if timed else ''}NULL"
    elif timed and table not in TIME_COLUMN:
        return iter(())
    order = _ORDER.get(table, "device, " + (TIME_COLUMN.get(table) or "ALL"))
    return rows(con, f"SELECT {cols} FROM {table} WHERE run_id = ?{where}{cond} ORDER BY {order}", params)


class Threads:
    """pid per (rank, process name); tid per thread, keeping the source's id when it fits."""

    def __init__(self) -> None:
        self.pids: dict[tuple, int] = {}
        self.tids: dict[tuple, int] = {}
        self.used: dict[int, set[int]] = {}

    def pid(self, rank, name: str) -> int:
        return self.pids.setdefault((rank, name), len(self.pids) + 1)

    def tid(self, pid: int, key: tuple, wanted: int | None) -> tuple[int, bool]:
        """(tid, new) for a thread keyed ('stream', n), ('thread', id) or (name,)."""
        if (pid, key) in self.tids:
            return self.tids[(pid, key)], False
        used = self.used.setdefault(pid, set())
        tid = wanted if wanted is not None and 0 <= wanted <= _MAX_TID and wanted not in used else None
        if tid is None:
            tid = max(used | {_MAX_TID // 2}) + 1
        used.add(tid)
        self.tids[(pid, key)] = tid
        return tid, True


def ops_process(device: str) -> str | None:
    """Process name for a device's host-timed ops. CPU:0 keeps its own name; other devices
    get TF timeline's `/device:GPU:0 Compute` (a process named `GPU:0` is GPU streams)."""
    if device == "CPU:0":
        return None
    typ, _, idx = device.partition(":")
    return f"/device:{typ}:{idx} Compute" if idx.isdigit() else None


def device_index(device: str | None) -> int | None:
    idx = (device or "").partition(":")[2]
    return int(idx) if idx.isdigit() else None


def thread_name(params: str | None) -> str | None:
    """A node's thread name from its params (XSpace keeps `thread_name` there)."""
    if not params or '"thread_name"' not in params:
        return None
    try:
        value = json.loads(params).get("thread_name")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def place(lanes: list[list[int]], start: int, end: int) -> int:
    """The first lane where [start, end] nests (each lane: a stack of the ends of its slices
    still open at `start`); a new lane where none does. Rows come in start order."""
    for k, stack in enumerate(lanes):
        while stack and stack[-1] <= start:
            stack.pop()
        if not stack or end <= stack[-1]:
            stack.append(end)
            return k
    lanes.append([end])
    return len(lanes) - 1


def filter_sql(devices: list[str] | None) -> tuple[str, list]:
    if not devices:
        return "", []
    canon = [devmod.normalize(d) for d in devices]
    return f" AND device IN ({', '.join('?' * len(canon))})", canon


def check_exportable(con, run_id: str, where: str, dev_params: list) -> None:
    """TracedbError where the run has no rows (on those devices) or none with a time."""
    params = [run_id, *dev_params]
    if not any(_has_rows(con, f"SELECT 1 FROM {t} WHERE run_id = ?{where}", params) for t in schema.SOURCE_TABLES):
        known = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id LIMIT 20").fetchall()]
        what = f"run {run_id!r}" + (f" on devices {dev_params}" if dev_params else "")
        raise TracedbError(f"no events for {what} (runs: {', '.join(known) or 'none'})")
    timed = " UNION ALL ".join(f"SELECT 1 FROM {t} WHERE run_id = ?{where} AND {c} IS NOT NULL"
                               for t, c in TIME_COLUMN.items())
    if not _has_rows(con, timed, params * len(TIME_COLUMN)):
        fmts = con.execute("SELECT formats FROM runs WHERE run_id = ?", [run_id]).fetchone()
        raise TracedbError(
            f"run {run_id!r} has no timed events ({', '.join(fmts[0]) if fmts else 'its sources'} "
            "record no times): there is nothing to draw on a timeline")


def write_to(out: Path | IO, binary: bool, write: Callable[[Callable], int]) -> int:
    """Run `write(sink)` into a path (written whole, then renamed; `.gz` compresses) or an
    open stream; `binary`: the sink takes bytes, else str."""
    if isinstance(out, (str, Path)):
        path = Path(out)
        tmp = path.with_name(path.name + ".tmp")
        opener = gzip.open if path.suffix == ".gz" else open
        try:
            with opener(tmp, "wb" if binary else "wt", **({} if binary else {"encoding": "utf-8"})) as f:
                n = write(f.write)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return n
    if binary:
        sink = getattr(out, "buffer", out)
        return write(sink.write)
    if isinstance(out, io.TextIOBase):
        return write(out.write)
    return write(lambda s: out.write(s.encode("utf-8")))


def export_chrome(warehouse: Path, run_id: str, out: Path | IO, devices: list[str] | None = None) -> int:
    """Write run `run_id` as Chrome-trace JSON to `out` (a path, `.gz` to compress, or an
    open text/binary stream); `devices` limits it to those devices. Returns the number of
    trace events written."""
    con = catalog.connect(warehouse)
    try:
        return export_chrome_con(con, run_id, out, devices)
    finally:
        con.close()


def export_chrome_con(con: duckdb.DuckDBPyConnection, run_id: str, out: Path | IO,
                      devices: list[str] | None = None) -> int:
    """`export_chrome` on an open connection that has the warehouse views."""
    where, dev_params = filter_sql(devices)
    check_exportable(con, run_id, where, dev_params)
    return write_to(out, False, lambda write: _Chrome(con, run_id, where, [run_id, *dev_params], write).run())


def _clean(v: Any) -> Any:
    """A value JSON and the viewers take: NaN/inf floats (none in valid JSON) become None."""
    if type(v) is float and not math.isfinite(v):
        return None
    return v


def row_args(table: str, r: dict, name_col: str | None, timed: bool = True) -> dict[str, Any]:
    """`args.tracedb`: the row's columns but those the event carries (module docstring)."""
    skip = {name_col, TIME_COLUMN.get(table), "duration_ns"} if timed else set()
    out: dict[str, Any] = {"table": table}
    for k, v in r.items():
        if k in skip or v is None:
            continue
        v = _clean(v)
        if v is not None:
            out[k] = v
    if timed:
        if name_col and r.get(name_col) is None:
            out[name_col] = None
        if "duration_ns" in r and r["duration_ns"] is None:
            out["duration_ns"] = None
    return out


class _Chrome:
    """One export: the processes/threads named so far, the launch calls by correlation."""

    def __init__(self, con, run_id: str, where: str, params: list, write: Callable[[str], Any]):
        self.con, self.run_id, self.where, self.params, self.write = con, run_id, where, params, write
        self.threads = Threads()
        self.count = 0
        self.first = True
        self.launches: dict[tuple, tuple[int, int, int]] = {}  # (rank, file, corr) -> (pid, tid, ts)
        self.flow = 0
        self.base = 0

    def emit(self, event: dict[str, Any], ts_ns: int | None = None, dur_ns: int | None = None) -> None:
        if ts_ns is not None:
            ts_ns -= self.base
        text = json.dumps(event, separators=(",", ":"), default=str, allow_nan=False)
        # ts/dur go in as exact decimal text (see _us), spliced before the closing brace.
        extra = "".join(f',"{k}":{_us(v)}' for k, v in (("ts", ts_ns), ("dur", dur_ns)) if v is not None)
        self.write(("" if self.first else ",\n") + text[:-1] + extra + "}")
        self.first = False
        self.count += 1

    def first_time(self) -> int:
        """The run's first time, ns (on the devices exported)."""
        sql = " UNION ALL ".join(f"SELECT min({c}) FROM {t} WHERE run_id = ?{self.where}" for t, c in TIME_COLUMN.items())
        return self.con.execute(f"SELECT min(m) FROM ({sql}) t(m)", self.params * len(TIME_COLUMN)).fetchone()[0]

    def process(self, rank, device, name: str | None = None) -> int:
        key = (rank, name or device)
        if key not in self.threads.pids:
            pid = self.threads.pid(*key)
            args: dict[str, Any] = {"name": name or device, "device": device}
            if rank is not None:
                args["rank"] = rank
                self.emit({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0,
                           "args": {"labels": f"rank {rank}"}})
            self.emit({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": args})
            self.emit({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        return self.threads.pids[key]

    def thread(self, pid: int, key: tuple, wanted: int | None, name: str, source_id=None) -> int:
        tid, new = self.threads.tid(pid, key, wanted)
        if new:
            args: dict[str, Any] = {"name": name}
            if source_id is not None and source_id != tid:
                args["thread_id"] = source_id
            self.emit({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": args})
        return tid

    def host_thread(self, r: dict, name: str | None = None) -> tuple[int, int]:
        pid = self.process(r["rank"], r["device"], ops_process(r["device"]))
        t = r.get("thread_id")
        return pid, self.thread(pid, ("thread", t), t, name or ("thread" if t is None else f"thread {t}"), t)

    def stream_thread(self, r: dict) -> tuple[int, int]:
        pid = self.process(r["rank"], r["device"])
        s = r.get("stream")
        return pid, self.thread(pid, ("stream", s), s, _NO_STREAM if s is None else f"stream {s}")

    def span(self, table: str, r: dict, cat: str, where: tuple[int, int], args: dict,
             also: list | None = None, ph: str = "X") -> dict:
        """Emit a row's event; returns it."""
        name_col = NAME_COLUMN.get(table)
        tracedb = row_args(table, r, name_col)
        if also:
            tracedb["also"] = also
        name = r.get(name_col) if name_col else ("[memory]" if table == "allocations" else table)
        event = {"ph": ph, "cat": cat, "name": name if name is not None else "?", "pid": where[0],
                 "tid": where[1], "args": {**{k: v for k, v in args.items() if v is not None}, "tracedb": tracedb}}
        if ph == "i":
            event["s"] = "t"
        dur = r.get("duration_ns") if ph == "X" else None
        self.emit(event, r[TIME_COLUMN[table]], (dur or 0) if ph == "X" else None)
        return event

    def rows(self, table: str, timed: bool | None = True) -> Iterator[dict]:
        return table_rows(self.con, table, self.params, self.where, timed)

    def run(self) -> int:
        self.base = self.first_time() // 1000 * 1000
        self.write('{"tracedbExport":' + json.dumps({"version": EXPORT_VERSION, "run_id": self.run_id,
                                                       "schema_version": schema.SCHEMA_VERSION})
                   + f',"baseTimeNanoseconds":{self.base},"displayTimeUnit":"ns","traceEvents":[\n')
        steps = {}
        for r in self.rows("steps"):
            steps.setdefault(_span_key(r, r["name"]), []).append(r)
        self.nodes(steps)
        self.annotations(steps)
        for left in steps.values():
            for r in left:
                self.span("steps", r, "user_annotation", self.host_thread(r), {})
        self.calls()
        self.kernels()
        self.allocations()
        self.events()
        self.other_tables()
        self.untimed()
        self.write("\n]}\n")
        return self.count

    def nodes(self, steps: dict) -> None:
        for r in self.rows("nodes"):
            where = self.host_thread(r, thread_name(r["params"]))
            also = _take_step(steps, r, r["node_name"])
            self.span("nodes", r, "cpu_op", where, {"External id": r["correlation_id"]}, also)
            if r["source_format"] == "xspace" and r["correlation_id"] is not None:
                self.launches.setdefault((r["rank"], r["source_file"], r["correlation_id"]),
                                         (*where, r["start_ns"]))

    def annotations(self, steps: dict) -> None:
        for r in self.rows("annotations"):
            if r["category"] == "gpu_user_annotation" or (r["stream"] is not None and r["thread_id"] is None):
                where = self.stream_thread(r)
                args = {"device": device_index(r["device"]), "stream": r["stream"]}
            else:
                where, args = self.host_thread(r), {}
            args["External id"] = r["external_id"]
            self.span("annotations", r, r["category"] or "user_annotation", where, args,
                      _take_step(steps, r, r["name"]))

    def calls(self) -> None:
        for r in self.rows("runtime_calls"):
            where = self.host_thread(r)
            self.span("runtime_calls", r, r["category"] or "cuda_runtime", where,
                      {"correlation": r["correlation_id"], "External id": r["external_id"]})
            if r["correlation_id"] is not None:
                self.launches.setdefault((r["rank"], r["source_file"], r["correlation_id"]), (*where, r["start_ns"]))

    def kernels(self) -> None:
        lanes: dict[tuple, list[list[int]]] = {}  # (pid, stream) -> each lane's open ends
        for r in self.rows("kernels"):
            where = self.stream_thread(r)
            end = r["start_ns"] + (r["duration_ns"] or 0)
            k = place(lanes.setdefault((where[0], r["stream"]), []), r["start_ns"], end)
            if k:  # overlaps its stream's slices without nesting: an extra thread of the stream
                s = r["stream"]
                where = (where[0], self.thread(where[0], ("stream", s, k), None,
                                               f"{_NO_STREAM if s is None else f'stream {s}'} ({k + 1})"))
            args = {"device": device_index(r["device"]), "stream": r["stream"], "correlation": r["correlation_id"],
                    "External id": r["external_id"], "grid": r["grid"], "block": r["block"],
                    "registers per thread": r["registers_per_thread"], "shared memory": r["shared_memory_bytes"],
                    "est. achieved occupancy %": _clean(r["occupancy"]), "bytes": r["bytes"]}
            self.span("kernels", r, _GPU_CAT.get(r["kind"], "kernel"), where, args)
            launch = self.launches.get((r["rank"], r["source_file"], r["correlation_id"]))
            if launch is not None and r["correlation_id"] is not None:
                self.flow += 1
                flow = {"cat": "ac2g", "name": "ac2g", "id": self.flow}
                self.emit({"ph": "s", **flow, "pid": launch[0], "tid": launch[1]}, launch[2])
                self.emit({"ph": "f", **flow, "bp": "e", "pid": where[0], "tid": where[1]}, r["start_ns"])

    def allocations(self) -> None:
        for r in self.rows("allocations"):
            pid = self.process(r["rank"], r["device"])
            tid = self.thread(pid, ("memory",), None, "memory")
            typ = r["device"].partition(":")[0]
            args = {"Device Type": _DEVICE_TYPE_CODE.get(typ), "Device Id": -1 if typ == "CPU" else device_index(r["device"]),
                    "Addr": r["address"], "Bytes": r["bytes"], "Total Allocated": r["total_allocated_bytes"],
                    "Total Reserved": r["total_reserved_bytes"]}
            self.span("allocations", r, "cpu_instant_event", (pid, tid), args, ph="i")
        # Memory in use per allocator, for the eye: the source's running total when it has
        # one, else the sum of the allocation/free deltas so far.
        for r in rows(self.con, f"""
                SELECT rank, device, coalesce(allocator, 'memory') AS allocator, ts_ns,
                       coalesce(total_allocated_bytes,
                                sum(bytes) OVER (PARTITION BY rank, device, allocator
                                                 ORDER BY ts_ns ROWS UNBOUNDED PRECEDING))::BIGINT AS in_use
                FROM allocations WHERE run_id = ?{self.where} AND ts_ns IS NOT NULL
                ORDER BY device, allocator, ts_ns""", self.params):
            pid = self.process(r["rank"], r["device"])
            self.emit({"ph": "C", "name": f"memory {r['allocator']}", "pid": pid, "tid": 0,
                       "args": {"bytes_in_use": r["in_use"]}}, r["ts_ns"])

    def events(self) -> None:
        for r in self.rows("events"):
            where = self.stream_thread(r) if r["stream"] is not None else self.host_thread(r)
            args = {"correlation": r["correlation_id"], "External id": r["external_id"]}
            self.span("events", r, r["category"] or "event", where, args,
                      ph="X" if r["duration_ns"] is not None else "i")

    def other_tables(self) -> None:
        """Timed rows of a table this module has no layout for (one added later): spans or
        instants on their stream or thread, so that they still come back."""
        done = {"nodes", "kernels", "runtime_calls", "annotations", "steps", "allocations", "events"}
        for table in TIME_COLUMN.keys() - done:
            for r in self.rows(table):
                r.setdefault("rank", None)
                where = self.stream_thread(r) if r.get("stream") is not None else self.host_thread(r)
                span = r.get("duration_ns") is not None
                self.span(table, r, r.get("category") or table, where, {}, ph="X" if span else "i")

    def untimed(self) -> None:
        for table in schema.SOURCE_TABLES:
            for r in self.rows(table, timed=False):
                self.emit({"ph": "M", "name": "tracedb_row", "pid": 0, "tid": 0,
                           "args": {"tracedb": row_args(table, r, None, timed=False)}})


def _span_key(r: dict, name: Any) -> tuple:
    return (r["rank"], r["source_file"], name, r["start_ns"], r["duration_ns"])


def _take_step(steps: dict, r: dict, name: Any) -> list | None:
    """The step row spanning exactly this row's time under its name, taken from `steps`."""
    if not steps or not isinstance(name, str) or not name.startswith("ProfilerStep#"):
        return None
    hit = steps.get(_span_key(r, name))
    if not hit:
        return None
    step = hit.pop(0)
    if not hit:
        del steps[_span_key(r, name)]
    return [row_args("steps", step, None, timed=False)]
