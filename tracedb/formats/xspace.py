"""TF2 / JAX XSpace (`*.xplane.pb`): GPU planes to `kernels`, host events and the device's
XLA ops to `nodes`.

An XSpace holds planes (`/device:GPU:N`, `/host:CPU`, metadata planes); a plane holds
lines (a GPU stream, a host thread) of events. Names and stat names live in per-plane
metadata maps, so every event and stat is resolved through them. Times: an event starts
at `line.timestamp_ns + offset_ps / 1000`.

Streaming (`pbwire`): pass 1 walks the planes and lines on the wire and parses each one's
own fields (names, metadata maps, stats: a line's `display_name` and a plane's maps come
after its events in the file); pass 2 parses the events of the GPU stream and host lines
a run (256 KB) at a time, skipping other lines' events unparsed. Memory: the metadata and
one run, not the file: 10 -> 40 MB of events reads in the same peak RSS
(tests/test_streaming.py). On 100 MB of events (bench/bench_stream.py, 2-core machine):
peak RSS 208 MB vs 896 MB for `ParseFromString` + the same rows (most of the 208 is the
65536-row batch; with 2048-row batches 19 MB vs 789 MB), CPU 1.00-1.02x; +1.5 ms on a
small file (two passes: 1.3-1.4x on the 67 KB fixture; an ingest's fixed cost is ~85 ms).

Steps: a host event with a `step_num` stat marks a step (JAX's
`jax.profiler.StepTraceAnnotation("train", step_num=i)`, TF2's
`tf.profiler.experimental.Trace("train", step_num=i, _r=1)`): its span is the step's
`steps` row (several events of one step number: the outermost span). A host event's step
is the marked span that contains its start; a GPU activity takes the step of its launch,
the host event with the same `correlation_id` (asynchronous dispatch runs kernels after
their step's host span ended). Only a trace whose host plane names a `step_num` stat pays
for it: one more pass over the host lines, before the rows are read.

XLA ops: each execution of an HLO instruction on a GPU stream is an untimed `nodes` row on
that device, in its step (`node_name` the instruction, `op_type` its opcode or custom-call target, its
operands' and results' shapes and dtypes, FLOPs and bytes), and its kernels point to it
with `node_seq` (`_DeviceOps`). The instructions come from the `Hlo Proto` stats of
`/host:metadata` (`formats/hlo.py`), found by the kernels' `program_id` and `hlo_op`, or
by the kernel's name inside a command buffer. XLA gives identical fusions one kernel
(`gemm_fusion_dot_general.6` runs `gemm_fusion_dot_general_5`): such an op is named after
the fusion whose kernel it ran, with the same FLOPs. Library kernels inside a command
buffer (cuBLAS, cuDNN: named by the library) cannot be told apart and get no op row.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from tracedb import devices
from tracedb.errors import TraceFormatError
from tracedb import flops as flop_rules
from tracedb.formats import hlo, pbwire
from tracedb.formats.base import (BatchBuilder, ReadContext, copy_kind, copy_kind_of_sides, flush, open_trace,
                                  varint)
from tracedb.proto import xplane_pb2

NAME = "xspace"
DESCRIPTION = "TF2 / JAX profiler XSpace (*.xplane.pb): GPU streams, host events"

_GPU_PLANE = re.compile(r"^/device:GPU:(\d+)$")
_STREAM = re.compile(r"Stream #(\d+)")
# Derived timelines (XLA Ops, Steps, ...) that the profiler adds to a device plane repeat
# stream activity; their ids start at 0xdeadbeef (stored as a C++ int, so maybe negative).
_DERIVED_MIN = 0xDEADBEEF
_DERIVED_SPAN = 1000
_ALLOCATOR_DEVICE = re.compile(r"^([A-Za-z]+)_(\d+)_")  # GPU_0_bfc -> GPU:0
_MEMORY_EVENTS = {"MemoryAllocation": 1, "MemoryDeallocation": -1}
_STEP_STAT = "step_num"


def _is_derived(line_id: int) -> bool:
    return any(0 <= line_id - base < _DERIVED_SPAN for base in (_DERIVED_MIN, _DERIVED_MIN - 2**32))


def sniff(head: bytes) -> bool:
    """XSpace field 1 (planes) whose XPlane starts with `id` (varint, field 1, often
    omitted when 0) then `name` (field 2) holding a printable plane name. TF StepStats /
    RunMetadata also open with a length-delimited field 1, but their nested message opens
    with another length-delimited field 1 (tag 0x0a), never 0x08 / 0x12."""
    try:
        if not head or head[0] != 0x0A:
            return False
        plane_len, i = varint(head, 1)
        end = i + plane_len
        if head[i] == 0x08:  # XPlane.id
            _, i = varint(head, i + 1)
        if head[i] != 0x12:  # XPlane.name
            return False
        name_len, i = varint(head, i + 1)
        if not 0 < name_len <= 256 or i + name_len > min(end, len(head)):
            return False
        name = head[i : i + name_len].decode("utf-8")
    except (IndexError, UnicodeDecodeError):
        return False
    return name.isprintable()


_WHAT = "truncated or corrupt XSpace protobuf"
# Walked on the wire (`pbwire`): each plane's and line's own fields first (names, the
# metadata maps), then the events a run at a time.
_LINE = pbwire.Spec(xplane_pb2.XLine, "lines", stream=(4, "events"))
_SPACE = pbwire.Spec(xplane_pb2.XSpace, "", nested={
    1: pbwire.Spec(xplane_pb2.XPlane, "planes", nested={3: _LINE})})


class _Plane:
    """A plane's metadata maps, for resolving event names and stat values."""

    def __init__(self, plane: xplane_pb2.XPlane):
        self.plane = plane
        self.stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
        self.event_md = plane.event_metadata

    def value(self, stat: xplane_pb2.XStat) -> Any:
        which = stat.WhichOneof("value")
        if which is None:
            return None
        v = getattr(stat, which)
        if which == "ref_value":  # interned string: the referenced stat metadata's name
            return self.stat_names.get(v, v)
        if which == "bytes_value":  # serialized protos (HLO, options): not useful as text
            return f"<{len(v)} bytes>"
        return v

    def stats(self, *groups) -> dict[str, Any]:
        """Stats by name; later groups (the event's own) override earlier (its metadata's)."""
        out: dict[str, Any] = {}
        for group in groups:
            for st in group:
                name = self.stat_names.get(st.metadata_id) or f"stat_{st.metadata_id}"
                out[name] = self.value(st)
        return out

    def event(self, ev: xplane_pb2.XEvent) -> tuple[str, str, dict[str, Any]]:
        """(name, display name, stats) of an event."""
        md = self.event_md.get(ev.metadata_id)
        if md is None:
            return f"event_{ev.metadata_id}", f"event_{ev.metadata_id}", self.stats(ev.stats)
        return md.name, md.display_name or md.name, self.stats(md.stats, ev.stats)


