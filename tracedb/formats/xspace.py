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

Rows per event, without a Python object per stat: a run of events parses with each stat
left as its encoded bytes (`_raw_line`: xplane.proto's classes with `XEvent.stats` made
`repeated bytes`), each distinct encoding is decoded once per plane (`_Plane.entry`), and
an event's row comes from a template, one per event metadata and set of column-deciding
stat encodings (`_SPECIAL`: kernel details, the HLO op, ...), made by the row rules run
once with the event's other stat values as placeholders (`_Slot`); per event only the
times, the correlation id, the op link and the params JSON's varying values are filled
in. Batches are built a column at a time (`_Rows`: template columns by `take`). A stat
XStat refuses raises the error parsing its run whole gives (`pbwire.Run.check`).

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

import contextlib
import json
import operator
import re
from bisect import bisect_right
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError
from json.encoder import encode_basestring_ascii as _json_str  # json.dumps' str encoder (ensure_ascii)

from tracedb import devices, schema
from tracedb.errors import TraceFormatError
from tracedb import flops as flop_rules
from tracedb.formats import base, hlo, pbwire
from tracedb.formats.base import (BatchBuilder, ReadContext, annotate_nodes, classify_kernels, copy_kind,
                                  copy_kind_of_sides, flush, open_trace, varint)
from tracedb.kernel_types import classify
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


def _raw_line() -> type:
    """XLine's events as upb parses them with each stat left as its encoded bytes: the
    classes of xplane.proto copied with `XEvent.stats` made `repeated bytes` (same field
    number and wire type), so a run of events parses in one C call without a message per
    stat, and each distinct stat encoding is decoded once (`_Plane.entry`)."""
    f = descriptor_pb2.FileDescriptorProto(name="tracedb_xspace_raw.proto", package="tracedb_xspace_raw",
                                           syntax="proto3")
    line, event = f.message_type.add(), f.message_type.add()
    xplane_pb2.XLine.DESCRIPTOR.CopyToProto(line)
    xplane_pb2.XEvent.DESCRIPTOR.CopyToProto(event)
    for fd in line.field:
        if fd.name == "events":
            fd.type_name = ".tracedb_xspace_raw.XEvent"
    for fd in event.field:
        if fd.name == "stats":
            fd.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
            fd.ClearField("type_name")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tracedb_xspace_raw.XLine"))


# Walked on the wire (`pbwire`): each plane's and line's own fields first (names, the
# metadata maps), then the events a run at a time, their stats as bytes (`_raw_line`).
_LINE = pbwire.Spec(xplane_pb2.XLine, "lines", stream=(4, "events"), elements=_raw_line())
_SPACE = pbwire.Spec(xplane_pb2.XSpace, "", nested={
    1: pbwire.Spec(xplane_pb2.XPlane, "planes", nested={3: _LINE})})

# Stats whose value decides a row's columns (not only its params): an event's template
# (`_Plane.template`) is keyed by their encodings; every other stat only by its metadata id,
# its value filled in per event.
_SPECIAL = frozenset({"memalloc_details", "memfree_details", "memory_residency_details", "memcpy_details",
                      "memset_details", "kernel_details", "theoretical_occupancy_pct", "program_id", "hlo_module",
                      "hlo_op", "flops", "bytes_accessed", "tf_op"})
_KEY = operator.itemgetter(0)  # a `_Stat`'s key
_INT_TAGS = (0x18, 0x20, 0x38)  # XStat.uint64_value, int64_value, ref_value (varints)
_CACHE_MAX = 1 << 16  # distinct stat encodings / templates kept per line before starting over


class _BadStat(Exception):
    """A stat's bytes that XStat does not parse: the run is checked for pbwire's error."""


# A decoded stat is a tuple (a `NamedTuple`'s construction costs more than its decode):
# its key (its bytes for a `_SPECIAL` name, else its metadata id), its name and value as
# `_Plane.value` gives them, its `"name": value` JSON, the value as `_int` reads it, its
# metadata id, and the raw integer the step pass reads (int64 / uint64 values only).
_Stat = tuple
_S_KEY, _S_NAME, _S_VALUE, _S_PIECE, _S_INT, _S_MID, _S_RAW = range(7)  # its fields


