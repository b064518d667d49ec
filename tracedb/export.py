"""Export an ingested run, whatever its source format, as Chrome-trace JSON.

The output opens in Perfetto UI and chrome://tracing, and `tracedb.formats.chrome_trace`
reads it back. GPU activity: a process per device named `GPU:0` (rank and device in the
process_name args), threads named `stream <n>`, `args.kind` and `args.bytes` on every
event; memory in use as counter tracks (`C` events, one track per allocator). Host ops:
their threads in `CPU:0`, or for ops placed on another device in TF timeline's
`/device:GPU:0 Compute`. As in TF's timeline, `args.name` is a kernel's launching op and
`args.op` a node's op type. Events are written as they are fetched, never collected into
one string.

Launches, as Perfetto draws them: a kernel whose launch call is known (`launch_start_ns`,
Kineto) gets a slice on a `CUDA runtime` thread of the host process at that time (cat
`cuda_runtime`, zero length: the warehouse keeps the call's start, not its length) and a
flow arrow from it to the kernel (`bind_id` + `flow_out` / `flow_in`). An XSpace kernel
gets the arrow from the host launch event with its `correlation_id` (`cuLaunchKernel`,
`cuGraphLaunch`). Kineto's own correlation ids and External ids are different id spaces,
so correlation ids are matched within XSpace sources only.

A run with no timed event (node lists and dumps) has nothing to draw: TracedbError.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path
from typing import IO, Any, Callable, Iterator

import duckdb

from tracedb import catalog, devices as devmod
from tracedb.errors import TracedbError

_BATCH = 8192
_MAX_TID = 2**31 - 1  # Perfetto and chrome://tracing want small non-negative ints
_NO_STREAM = "stream (unknown)"  # kernels whose source has no stream number (MegEngine)


def _us(ns: int) -> str:
    """ns as a µs JSON number written exactly: a float would lose ns beyond ~2^53 ns."""
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> Iterator[dict[str, Any]]:
    cur = con.execute(sql, params)
    cols = [d[0] for d in cur.description]
    while rows := cur.fetchmany(_BATCH):
        for row in rows:
            yield dict(zip(cols, row))


def _has_rows(con, sql: str, params: list) -> bool:
    return con.execute(f"SELECT EXISTS ({sql})", params).fetchone()[0]


class _Threads:
    """pid per (rank, process name); tid per thread, keeping the source's id when it fits."""

    def __init__(self) -> None:
        self.pids: dict[tuple, int] = {}
        self.tids: dict[tuple, int] = {}
        self.used: dict[int, set[int]] = {}

    def pid(self, rank, name: str) -> int:
        return self.pids.setdefault((rank, name), len(self.pids) + 1)

    def tid(self, pid: int, key: tuple, wanted: int | None) -> tuple[int, bool]:
        """(tid, new) for a thread keyed ('stream', n) or ('thread', id)."""
        if (pid, key) in self.tids:
            return self.tids[(pid, key)], False
        used = self.used.setdefault(pid, set())
        tid = wanted if wanted is not None and 0 <= wanted <= _MAX_TID and wanted not in used else None
        if tid is None:
            tid = max(used | {_MAX_TID // 2}) + 1
        used.add(tid)
        self.tids[(pid, key)] = tid
        return tid, True


def _ops_process(device: str) -> str | None:
    """Process name for a device's host-timed ops. CPU:0 keeps its own name; other devices
    get TF timeline's `/device:GPU:0 Compute`, since a process named `GPU:0` reads back as
    GPU streams (kernels) and a plain `CPU:1` as CPU:0."""
    if device == "CPU:0":
        return None
    typ, _, idx = device.partition(":")
    return f"/device:{typ}:{idx} Compute" if idx.isdigit() else None


def _filter(devices: list[str] | None) -> tuple[str, list]:
    if not devices:
        return "", []
    canon = [devmod.normalize(d) for d in devices]
    return f" AND device IN ({', '.join('?' * len(canon))})", canon


def _thread_name_sql() -> str:
    return "CASE WHEN json_valid(params) THEN json_extract_string(params, '$.thread_name') END"


def export_chrome(
    warehouse: Path, run_id: str, out: Path | IO, devices: list[str] | None = None
) -> int:
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
    where, dev_params = _filter(devices)
    params = [run_id, *dev_params]
    tables = ("nodes", "kernels", "allocations")
    if not any(_has_rows(con, f"SELECT 1 FROM {t} WHERE run_id = ?{where}", params) for t in tables):
        known = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id LIMIT 20").fetchall()]
        what = f"run {run_id!r}" + (f" on devices {dev_params}" if dev_params else "")
        raise TracedbError(f"no events for {what} (runs: {', '.join(known) or 'none'})")
    timed = ("SELECT 1 FROM nodes WHERE run_id = ?{w} AND start_ns IS NOT NULL UNION ALL "
             "SELECT 1 FROM kernels WHERE run_id = ?{w} AND start_ns IS NOT NULL UNION ALL "
             "SELECT 1 FROM allocations WHERE run_id = ?{w} AND ts_ns IS NOT NULL").format(w=where)
    if not _has_rows(con, timed, params * 3):
        fmts = con.execute("SELECT formats FROM runs WHERE run_id = ?", [run_id]).fetchone()
        raise TracedbError(
            f"run {run_id!r} has no timed events ({', '.join(fmts[0]) if fmts else 'its sources'} "
            "record no times): there is nothing to draw on a timeline")
    if isinstance(out, (str, Path)):
        path = Path(out)
        tmp = path.with_name(path.name + ".tmp")
        opener = gzip.open if path.suffix == ".gz" else open
        try:
            with opener(tmp, "wt", encoding="utf-8") as f:
                n = _write(con, params, where, f.write)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return n
    if isinstance(out, io.TextIOBase):
        return _write(con, params, where, out.write)
    return _write(con, params, where, lambda s: out.write(s.encode("utf-8")))


def _write(con, params: list, where: str, write: Callable[[str], Any]) -> int:
    threads = _Threads()
    flow_ids: dict[tuple, int] = {}  # (rank, source_file, correlation_id) of XSpace kernels
    count = 0
    first = True

    def emit(event: dict[str, Any], ts_ns: int | None = None, dur_ns: int | None = None) -> None:
        nonlocal count, first
        text = json.dumps(event, separators=(",", ":"), default=str)
        # ts/dur go in as exact decimal text (see _us), spliced before the closing brace.
        extra = "".join(
            f',"{k}":{_us(v)}' for k, v in (("ts", ts_ns), ("dur", dur_ns)) if v is not None
        )
        write(("" if first else ",\n") + text[:-1] + extra + "}")
        first = False
        count += 1

    def process(rank, device, name: str | None = None) -> int:
        key = (rank, name or device)
        if key not in threads.pids:
            pid = threads.pid(*key)
            args: dict[str, Any] = {"name": name or device, "device": device}
            if rank is not None:
                args["rank"] = rank
                emit({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0,
                      "args": {"labels": f"rank {rank}"}})
            emit({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": args})
            emit({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                  "args": {"sort_index": pid}})
        return threads.pids[key]

    def thread(pid: int, key: tuple, wanted: int | None, name: str, source_id=None) -> int:
        tid, new = threads.tid(pid, key, wanted)
        if new:
            args: dict[str, Any] = {"name": name}
            if source_id is not None and source_id != tid:
                args["thread_id"] = source_id
            emit({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": args})
        return tid

    write('{"displayTimeUnit":"ns","traceEvents":[\n')

    # GPU streams (kernels, copies, sets).
    for r in _rows(con, f"""
            SELECT rank, device, stream, step, kind, name, node_name, start_ns, duration_ns,
                   bytes, copy_kind, correlation_id, grid, block, registers_per_thread,
                   shared_memory_bytes, occupancy, launch_start_ns, source_format, source_file
            FROM kernels WHERE run_id = ?{where} AND start_ns IS NOT NULL
            ORDER BY device, stream, start_ns""", params):
        pid = process(r["rank"], r["device"])
        s = r["stream"]
        tid = thread(pid, ("stream", s), s, _NO_STREAM if s is None else f"stream {s}")
        args = {k: r[k] for k in ("kind", "bytes", "copy_kind", "step", "grid", "block",
                                  "registers_per_thread", "shared_memory_bytes", "occupancy")
                if r[k] is not None and r[k] == r[k]}  # r[k] == r[k]: drops NaN, invalid JSON
        if r["node_name"] is not None:
            args["name"] = r["node_name"]  # TF timeline convention: args.name = the op
        if r["correlation_id"] is not None:
            args["correlation"] = r["correlation_id"]
        event = {"ph": "X", "cat": "gpu", "name": r["name"] or r["kind"] or "?", "pid": pid, "tid": tid,
                 "args": args}
        if r["launch_start_ns"] is not None:
            fid = len(flow_ids) + 1
            flow_ids[("launch", fid)] = fid
            host = process(r["rank"], "CPU:0")
            emit({"ph": "X", "cat": "cuda_runtime", "name": "launch", "pid": host,
                  "tid": thread(host, ("runtime",), None, "CUDA runtime"),
                  "args": {k: v for k, v in (("kernel", r["name"]), ("correlation", r["correlation_id"])) if v is not None},
                  "bind_id": fid, "flow_out": True}, r["launch_start_ns"], 0)
            event.update(bind_id=fid, flow_in=True)
        elif r["source_format"] == "xspace" and r["correlation_id"] is not None:
            key = (r["rank"], r["source_file"], r["correlation_id"])
            event.update(bind_id=flow_ids.setdefault(key, len(flow_ids) + 1), flow_in=True)
        emit(event, r["start_ns"], r["duration_ns"] or 0)

    # Host ops: timed nodes only (dumps and name lists have no time to show).
    for r in _rows(con, f"""
            SELECT rank, device, step, node_name, op_type, start_ns, duration_ns, thread_id,
                   correlation_id, source_format, source_file, {_thread_name_sql()} AS thread_name
            FROM nodes WHERE run_id = ?{where} AND start_ns IS NOT NULL
            ORDER BY device, thread_id, start_ns""", params):
        pid = process(r["rank"], r["device"], _ops_process(r["device"]))
        t = r["thread_id"]
        name = r["thread_name"] or ("thread" if t is None else f"thread {t}")
        tid = thread(pid, ("thread", t), t, name, t)
        args = {"op": r["op_type"]} if r["op_type"] is not None else {}  # TF: args.op
        if r["step"] is not None:
            args["step"] = r["step"]
        if r["correlation_id"] is not None:
            args["correlation"] = r["correlation_id"]
        event = {"ph": "X", "cat": "op", "name": r["node_name"] or r["op_type"] or "?", "pid": pid,
                 "tid": tid, "args": args}
        fid = flow_ids.get((r["rank"], r["source_file"], r["correlation_id"])) if r["source_format"] == "xspace" else None
        if fid is not None:
            event.update(bind_id=fid, flow_out=True)
        emit(event, r["start_ns"], r["duration_ns"] or 0)

    # Memory in use per allocator: the source's running total when it has one, else
    # the sum of the allocation/free deltas so far.
    for r in _rows(con, f"""
            SELECT rank, device, coalesce(allocator, 'memory') AS allocator, ts_ns,
                   coalesce(total_allocated_bytes,
                            sum(bytes) OVER (PARTITION BY rank, device, allocator
                                             ORDER BY ts_ns ROWS UNBOUNDED PRECEDING))::BIGINT AS in_use
            FROM allocations WHERE run_id = ?{where} AND ts_ns IS NOT NULL
            ORDER BY device, allocator, ts_ns""", params):
        pid = process(r["rank"], r["device"])
        emit({"ph": "C", "name": f"memory {r['allocator']}", "pid": pid, "tid": 0,
              "args": {"bytes_in_use": r["in_use"]}}, r["ts_ns"])

    write("\n]}\n")
    return count
