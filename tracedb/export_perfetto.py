"""Export an ingested run as a native Perfetto trace (protobuf `Trace` of TrackEvent packets).

Built with the trace protos the `perfetto` package ships (`perfetto.protos.perfetto.trace.
perfetto_trace_pb2`, Perfetto's own `perfetto_trace.proto` compiled): each `TracePacket` is
serialized by protobuf and written as the `Trace.packet` field it is (tag, length, bytes),
one at a time, so memory stays flat whatever the run's size.

Layout: a process track per (rank, device) named as in the Chrome export (`GPU:0`,
`CPU:0`, TF's `/device:GPU:0 Compute` for ops placed on a device); under a GPU's process a
track per stream (`stream 7`), under the host process a thread track per thread (pid/tid
small ints; the source's thread id in the track's name where it does not fit). Slices:
kernels, copies, sets, device annotations and device events on their stream; ops, runtime
calls (their real durations), host annotations, step spans (a step whose span an
annotation or op of its name already draws is not drawn twice) and host events on their
thread; an event without a duration is an instant. Flows: the launch call (an XSpace
kernel: the host launch event with its correlation id) carries a flow id that each
activity it launched carries too (`TrackEvent.flow_ids`: Perfetto draws the arrows).
Memory: a counter track (bytes) per (device, allocator): the source's running total where
it has one, else the sum of the allocation deltas.

Overlap: Perfetto's slices on one track must nest. JSON viewers drop or mis-nest complete
events that overlap without nesting (kernels of a CUDA graph, concurrent ops on one
stream); here such a slice goes to the first extra track of its stream or thread (`stream
7 (2)`) where it nests, so every slice is kept. Slices of a track are written in time order
(an end before a begin at the same time) with their ends when they close.

The `perfetto` package's TraceProcessor downloads its shell binary on first use; the
tests parse the output with the package's protos instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any, Callable, Iterator

from tracedb import catalog
from tracedb.errors import TracedbError
from tracedb.export import (Threads, check_exportable, filter_sql, ops_process, rows, thread_name,
                            write_to)

# Host-side and device-side slices of every table, one row shape: each side ordered by its
# track and then start (longest first, so an enclosing slice opens before what it holds).
_HOST = """
SELECT 'nodes' AS tbl, rank, device, thread_id, start_ns, duration_ns, node_name AS name, 'cpu_op' AS cat,
       CASE WHEN source_format = 'xspace' THEN correlation_id END AS flow_corr, correlation_id AS corr,
       NULL::BIGINT AS ext, source_file, params
FROM nodes WHERE run_id = $run{w} AND start_ns IS NOT NULL
UNION ALL
SELECT 'runtime_calls', rank, device, thread_id, start_ns, duration_ns, name, coalesce(category, 'cuda_runtime'),
       correlation_id, correlation_id, external_id, source_file, NULL
FROM runtime_calls WHERE run_id = $run{w} AND start_ns IS NOT NULL
UNION ALL
SELECT 'annotations', rank, device, thread_id, start_ns, duration_ns, name, coalesce(category, 'user_annotation'),
       NULL, NULL, external_id, source_file, NULL
FROM annotations WHERE run_id = $run{w} AND start_ns IS NOT NULL
  AND coalesce(category, '') <> 'gpu_user_annotation' AND NOT (stream IS NOT NULL AND thread_id IS NULL)
UNION ALL
SELECT 'steps', s.rank, s.device, s.thread_id, s.start_ns, s.duration_ns, s.name, 'user_annotation',
       NULL, NULL, NULL, s.source_file, NULL
FROM steps s WHERE s.run_id = $run{ws} AND s.start_ns IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM (SELECT rank, source_file, name, start_ns, duration_ns FROM annotations WHERE run_id = $run
                   UNION ALL SELECT rank, source_file, node_name, start_ns, duration_ns FROM nodes WHERE run_id = $run) d
    WHERE d.rank IS NOT DISTINCT FROM s.rank AND d.source_file = s.source_file AND d.name = s.name
      AND d.start_ns = s.start_ns AND d.duration_ns IS NOT DISTINCT FROM s.duration_ns)