class _Slot:
    """A template's stand-in for an event's own stat value (its index in the event's stats)."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


class _Plane:
    """A plane's metadata maps, for resolving event names and stat values; each distinct
    stat encoding decoded once (`entry`), each event metadata's stats once (`md_entries`)."""

    def __init__(self, plane: xplane_pb2.XPlane):
        self.plane = plane
        self.stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
        self.event_md = plane.event_metadata
        self.cache: dict[bytes, _Stat] = {}
        self._md: dict[int, list[_Stat]] = {}
        self._names: dict[int, tuple[str, str, bool]] = {}

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

    def _stat(self, st: xplane_pb2.XStat, raw: bytes | None) -> _Stat:
        which = st.WhichOneof("value")
        raw_int = getattr(st, which) if which in ("int64_value", "uint64_value") else None
        return self._make(st.metadata_id, self.value(st), raw_int, raw if raw is not None else st.SerializeToString())

    def _make(self, mid: int, value: Any, raw_int: int | None, raw: bytes) -> _Stat:
        name, jname, special = self._name(mid)
        cls = value.__class__  # the piece as json.dumps({name: value}, default=str) writes it
        text = int.__repr__(value) if cls is int else _json_str(value) if cls is str else json.dumps(value)
        return (raw if special else mid, name, value, jname + text, value if cls is int else _int(value), mid, raw_int)

    def _name(self, mid: int) -> tuple[str, str, bool]:
        """(name, its JSON and ': ', whether `_SPECIAL`) of a stat metadata id."""
        out = self._names.get(mid)
        if out is None:
            name = self.stat_names.get(mid) or f"stat_{mid}"
            out = self._names[mid] = (name, _json_str(name) + ": ", name in _SPECIAL)
        return out

    def entry(self, raw: bytes) -> _Stat:
        """The decoded stat of an encoding (cached); `_BadStat` when XStat refuses it. An
        integer stat in its usual encoding (metadata id < 128, then one int64 / uint64 / ref
        varint of up to 9 bytes, nothing else) is read here; anything else by XStat."""
        e = self.cache.get(raw)
        if e is None:
            n = len(raw)
            v = _varint_to_end(raw) if 3 < n < 13 and raw[0] == 0x08 and raw[1] < 0x80 and raw[2] in _INT_TAGS else None
            if v is not None:
                e = self._make(raw[1], self.stat_names.get(v, v), None, raw) if raw[2] == 0x38 else \
                    self._make(raw[1], v, v, raw)
            else:
                try:
                    st = xplane_pb2.XStat.FromString(raw)
                except DecodeError:
                    raise _BadStat from None
                e = self._stat(st, raw)
            if len(self.cache) >= _CACHE_MAX:
                self.cache.clear()
            self.cache[raw] = e
        return e

    def md_entries(self, mid: int) -> list[_Stat]:
        out = self._md.get(mid)
        if out is None:
            md = self.event_md.get(mid)
            out = self._md[mid] = [self._stat(st, None) for st in md.stats] if md is not None else []
        return out

    def names(self, mid: int) -> tuple[str, str]:
        """(name, display name) of an event's metadata."""
        md = self.event_md.get(mid)
        if md is None:
            return f"event_{mid}", f"event_{mid}"
        return md.name, md.display_name or md.name

    def symbolic(self, mid: int, ents: list[_Stat]) -> dict[str, Any]:
        """The stats dict of an event (`stats(md.stats, ev.stats)`) with the values of the
        event's own non-`_SPECIAL` stats left as `_Slot`s, to be filled in per event."""
        out: dict[str, Any] = {e[_S_NAME]: e[_S_VALUE] for e in self.md_entries(mid)}
        for i, e in enumerate(ents):
            out[e[_S_NAME]] = e[_S_VALUE] if e[_S_NAME] in _SPECIAL else _Slot(i)
        return out