def _times(line: xplane_pb2.XLine, ev: xplane_pb2.XEvent) -> tuple[int, int]:
    return line.timestamp_ns + ev.offset_ps // 1000, ev.duration_ps // 1000


def _details(text: Any) -> dict[str, str]:
    """CUPTI detail stats: 'regs:168 grid:512,1,1 ...' -> {'regs': '168', 'grid': '512,1,1'}."""
    if not isinstance(text, str):
        return {}
    return dict(p.split(":", 1) for p in text.split() if ":" in p)


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _float(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _dims(v: str | None) -> list[int] | None:
    if not v:
        return None
    try:
        return [int(x) for x in v.split(",")]
    except ValueError:
        return None


def _tf_op(v: Any) -> tuple[str, str] | None:
    """TF op fullname `scope/name:Type` -> (name, Type)."""
    if not isinstance(v, str):
        return None
    name, _, typ = v.rpartition(":")
    return (name, typ) if name and typ else None


def _params(d: dict[str, Any]) -> str | None:
    return json.dumps(d, default=str) if d else None


def _copy_kind(name: str, details: dict[str, str]) -> str | None:
    """By the event's name (`MemcpyH2D`), else by its memory kinds (CUPTI's memcpy details)."""
    return copy_kind(name) or copy_kind_of_sides(details.get("kind_src"), details.get("kind_dst"))


class _Steps:
    """A trace's marked steps: their spans by step number, the host start of each launch
    (by correlation id), and each step's device work, counted as the kernels are read."""

    def __init__(self) -> None:
        self.spans: dict[int, list] = {}  # step -> [start, end, thread, name]
        self.launches: dict[int, int] = {}  # correlation id -> host start of the launch
        self.work: dict[int, list[int]] = {}  # step -> [first start, last end, count]
        self._starts: list[int] = []
        self._spans: list[tuple[int, int, int]] = []
        self._launch_step: dict[int, int] = {}

    def add(self, n: int, start: int, end: int, thread: int, name: str) -> None:
        span = self.spans.get(n)
        if span is None or end - start > span[1] - span[0]:  # the outermost marker wins
            self.spans[n] = [start, end, thread, name]

    def seal(self) -> None:
        self._spans = sorted((s[0], s[1], n) for n, s in self.spans.items())
        self._starts = [s[0] for s in self._spans]
        self._launch_step = {c: n for c, t in self.launches.items() if (n := self.at(t)) is not None}

    def at(self, t: int) -> int | None:
        """The step whose span holds time t (None outside every step, or no steps)."""
        k = bisect_right(self._starts, t) - 1
        if k >= 0 and t < self._spans[k][1]:
            return self._spans[k][2]
        return None

    def of_launch(self, correlation_id: int | None, start: int, duration: int) -> int | None:
        """The step of the GPU activity launched by `correlation_id`, counted as its work."""
        n = self._launch_step.get(correlation_id) if correlation_id is not None else None
        if n is not None:
            w = self.work.get(n)
            if w is None:
                self.work[n] = [start, start + duration, 1]
            else:
                w[0], w[1], w[2] = min(w[0], start), max(w[1], start + duration), w[2] + 1
        return n

    def rows(self) -> Iterator[dict[str, Any]]:
        for n, (start, end, thread, name) in sorted(self.spans.items()):
            work = self.work.get(n)
            yield {"device": "CPU:0", "device_raw": "/host:CPU", "step": n, "name": name,
                   "start_ns": start, "duration_ns": end - start, "thread_id": thread,
                   "device_start_ns": work[0] if work else None, "device_end_ns": work[1] if work else None,
                   "kernel_count": work[2] if work else 0}


def _marked_steps(path: Path, tree: pbwire.Node) -> _Steps:
    """The steps marked on the host plane (`step_num` stats), with the launches' times: a
    pass over the host lines alone, made only when the plane names a `step_num` stat."""
    steps, host = _Steps(), {}
    for node in tree.children:
        if node.header.name == "/host:CPU":
            ids = {m.name: k for k, m in node.header.stat_metadata.items()}
            if _STEP_STAT in ids:
                for ln in node.children:
                    host[id(ln)] = (node.header, ids[_STEP_STAT], ids.get("correlation_id"))
    if not host:
        return steps
    with open_trace(path) as f:
        for ln, events in pbwire.stream(f, _SPACE, tree, _WHAT, want=lambda n: id(n) in host):
            plane, step_id, corr_id = host[id(ln)]
            for ev in events:
                if ev.WhichOneof("data") == "num_occurrences":
                    continue
                n = corr = None
                for st in ev.stats:
                    if st.metadata_id == step_id or st.metadata_id == corr_id:
                        which = st.WhichOneof("value")
                        v = _int(getattr(st, which)) if which in ("int64_value", "uint64_value") else None
                        if st.metadata_id == step_id:
                            n = v
                        else:
                            corr = v
                start, dur = _times(ln.header, ev)
                if n is not None:
                    md = plane.event_metadata.get(ev.metadata_id)
                    steps.add(n, start, start + dur, ln.header.id, md.name if md else f"step {n}")
                elif corr is not None:
                    steps.launches[corr] = start
    steps.seal()
    return steps


def _kernel_row(p: _Plane, line, ev, device: str, raw: str, stream: int) -> dict | None:
    full, name, stats = p.event(ev)
    if any(k in stats for k in ("memalloc_details", "memfree_details", "memory_residency_details")):
        return None  # driver memory management, not stream activity
    start, dur = _times(line, ev)
    row: dict[str, Any] = {
        "device": device, "device_raw": raw, "stream": stream, "name": name,
        "start_ns": start, "duration_ns": dur,
        "correlation_id": _int(stats.pop("correlation_id", None)),
    }
    lname = name.lower()
    if "memcpy_details" in stats or lname.startswith("memcpy"):
        det = _details(stats.pop("memcpy_details", None))
        row.update(kind="memcpy", copy_kind=_copy_kind(name, det),
                   bytes=_int(det.get("size", det.get("num_bytes"))))
        stats.update({f"memcpy_{k}": v for k, v in det.items() if k not in ("size", "num_bytes")})
    elif "memset_details" in stats or lname.startswith("memset"):
        det = _details(stats.pop("memset_details", None))
        row.update(kind="memset", bytes=_int(det.get("num_bytes", det.get("size"))))
        stats.update({f"memset_{k}": v for k, v in det.items() if k not in ("size", "num_bytes")})
    else:
        row["kind"] = "kernel"
        det = _details(stats.pop("kernel_details", None))
        shared = [v for k in ("static_shared", "dynamic_shared") if (v := _int(det.get(k))) is not None]
        row.update(
            grid=_dims(det.get("grid")), block=_dims(det.get("block")),
            registers_per_thread=_int(det.get("regs")),
            shared_memory_bytes=sum(shared) if shared else None,  # static + dynamic, as Kineto
        )
        occ = stats.pop("theoretical_occupancy_pct", None)
        row["occupancy"] = float(occ) if occ is not None else _float(det.get("occ_pct"))
    row["_op"] = (stats.get("program_id"), stats.get("hlo_module"), stats.get("hlo_op"),
                  stats.get("scope_range_id", row["correlation_id"]),
                  _reported(stats.get("flops")), _reported(stats.get("bytes_accessed")))
    if stats.get("hlo_op"):  # the op that launched it
        row["node_name"] = stats.pop("hlo_op")
    elif (op := _tf_op(stats.get("tf_op"))) is not None:
        row["node_name"] = op[0]
        stats.pop("tf_op")
    if full != name:
        stats["full_name"] = full
    row["params"] = _params(stats)
    return row


def _gpu_stream(line: xplane_pb2.XLine) -> int | None:
    """The stream of a GPU plane's line; None for lines that only repeat or annotate
    stream activity (derived timelines, CUPTI overhead)."""
    if _is_derived(line.id):
        return None
    m = _STREAM.search(line.name) or _STREAM.search(line.display_name)
    if m is None and line.name.startswith("CUPTI overhead"):
        return None
    return int(m.group(1)) if m else line.id


def _reported(v: Any) -> int | None:
    """An op's own `flops` / `bytes_accessed` stat (XProf's XLA op stats), when a plane has one."""
    f = _float(v)
    return int(f) if f is not None and f >= 0 else None


class _DeviceOps:
    """The XLA ops a GPU stream ran, as `nodes` rows: one per execution of a launched HLO
    instruction, untimed (its time is its kernels', linked by `node_seq`: a command
    buffer's kernels overlap, and the host op queries read timed nodes as host time). A kernel names its program and op
    (`program_id`, `hlo_op`); the kernels of one execution of a library call (cuDNN,
    cuBLAS) share its `scope_range_id`; a kernel inside a command buffer (`hlo_op` names the
    buffer, not an instruction) is found by its own name and is one execution by itself.
    FLOPs: the op's own `flops` / `bytes_accessed` stats where the plane has them, else the
    HLO module's (`hlo.Module`)."""

    def __init__(self, modules: dict, nodes: BatchBuilder, seq: list[int]):
        self.modules, self.nodes, self.seq = modules, nodes, seq
        self.open: dict | None = None
        self.key: Any = None

    def kernel(self, row: dict) -> Iterator[tuple[str, pa.RecordBatch]]:
        """Link a kernel row to its op's node row (opened here, emitted when the op ends)."""
        program, module_name, hlo_op, scope, flops, nbytes = row.pop("_op")
        module = self.modules.get(_int(program)) if program is not None else None
        module = module or self.modules.get(module_name) if module_name else module
        op = key = None
        if module is not None and hlo_op in module.ops:
            op, key = module.ops[hlo_op], (program, module_name, hlo_op, scope)
        elif module is not None and (name := module.by_kernel.get(row["name"])) is not None:
            op, key = module.ops[name], object()  # one kernel of a command buffer: an execution by itself
        if op is None and flops is None:
            yield from self.close()
            return
        if key is None or key != self.key:
            yield from self.close()
            self.key = key
            self.open = self._row(row, module, op, hlo_op, flops, nbytes)
        else:
            self.open["_kernels"] += 1
        row["node_seq"] = self.open["seq"]

    def _row(self, k: dict, module: Any, op: Any, hlo_op: Any, flops: int | None, nbytes: int | None) -> dict:
        seq = self.seq[0]
        self.seq[0] += 1
        reported = flops is not None
        row = {"device": k["device"], "device_raw": k["device_raw"], "step": k["step"],
               "node_name": op.name if op else hlo_op or k["name"], "op_type": op.op_type if op else hlo_op,
               "seq": seq, "_kernels": 1,
               "_params": {"hlo_module": module.name if module else None, "stream": k["stream"],
                           **({"fusion_kind": op.fusion_kind} if op and op.fusion_kind else {})}}
        if op is not None:
            row.update(input_shapes=op.input_shapes, input_dtypes=op.input_dtypes,
                       output_shapes=op.output_shapes, output_dtypes=op.output_dtypes)
        f, b, rule = (flops, nbytes, flop_rules.REPORTED) if reported else (op.flops, op.bytes, op.rule)
        if f is not None:
            row.update(flops=f, memory_bytes=b, flops_rule=rule, flops_counted=True,
                       flops_dtype=flop_rules.precision([op.dtype] if op and op.dtype else None))
        return row

    def close(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        if self.open is not None:
            row, self.open, self.key = self.open, None, None
            row["params"] = _params({**row.pop("_params"), "kernels": row.pop("_kernels")})
            yield from self.nodes.append(row)


def _gpu_events(p: _Plane, line: xplane_pb2.XLine, events: Any, device: str, stream: int,
                kernels: BatchBuilder, steps: _Steps, ops: _DeviceOps) -> Iterator[tuple[str, pa.RecordBatch]]:
    raw = p.plane.name
    for ev in events:
        if ev.WhichOneof("data") == "num_occurrences":
            continue  # aggregated: no start time
        row = _kernel_row(p, line, ev, device, raw, stream)
        if row is not None:
            row["step"] = steps.of_launch(row["correlation_id"], row["start_ns"], row["duration_ns"])
            yield from ops.kernel(row)
            yield from kernels.append(row)


def _allocation_row(stats: dict[str, Any], sign: int, ts: int) -> dict[str, Any]:
    allocator = stats.pop("allocator_name", None)
    m = _ALLOCATOR_DEVICE.match(allocator or "")
    size = stats.pop("allocation_bytes", None)
    if size is None:
        size = stats.get("requested_bytes")
    return {
        "device": devices.canonical(m.group(1), m.group(2)) if m else "CPU:0",
        "device_raw": allocator, "allocator": allocator, "ts_ns": ts,
        "bytes": None if size is None else sign * int(size),
        "address": _int(stats.pop("addr", None)),
        "total_allocated_bytes": _int(stats.pop("bytes_allocated", None)),
        "total_reserved_bytes": _int(stats.pop("bytes_reserved", None)),
        "kind": "alloc" if sign > 0 else "free",
        "params": _params(stats),
    }


def _host_events(p: _Plane, line: xplane_pb2.XLine, events: Any, nodes: BatchBuilder,
                 allocs: BatchBuilder, seq: list[int], steps: _Steps) -> Iterator[tuple[str, pa.RecordBatch]]:
    raw, device = p.plane.name, "CPU:0"  # one host per XSpace
    thread_name = line.display_name or line.name
    for ev in events:
        if ev.WhichOneof("data") == "num_occurrences":
            continue
        full, display, stats = p.event(ev)
        start, dur = _times(line, ev)
        if full in _MEMORY_EVENTS and "allocator_name" in stats:
            yield from allocs.append({**_allocation_row(stats, _MEMORY_EVENTS[full], start), "step": steps.at(start)})
            continue
        node_name, op_type = full, display
        if (op := _tf_op(stats.get("tf_op"))) is not None:
            node_name, op_type = op
            stats.pop("tf_op")
        extra = {"thread_name": thread_name, **stats}
        if display != full:
            extra["display_name"] = display
        yield from nodes.append({
            "device": device, "device_raw": raw, "step": steps.at(start), "node_name": node_name, "op_type": op_type,
            "start_ns": start, "duration_ns": dur, "thread_id": line.id, "seq": seq[0],
            "correlation_id": _int(stats.get("correlation_id")), "params": _params(extra),
        })
        seq[0] += 1


def _metadata(tree: pbwire.Node, ctx: ReadContext) -> None:
    space = tree.header
    info: dict[str, Any] = {"hostnames": list(space.hostnames)}
    if space.errors:
        info["errors"] = list(space.errors)
    for node in tree.children:
        plane = node.header
        p = _Plane(plane)
        stats = p.stats(plane.stats)
        if m := _GPU_PLANE.match(plane.name):
            ctx.metadata.setdefault("devices", {})[devices.canonical("GPU", m.group(1))] = stats
        elif plane.name in ("/host:metadata", "Task Environment"):
            info[plane.name] = stats
    ctx.metadata["xspace"] = info


def _hlo_modules(tree: pbwire.Node, ctx: ReadContext) -> dict:
    """The HLO modules of the `/host:metadata` plane, by program id and name (`hlo.hlo_modules`)."""
    out: dict = {}
    for node in tree.children:
        if node.header.name == "/host:metadata":
            out.update(hlo.hlo_modules(node.header, ctx.warn))
    return out


def _line_kinds(tree: pbwire.Node) -> dict[int, tuple[_Plane, str | None, int | None]]:
    """id(line node) -> (its plane, its GPU device or None for the host, its stream), for
    the lines whose events become rows; other lines' events are skipped unparsed."""
    out: dict[int, tuple[_Plane, str | None, int | None]] = {}
    for node in tree.children:
        name = node.header.name
        if m := _GPU_PLANE.match(name):
            p, device = _Plane(node.header), devices.canonical("GPU", m.group(1))
            for ln in node.children:
                if (stream := _gpu_stream(ln.header)) is not None:
                    out[id(ln)] = (p, device, stream)
        elif name == "/host:CPU":
            p = _Plane(node.header)
            for ln in node.children:
                out[id(ln)] = (p, None, None)
        # other planes (metadata, call stacks, task environment, TPUs) carry no GPU/host ops
    return out


def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    with open_trace(path) as f:
        tree = pbwire.index(f, _SPACE, _WHAT)
    if not tree.children:
        raise TraceFormatError("XSpace has no planes")
    _metadata(tree, ctx)
    kinds = _line_kinds(tree)
    steps = _marked_steps(path, tree)
    kernels, nodes, allocs = BatchBuilder("kernels"), BatchBuilder("nodes"), BatchBuilder("allocations")
    seq = [0]  # host events and device ops numbered in file order
    modules = _hlo_modules(tree, ctx)
    ops, last = _DeviceOps(modules, nodes, seq), None
    with open_trace(path) as f:
        for ln, events in pbwire.stream(f, _SPACE, tree, _WHAT, want=lambda n: id(n) in kinds):
            if ln is not last:  # an op ends with its line
                yield from ops.close()
                last = ln
            p, device, stream = kinds[id(ln)]
            if device is not None:
                yield from _gpu_events(p, ln.header, events, device, stream, kernels, steps, ops)
            else:
                yield from _host_events(p, ln.header, events, nodes, allocs, seq, steps)
    yield from ops.close()
    rows = BatchBuilder("steps")
    for row in steps.rows():
        yield from rows.append(row)
    yield from flush(kernels, nodes, allocs, rows)