UNION ALL
SELECT 'events', rank, device, thread_id, start_ns, duration_ns, name, coalesce(category, 'event'),
       NULL, correlation_id, external_id, source_file, NULL
FROM events WHERE run_id = $run{w} AND start_ns IS NOT NULL AND stream IS NULL
ORDER BY rank NULLS FIRST, device, thread_id NULLS FIRST, start_ns, duration_ns DESC NULLS LAST
"""

_DEVICE = """
SELECT 'kernels' AS tbl, rank, device, stream, start_ns, duration_ns, coalesce(name, kind) AS name,
       CASE kind WHEN 'memcpy' THEN 'gpu_memcpy' WHEN 'memset' THEN 'gpu_memset' ELSE 'kernel' END AS cat,
       correlation_id AS corr, external_id AS ext, source_file, node_name AS op, bytes
FROM kernels WHERE run_id = $run{w} AND start_ns IS NOT NULL
UNION ALL
SELECT 'annotations', rank, device, stream, start_ns, duration_ns, name, coalesce(category, 'gpu_user_annotation'),
       NULL, external_id, source_file, NULL, NULL
FROM annotations WHERE run_id = $run{w} AND start_ns IS NOT NULL
  AND (category = 'gpu_user_annotation' OR (stream IS NOT NULL AND thread_id IS NULL))
UNION ALL
SELECT 'events', rank, device, stream, start_ns, duration_ns, name, coalesce(category, 'event'),
       correlation_id, external_id, source_file, NULL, NULL
FROM events WHERE run_id = $run{w} AND start_ns IS NOT NULL AND stream IS NOT NULL
ORDER BY rank NULLS FIRST, device, stream NULLS FIRST, start_ns, duration_ns DESC NULLS LAST
"""

_MEMORY = """
SELECT rank, device, coalesce(allocator, 'memory') AS allocator, ts_ns,
       coalesce(total_allocated_bytes,
                sum(bytes) OVER (PARTITION BY rank, device, allocator
                                 ORDER BY ts_ns ROWS UNBOUNDED PRECEDING))::BIGINT AS in_use