def _recipe(stats: dict[str, Any]) -> tuple[str | None, tuple[int, ...]]:
    """The params JSON of a symbolic stats dict, `json.dumps(stats, default=str)` once the
    slots' `"name": value` pieces are in: (the text, ()) without slots, else (a format
    string, the slots it takes, in order); (None, ()) for no stats."""
    if not stats:
        return None, ()
    parts, slots = [], []
    for k, v in stats.items():
        if isinstance(v, _Slot):
            parts.append("{}")
            slots.append(v.i)
        else:
            parts.append(json.dumps({k: v}, default=str)[1:-1].replace("{", "{{").replace("}", "}}"))
    fmt = "{{" + ", ".join(parts) + "}}"
    return (fmt, tuple(slots)) if slots else (fmt.format(), ())


def _varint_to_end(raw: bytes) -> int | None:
    """The varint at raw[3:] if it ends exactly at the end of `raw`, else None (the
    toolkit's decoder: `base.varint`)."""
    try:
        v, end = base.varint(raw, 3)
    except IndexError:
        return None
    return v if end == len(raw) else None


def _pick(v: Any, ents: list[_Stat], field: int) -> Any:
    """A symbolic value for one event: a slot's field of its stat, else the constant."""
    return ents[v.i][field] if isinstance(v, _Slot) else v


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


def _marked_steps(path: Path, tree: pbwire.Node, planes: dict[int, _Plane]) -> _Steps:
    """The steps marked on the host plane (`step_num` stats), with the launches' times: a
    pass over the host lines alone, made only when the plane names a `step_num` stat."""
    steps, host = _Steps(), {}
    for node in tree.children:
        if node.header.name == "/host:CPU":
            ids = {m.name: k for k, m in node.header.stat_metadata.items()}
            if _STEP_STAT in ids:
                for ln in node.children:
                    host[id(ln)] = (planes[id(node)], ids[_STEP_STAT], ids.get("correlation_id"))
    if not host:
        return steps
    with open_trace(path) as f:
        for ln, events in pbwire.stream(f, _SPACE, tree, _WHAT, want=lambda n: id(n) in host):
            p, step_id, corr_id = host[id(ln)]
            with _checked(events):
                for ev in events:
                    if ev.WhichOneof("data") == "num_occurrences":
                        continue
                    n = corr = None
                    for raw in ev.stats:
                        e = p.entry(raw)
                        if e[_S_MID] == step_id:
                            n = e[_S_RAW]
                        elif e[_S_MID] == corr_id:
                            corr = e[_S_RAW]
                    start, dur = _times(ln.header, ev)
                    if n is not None:
                        md = p.event_md.get(ev.metadata_id)
                        steps.add(n, start, start + dur, ln.header.id, md.name if md else f"step {n}")
                    elif corr is not None:
                        steps.launches[corr] = start
    steps.seal()
    return steps


@contextlib.contextmanager
def _checked(events: pbwire.Run) -> Iterator[None]:
    """A stat XStat refuses is the run's error, as parsing it whole gives it (`Run.check`)."""
    try:
        yield
    except _BadStat:
        events.check()
        raise TraceFormatError(f"{_WHAT}: a stat does not parse") from None


class _Tpl:
    """One row template's column values, and its index among a batch's templates."""

    __slots__ = ("values", "gen", "n")

    def __init__(self, values: tuple):
        self.values, self.gen, self.n = values, None, 0


class _Rows:
    """Rows of one table as (template index, the varying columns...) tuples: a batch's
    template columns are built once per template and spread by `take`, the varying ones
    from their Python values, so a row costs a tuple, not a dict (`BatchBuilder`'s
    conversion, and its error message for a value Arrow refuses, on the dict rows)."""

    def __init__(self, table: str, static: tuple[str, ...], varying: tuple[str, ...]):
        self.table, self.static, self.varying = table, static, varying
        self.batch_rows = BatchBuilder(table).batch_rows  # batches as every reader's
        self.schema = schema.TABLES[table]
        self.rows: list[tuple] = []
        self.tpls: list[tuple] = []
        self.gen = object()
        self.emitted = 0

    def index(self, t: _Tpl) -> int:
        if t.gen is not self.gen:
            t.gen, t.n = self.gen, len(self.tpls)
            self.tpls.append(t.values)
        return t.n

    def append(self, row: tuple) -> Iterable[tuple[str, pa.RecordBatch]]:
        rows = self.rows
        rows.append(row)
        if len(rows) >= self.batch_rows:
            return list(self.flush())
        return ()

    def flush(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        if not self.rows:
            return
        try:
            batch = self._batch()
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError):
            batch = self._as_dicts()
        self.emitted += len(self.rows)
        self.rows, self.tpls, self.gen = [], [], object()
        if self.table == "kernels":
            batch = classify_kernels(batch)
        elif self.table == "nodes":
            batch = annotate_nodes(batch)
        yield self.table, batch

    def _batch(self) -> pa.RecordBatch:
        n, field = len(self.rows), self.schema.field
        cols = list(zip(*self.rows))
        idx = pa.array(cols[0], pa.int32())
        arrays = {name: pa.array([t[j] for t in self.tpls], field(name).type).take(idx)
                  for j, name in enumerate(self.static)}
        arrays.update({name: pa.array(cols[j + 1], field(name).type) for j, name in enumerate(self.varying)})
        return pa.RecordBatch.from_arrays([arrays[f.name] if f.name in arrays else pa.nulls(n, f.type)
                                           for f in self.schema], schema=self.schema)

    def _as_dicts(self) -> pa.RecordBatch:
        """The batch through `BatchBuilder` (error path: it names the row and field Arrow refused)."""
        b = BatchBuilder(self.table, annotate=False)
        b.emitted = self.emitted
        b.rows = [{**dict(zip(self.static, self.tpls[r[0]])), **dict(zip(self.varying, r[1:]))} for r in self.rows]
        return next(iter(b.flush()))[1]


_KERNEL_STATIC = ("device", "device_raw", "stream", "name", "kind", "copy_kind", "bytes", "grid", "block",
                  "registers_per_thread", "shared_memory_bytes", "occupancy", "node_name", "kernel_type",
                  "kernel_category")
_KERNEL_VARYING = ("start_ns", "duration_ns", "correlation_id", "step", "node_seq", "params")
_NODE_STATIC = ("device", "device_raw", "node_name", "op_type", "input_shapes", "input_dtypes", "output_shapes",
                "output_dtypes", "flops", "memory_bytes", "flops_rule", "flops_counted", "flops_dtype")
_NODE_VARYING = ("step", "start_ns", "duration_ns", "thread_id", "seq", "correlation_id", "params")
# How a kernel links to its op row (`_DeviceOps`): none, an op row of its own, one execution
# of an HLO instruction (kernels of one execution share its key), a command buffer's kernel.
_NO_OP, _OWN_OP, _EXEC_OP, _BUFFER_OP = range(4)


class _KernelTpl:
    """What every GPU event of one metadata and one set of `_SPECIAL` stat encodings has in
    common: the kernel row's columns (`_kernel_row` with the event's own other stats as
    `_Slot`s), how its params JSON is filled in, and the op it links to."""

    __slots__ = ("skip", "row", "corr", "scope", "scope_is_corr", "fmt", "slots", "link", "key", "op_row",
                 "op_params")