FROM allocations WHERE run_id = $run{w} AND ts_ns IS NOT NULL
ORDER BY rank NULLS FIRST, device, allocator, ts_ns
"""

_SEQ = 1  # trusted_packet_sequence_id of every packet: one writer


def _pb():
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise TracedbError(f"--format perfetto needs the 'perfetto' package (pip install perfetto): {e}") from None
    return perfetto_trace_pb2


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def export_perfetto(warehouse: Path, run_id: str, out: Path | IO, devices: list[str] | None = None) -> int:
    """Write run `run_id` as a Perfetto protobuf trace to `out` (a path, `.gz` to compress,
    or an open binary stream); `devices` limits it to those devices. Returns the number of
    slices, instants and counter values written."""
    con = catalog.connect(warehouse)
    try:
        where, dev_params = filter_sql(devices)
        check_exportable(con, run_id, where, dev_params)
        return write_to(out, True, lambda write: _Perfetto(con, run_id, where, dev_params, write).run())
    finally:
        con.close()


class _Lanes:
    """The tracks of one stream or thread: the first is its own, the others hold slices that
    overlap without nesting. Each keeps a stack of (end, uuid) still open."""

    def __init__(self, base_uuid: int, make: Callable[[int], int]):
        self.tracks = [base_uuid]
        self.stacks: list[list[int]] = [[]]
        self.make = make  # lane number -> uuid of a new extra track

    def place(self, start: int, end: int, close: Callable[[int, int], None]) -> int:
        """The uuid of the first lane where [start, end] nests; ends closed before `start`
        are written first (`close(uuid, end)`)."""
        for k, stack in enumerate(self.stacks):
            while stack and stack[-1] <= start:
                close(self.tracks[k], stack.pop())
            if not stack or end <= stack[-1]:
                stack.append(end)
                return self.tracks[k]
        self.tracks.append(self.make(len(self.tracks)))
        self.stacks.append([end])
        return self.tracks[-1]

    def close_all(self, close: Callable[[int, int], None]) -> None:
        for k, stack in enumerate(self.stacks):
            while stack:
                close(self.tracks[k], stack.pop())


class _Perfetto:
    def __init__(self, con, run_id: str, where: str, dev_params: list, write: Callable[[bytes], Any]):
        self.pb = _pb()
        self.con, self.run_id, self.write = con, run_id, write
        self.where, self.dev_params = where, dev_params
        self.threads = Threads()
        self.uuids = 0
        self.process_uuid: dict[int, int] = {}
        self.flows: dict[tuple, int] = {}
        self.count = 0

    def _sql(self, sql: str) -> tuple[str, dict]:
        # `device IN (?, ...)` as named parameters (one query binds them several times)
        w = self.where
        params: dict[str, Any] = {"run": self.run_id}
        for k, d in enumerate(self.dev_params):
            params[f"d{k}"] = d
        if w:
            w = " AND device IN (" + ", ".join(f"$d{k}" for k in range(len(self.dev_params))) + ")"
        return sql.format(w=w, ws=w.replace("device", "s.device")), params

    def _rows(self, sql: str) -> Iterator[dict]:
        text, params = self._sql(sql)
        return rows(self.con, text, params)

    def packet(self, **fields) -> Any:
        p = self.pb.TracePacket(trusted_packet_sequence_id=_SEQ, **fields)
        return p

    def emit(self, p) -> None:
        data = p.SerializeToString()
        self.write(b"\x0a" + _varint(len(data)) + data)  # Trace.packet (field 1, length-delimited)

    def new_uuid(self) -> int:
        self.uuids += 1
        return self.uuids

    def process(self, rank, device: str, name: str | None = None) -> tuple[int, int]:
        """(pid, track uuid) of a process, its descriptor written on first use."""
        label = name or device
        new = (rank, label) not in self.threads.pids
        pid = self.threads.pid(rank, label)
        if new:
            uuid = self.process_uuid[pid] = self.new_uuid()
            desc = self.pb.TrackDescriptor(uuid=uuid)
            desc.process.pid = pid
            desc.process.process_name = label if rank is None else f"{label} (rank {rank})"
            self.emit(self.packet(track_descriptor=desc))
        return pid, self.process_uuid[pid]

    def named_track(self, parent: int, name: str) -> int:
        uuid = self.new_uuid()
        self.emit(self.packet(track_descriptor=self.pb.TrackDescriptor(uuid=uuid, parent_uuid=parent, name=name)))
        return uuid

    def thread_track(self, pid: int, thread_id, name: str) -> int:
        tid, _ = self.threads.tid(pid, ("thread", thread_id), thread_id)
        uuid = self.new_uuid()
        desc = self.pb.TrackDescriptor(uuid=uuid)
        desc.thread.pid, desc.thread.tid = pid, tid
        desc.thread.thread_name = name if thread_id in (None, tid) else f"{name} (thread id {thread_id})"
        self.emit(self.packet(track_descriptor=desc))
        return uuid

    def close(self, uuid: int, end: int) -> None:
        self.emit(self.packet(timestamp=end, track_event=self.pb.TrackEvent(
            type=self.pb.TrackEvent.TYPE_SLICE_END, track_uuid=uuid)))

    def slice(self, lanes: _Lanes, r: dict, annotations: dict[str, Any], flow: int | None) -> None:
        ev = self.pb.TrackEvent(name=r["name"] if r["name"] is not None else "?", categories=[r["cat"]])
        for key, value in annotations.items():
            if value is None:
                continue
            a = ev.debug_annotations.add(name=key)
            if isinstance(value, int):
                a.int_value = value
            else:
                a.string_value = str(value)
        if flow is not None:
            ev.flow_ids.append(flow)
        start, dur = r["start_ns"], r["duration_ns"]
        if dur is None:  # an instant: on the stream's or thread's own track
            ev.type, ev.track_uuid = self.pb.TrackEvent.TYPE_INSTANT, lanes.tracks[0]
        else:
            ev.type = self.pb.TrackEvent.TYPE_SLICE_BEGIN
            ev.track_uuid = lanes.place(start, start + dur, self.close)
        if start < 0:
            raise TracedbError(f"{r['tbl']} row {r['name']!r} starts at {start} ns: Perfetto times are unsigned")
        self.emit(self.packet(timestamp=start, track_event=ev))
        self.count += 1

    def run(self) -> int:
        first = self.packet(sequence_flags=self.pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED)
        first.incremental_state_cleared = True
        self.emit(first)
        self.host()
        self.device()
        self.memory()
        return self.count

    def host(self) -> None:
        lanes, key = None, None
        for r in self._rows(_HOST):
            k = (r["rank"], r["device"], r["thread_id"])
            if k != key:
                if lanes:
                    lanes.close_all(self.close)
                key = k
                pid, puuid = self.process(r["rank"], r["device"], ops_process(r["device"]))
                t = r["thread_id"]
                name = thread_name(r["params"]) or ("thread" if t is None else f"thread {t}")
                base = self.thread_track(pid, t, name)
                lanes = _Lanes(base, lambda n, p=puuid, nm=name: self.named_track(p, f"{nm} ({n + 1})"))
            flow = None
            if r["flow_corr"] is not None:
                flow = self.flows.setdefault((r["rank"], r["source_file"], r["flow_corr"]), len(self.flows) + 1)
            self.slice(lanes, r, {"correlation": r["corr"], "External id": r["ext"]}, flow)
        if lanes:
            lanes.close_all(self.close)

    def device(self) -> None:
        lanes, key = None, None
        for r in self._rows(_DEVICE):
            k = (r["rank"], r["device"], r["stream"])
            if k != key:
                if lanes:
                    lanes.close_all(self.close)
                key = k
                _, puuid = self.process(r["rank"], r["device"])
                s = r["stream"]
                name = "stream (unknown)" if s is None else f"stream {s}"
                lanes = _Lanes(self.named_track(puuid, name),
                               lambda n, p=puuid, nm=name: self.named_track(p, f"{nm} ({n + 1})"))
            flow = None
            if r["tbl"] == "kernels" and r["corr"] is not None:
                flow = self.flows.get((r["rank"], r["source_file"], r["corr"]))
            self.slice(lanes, r, {"correlation": r["corr"], "External id": r["ext"], "op": r["op"],
                                  "bytes": r["bytes"]}, flow)
        if lanes:
            lanes.close_all(self.close)

    def memory(self) -> None:
        tracks: dict[tuple, int] = {}
        for r in self._rows(_MEMORY):
            k = (r["rank"], r["device"], r["allocator"])
            if k not in tracks:
                _, puuid = self.process(r["rank"], r["device"])
                uuid = tracks[k] = self.new_uuid()
                desc = self.pb.TrackDescriptor(uuid=uuid, parent_uuid=puuid, name=f"memory {r['allocator']}")
                desc.counter.unit = self.pb.CounterDescriptor.UNIT_SIZE_BYTES
                self.emit(self.packet(track_descriptor=desc))
            self.emit(self.packet(timestamp=r["ts_ns"], track_event=self.pb.TrackEvent(
                type=self.pb.TrackEvent.TYPE_COUNTER, track_uuid=tracks[k], counter_value=r["in_use"])))
            self.count += 1