def _kernel_template(p: _Plane, mid: int, ents: list[_Stat], device: str, raw: str, stream: int,
                     modules: dict) -> _KernelTpl:
    t = _KernelTpl()
    full, name = p.names(mid)
    stats = p.symbolic(mid, ents)
    t.skip = any(k in stats for k in ("memalloc_details", "memfree_details", "memory_residency_details"))
    if t.skip:  # driver memory management, not stream activity
        return t
    t.corr = stats.pop("correlation_id", None)
    row: dict[str, Any] = {"device": device, "device_raw": raw, "stream": stream, "name": name}
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
    program, module_name, hlo_op = stats.get("program_id"), stats.get("hlo_module"), stats.get("hlo_op")
    t.scope_is_corr = "scope_range_id" not in stats
    t.scope = stats.get("scope_range_id")
    flops, nbytes = _reported(stats.get("flops")), _reported(stats.get("bytes_accessed"))
    if stats.get("hlo_op"):  # the op that launched it
        row["node_name"] = stats.pop("hlo_op")
    elif (op := _tf_op(stats.get("tf_op"))) is not None:
        row["node_name"] = op[0]
        stats.pop("tf_op")
    if full != name:
        stats["full_name"] = full
    t.fmt, t.slots = _recipe(stats)
    row["kernel_type"], row["kernel_category"] = classify(name, row["kind"])
    t.row = _Tpl(tuple(row.get(c) for c in _KERNEL_STATIC))
    _link(t, modules, program, module_name, hlo_op, flops, nbytes, row)
    return t


def _link(t: _KernelTpl, modules: dict, program: Any, module_name: Any, hlo_op: Any, flops: int | None,
          nbytes: int | None, k: dict) -> None:
    """The op a template's kernels run (`_DeviceOps`): found by the kernel's `program_id` and
    `hlo_op`, or inside a command buffer by its own name; the op row's columns."""
    module = modules.get(_int(program)) if program is not None else None
    module = module or modules.get(module_name) if module_name else module
    op = None
    t.key = (program, module_name, hlo_op)
    if module is not None and hlo_op in module.ops:
        op, t.link = module.ops[hlo_op], _EXEC_OP
    elif module is not None and (name := module.by_kernel.get(k["name"])) is not None:
        op, t.link = module.ops[name], _BUFFER_OP  # one kernel of a command buffer: an execution by itself
    else:
        t.link = _OWN_OP
    if op is None and flops is None:
        t.link = _NO_OP
        return
    row: dict[str, Any] = {"device": k["device"], "device_raw": k["device_raw"],
                           "node_name": op.name if op else hlo_op or k["name"], "op_type": op.op_type if op else hlo_op}
    if op is not None:
        row.update(input_shapes=op.input_shapes, input_dtypes=op.input_dtypes,
                   output_shapes=op.output_shapes, output_dtypes=op.output_dtypes)
    f, b, rule = (flops, nbytes, flop_rules.REPORTED) if flops is not None else (op.flops, op.bytes, op.rule)
    if f is not None:
        row.update(flops=f, memory_bytes=b, flops_rule=rule, flops_counted=True,
                   flops_dtype=flop_rules.precision([op.dtype] if op and op.dtype else None))
    t.op_row = _Tpl(tuple(row.get(c) for c in _NODE_STATIC))
    params = {"hlo_module": module.name if module else None, "stream": k["stream"],
              **({"fusion_kind": op.fusion_kind} if op and op.fusion_kind else {})}
    t.op_params = json.dumps({**params, "kernels": 0}, default=str)[:-2]  # + the kernel count + "}"


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
    HLO module's (`hlo.Module`). The op of a kernel template is resolved once (`_link`)."""

    def __init__(self, nodes: _Rows, seq: list[int]):
        self.nodes, self.seq = nodes, seq
        self.open: list | None = None  # [template, step, seq, kernels]
        self.key: Any = None

    def kernel(self, t: _KernelTpl, scope: Any, step: int | None) -> tuple[int | None, Iterable]:
        """(the kernel's node_seq, batches of op rows it closed)."""
        link = t.link
        if link == _NO_OP:
            return None, self.close()
        if link == _EXEC_OP:
            key = (*t.key, scope)
            if key == self.key and self.open is not None:
                self.open[3] += 1
                return self.open[2], ()
        else:
            key = None
        out = self.close()
        self.key = key
        seq = self.seq[0]
        self.seq[0] += 1
        self.open = [t, step, seq, 1]
        return seq, out

    def close(self) -> Iterable[tuple[str, pa.RecordBatch]]:
        if self.open is None:
            return ()
        (t, step, seq, kernels), self.open, self.key = self.open, None, None
        nodes = self.nodes
        n = t.op_row.n if t.op_row.gen is nodes.gen else nodes.index(t.op_row)
        return nodes.append((n, step, None, None, None, seq, None, f"{t.op_params}{kernels}}}"))


def _templated(p: _Plane, events: Any, tpls: dict, make: Callable[[int, list[_Stat]], Any]) -> Iterator[tuple[Any, list[_Stat], Any]]:
    """Each timed event of a run (aggregated ones have no start time) with its stats'
    cached decodes and its template, keyed by metadata and `_SPECIAL` encodings and made by
    `make(metadata_id, stats)` the first time: what both event loops start from."""
    entry, get = p.entry, p.cache.get
    for ev in events:
        sts = ev.stats
        ents = list(map(get, sts))
        if None in ents:
            ents = [e or entry(b) for e, b in zip(ents, sts)]
        if ev.WhichOneof("data") == "num_occurrences":
            continue
        mid = ev.metadata_id
        key = (mid, *map(_KEY, ents))
        t = tpls.get(key)
        if t is None:
            if len(tpls) >= _CACHE_MAX:
                tpls.clear()
            t = tpls[key] = make(mid, ents)
        yield ev, ents, t


def _gpu_events(p: _Plane, line: xplane_pb2.XLine, events: Any, kind: "_LineKind", kernels: _Rows,
                steps: _Steps, ops: _DeviceOps, modules: dict) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Kernel rows of a run of a GPU stream's events: per event, its stats' cached decodes,
    its template (by metadata and `_SPECIAL` encodings), the few columns that vary."""
    base, device, raw, stream = line.timestamp_ns, kind.device, p.plane.name, kind.stream
    launched = steps.of_launch if steps.launches else None
    make = lambda mid, ents: _kernel_template(p, mid, ents, device, raw, stream, modules)  # noqa: E731
    for ev, ents, t in _templated(p, events, kind.templates, make):
        if t.skip:
            continue
        start, dur = base + ev.offset_ps // 1000, ev.duration_ps // 1000
        c = t.corr
        corr = ents[c.i][_S_INT] if c.__class__ is _Slot else _int(c)
        step = launched(corr, start, dur) if launched is not None else None
        if t.link != _NO_OP or ops.open is not None:
            sc = corr if t.scope_is_corr else _pick(t.scope, ents, _S_VALUE)
            node_seq, out = ops.kernel(t, sc, step)
            yield from out
        else:
            node_seq = None
        slots = t.slots
        params = t.fmt.format(*[ents[i][_S_PIECE] for i in slots]) if slots else t.fmt
        tr = t.row
        n = tr.n if tr.gen is kernels.gen else kernels.index(tr)
        yield from kernels.append((n, start, dur, corr, step, node_seq, params))


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


class _HostTpl:
    """What every host event of one metadata and one set of `_SPECIAL` stat encodings on one
    thread has in common: the node row's columns, or that it is an allocation."""

    __slots__ = ("alloc", "row", "corr", "fmt", "slots")


def _host_template(p: _Plane, mid: int, ents: list[_Stat], thread_name: str) -> _HostTpl:
    t = _HostTpl()
    full, display = p.names(mid)
    stats = p.symbolic(mid, ents)
    t.alloc = _MEMORY_EVENTS.get(full) if "allocator_name" in stats else None
    if t.alloc is not None:
        return t
    node_name, op_type = full, display
    if (op := _tf_op(stats.get("tf_op"))) is not None:
        node_name, op_type = op
        stats.pop("tf_op")
    extra = {"thread_name": thread_name, **stats}
    if display != full:
        extra["display_name"] = display
    t.corr = stats.get("correlation_id")
    t.fmt, t.slots = _recipe(extra)
    t.row = _Tpl(("CPU:0", p.plane.name, node_name, op_type) + (None,) * (len(_NODE_STATIC) - 4))
    return t


def _host_events(p: _Plane, line: xplane_pb2.XLine, events: Any, kind: "_LineKind", nodes: _Rows,
                 allocs: BatchBuilder, seq: list[int], steps: _Steps) -> Iterator[tuple[str, pa.RecordBatch]]:
    thread_name = line.display_name or line.name  # one host per XSpace: device CPU:0
    make = lambda mid, ents: _host_template(p, mid, ents, thread_name)  # noqa: E731
    for ev, ents, t in _templated(p, events, kind.templates, make):
        start, dur = _times(line, ev)
        if t.alloc is not None:
            stats = {k: _pick(v, ents, _S_VALUE) for k, v in p.symbolic(ev.metadata_id, ents).items()}
            yield from allocs.append({**_allocation_row(stats, t.alloc, start), "step": steps.at(start)})
            continue
        c = t.corr
        corr = ents[c.i][_S_INT] if c.__class__ is _Slot else _int(c)
        params = t.fmt.format(*[ents[i][_S_PIECE] for i in t.slots]) if t.slots else t.fmt
        tr = t.row
        n = tr.n if tr.gen is nodes.gen else nodes.index(tr)
        yield from nodes.append((n, steps.at(start), start, dur, line.id, seq[0], corr, params))
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


class _LineKind:
    """A line whose events become rows: its plane, its GPU device and stream (None: a host
    thread), and the templates of its events."""

    __slots__ = ("plane", "device", "stream", "templates")

    def __init__(self, plane: _Plane, device: str | None, stream: int | None):
        self.plane, self.device, self.stream, self.templates = plane, device, stream, {}


def _line_kinds(tree: pbwire.Node, planes: dict[int, _Plane]) -> dict[int, _LineKind]:
    """id(line node) -> its `_LineKind`, for the lines whose events become rows; other
    lines' events are skipped unparsed."""
    out: dict[int, _LineKind] = {}
    for node in tree.children:
        name = node.header.name
        if m := _GPU_PLANE.match(name):
            p, device = planes[id(node)], devices.canonical("GPU", m.group(1))
            for ln in node.children:
                if (stream := _gpu_stream(ln.header)) is not None:
                    out[id(ln)] = _LineKind(p, device, stream)
        elif name == "/host:CPU":
            for ln in node.children:
                out[id(ln)] = _LineKind(planes[id(node)], None, None)
        # other planes (metadata, call stacks, task environment, TPUs) carry no GPU/host ops
    return out


def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    with open_trace(path) as f:
        tree = pbwire.index(f, _SPACE, _WHAT)
    if not tree.children:
        raise TraceFormatError("XSpace has no planes")
    _metadata(tree, ctx)
    planes = {id(node): _Plane(node.header) for node in tree.children}
    kinds = _line_kinds(tree, planes)
    steps = _marked_steps(path, tree, planes)
    kernels = _Rows("kernels", _KERNEL_STATIC, _KERNEL_VARYING)
    nodes = _Rows("nodes", _NODE_STATIC, _NODE_VARYING)
    allocs = BatchBuilder("allocations")
    seq = [0]  # host events and device ops numbered in file order
    modules = _hlo_modules(tree, ctx)
    ops, last = _DeviceOps(nodes, seq), None
    with open_trace(path) as f:
        for ln, events in pbwire.stream(f, _SPACE, tree, _WHAT, want=lambda n: id(n) in kinds):
            if ln is not last:  # an op ends with its line
                yield from ops.close()
                last = ln
            kind = kinds[id(ln)]
            with _checked(events):
                if kind.device is not None:
                    yield from _gpu_events(kind.plane, ln.header, events, kind, kernels, steps, ops, modules)
                else:
                    yield from _host_events(kind.plane, ln.header, events, kind, nodes, allocs, seq, steps)
    yield from ops.close()
    rows = BatchBuilder("steps")
    for row in steps.rows():
        yield from rows.append(row)
    yield from kernels.flush()
    yield from nodes.flush()
    yield from flush(allocs, rows)
