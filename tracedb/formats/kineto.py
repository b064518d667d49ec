"""PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzipped.

Every event category lands somewhere:
- `nodes`: `cpu_op` events (device CPU:0); `correlation_id` = the op's `External id`,
  input shapes/dtypes from `Input Dims` / `Input type` when shapes were recorded,
  `rf_id` = `Record function id` (the key an execution trace joins on), `process_id` = pid.
- `kernels`: device activity: `kernel`, `gpu_memcpy`, `gpu_memset` on `GPU:<args.device>`
  (NVIDIA and AMD/HIP alike), MTIA's `mtia_ccp_events` on `MTIA:<device>` (`dma_*` ones
  are copies with `args.size` bytes). A copy without a `bytes` arg (ROCm) takes the byte
  count of its launch call (`hipMemcpy*` `size`).
- `runtime_calls`: `cuda_runtime`, `cuda_driver`, `mtia_runtime` and any other
  `*_runtime` / `*_driver` category, with the op enclosing the call and the activity it
  launched (`kernel_name`, `kernel_count`, `kernel_start_ns`).
- `annotations`: `user_annotation` (host ranges, CPU:0) and `gpu_user_annotation`
  (device ranges, on their GPU and stream).
- `steps`: one row per `ProfilerStep#N` host span, with the span of the device work
  launched in the step (`device_start_ns`/`device_end_ns`).
- `allocations`: `[memory]` instant events (bytes negative for a free).
- `events`: everything else with a time (`cuda_sync` on its GPU and stream,
  `cpu_instant_event`, `python_function`, `cuda_profiler_range`, `fwdbwd` flows, `Trace`
  spans, instants), args kept as JSON. The `ac2g` / `async_gpu` / `async_cpu_to_gpu`
  flow events repeat the correlation id that `kernels.correlation_id` already holds, so
  they are not stored; `M` events only name processes and threads.
A category not in `_KNOWN` still lands in `events` and is counted in the file's
`warnings` (`files.metadata`). Old Kineto schema files (capitalised categories `Kernel`,
`Runtime`, `Memcpy`, `Memset`, lower-case `external id`) are read the same way.

Kernel -> op link (`kernels.node_name`, `node_seq`, `link`): the launch call first: the
kernel's `correlation` -> the runtime call with that correlation -> the innermost
`cpu_op` enclosing the call on the call's thread (`link = 'launch'`). `External id`
is used only where there is no launch call, or the call has no enclosing op and the op
with that External id spans the call (`link = 'external_id'`). Older PyTorch wrote the
launch's correlation into `External id`, which then names an unrelated op (in HTA's
alexnet test trace, 94 of 98 kernels); the newer traces' External ids agree with the
launch route on every kernel of the fixtures.

Steps: `ProfilerStep#N` spans are on the main thread, but the backward pass runs on the
autograd thread, so a node's step is the ProfilerStep span containing its start on *any*
thread; a kernel takes its launching op's step (else its launch call's).

Time: Kineto writes `ts` relative to `baseTimeNanoseconds` (PyTorch's own test recovers
`ts = (absolute_ns - baseTimeNanoseconds) / 1000`), so absolute ns = base + ts µs. Older
traces without the key write absolute epoch µs; then base is 0.

Two passes: pass 1 keeps the link state (step spans; every op's, runtime call's and
activity's ids and interval as int64 columns); pass 2 emits rows. Two passes because
Kineto writes the CPU ops before the ProfilerStep spans and the GPU events after, and
top-level keys (base time, rank) may follow `traceEvents`. The links (each call's
enclosing op and first activity, each activity's launch call and op, each cuda_sync's
call) are resolved between the passes and read by pass 2 in file order, one tuple a
row. Where the link state lives (`_Spill`) is the one difference between small and
large files: up to SPILL_BYTES (16 MiB, ~270 k events) it stays in memory, sorted by
Arrow and looked up by bisect (`_Index._resolve_in_memory`); past that it goes to
Parquet files in a temporary folder, SPILL_ROWS at a time, and DuckDB joins them one
join a statement within LINK_MEMORY (`_Index._resolve`: the enclosing-op sweep reads its
sorted rows as a stream; each joined table dropped once no later join reads it), and
pass 2 reads the links back a row group (SPILL_ROWS) at a time (`_Spill.batches`), so
memory is bounded by a batch and those caps, not by the file. A failed write there
(full disk, file-size limit) or a join past LINK_MEMORY is a `WarehouseError`: the
source file is not at fault.

One code path for every file size. `jsonstream.StructStream` decodes the events into
Structs of the fields read here (`_Ev`: the rest skipped, `ts`/`dur` kept as their
source text, other floats `_F`, plain floats of the same value), ~32 KB of JSON at a
time (`CHUNK_CHARS`), in one msgspec call a piece: each piece's events are walked while
they are in the CPU cache. Pass 1 (`_Index.build`) reads the cpu_ops (most events) from
their Structs in an inline loop and converts their times to ns exactly and in bulk by
Arrow's decimal parser (`_ns`: where Arrow refuses a value, it is decoded as a Decimal
and rounded half-even; a bad one names its event); the piece's other `X` events become
dicts for `_other`. Pass 2 (`_rows`) builds each cpu_op's node columns from its Struct
(`_NodeCols`: params encoded by msgspec; start, duration and name from pass 1's arrays,
the same ops in the same order), a batch every BATCH_ROWS ops; the other events become
dicts, their times converted in bulk (`_event_times`, `jsonstream.Ns`), and go through
the row functions (`_kernel`, `_call`, ...). Where the events of pass 2 come from is the
only difference between sizes (`_Source`): a file of up to KEEP_CHARS (8 MiB) of JSON
keeps pass 1's pieces, so each event is decoded once; a larger one is decoded again, so
memory holds a piece, not the file, and its pass 1 (once past KEEP_CHARS) decodes the
events as `_Ev1`, whose args hold only the keys pass 1 reads (`_Args1`: a cpu_op's
shapes, dtypes and other args are skipped); pass 1's code reads either type
(`_Args1.get`, `_as_dict`). Pass 2 converts node shapes and dtypes to Arrow after the
pieces that make SEAL_OPS ops (`_NodeCols.seal`): held as lists until the batch, they
were most of what the cyclic GC walked at every full collection of a library call (whose
GC stays on: `gc_paused` pauses it only in tracedb's own processes). What msgspec
refuses (NaN, lone surrogates, control characters; for `_Ev1`, also args that are a
string or a number) is decoded by the standard library, event by event, and made a
Struct as msgspec would have (`_from_dict`); errors (truncated or invalid JSON, an event
that is no object, a missing time) are worded as before. A fractional `size` is no byte
count; pass 1 names a fractional `device` by its text (`_text_device`). Rows are named
tuples (`NodeRow`, `KernelRow`, ...: one type a table, its fields the table's columns),
built into batches column-wise; numbers that reach a row as Decimal become floats
(`plain`).

What it costs, and the designs tried and dropped: bench/RESULTS.md, "Session 10: Kineto
one path" and "The Kineto reader's two paths, measured".
"""

from __future__ import annotations

import bisect
import json
import re
import tempfile
from array import array
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from msgspec import UNSET

from tracedb.errors import TraceFormatError, WarehouseError
from tracedb.formats.base import BatchBuilder, ReadContext, annotate_nodes, text_head
from tracedb.formats.jsonstream import (WHOLE_DECODE_BYTES, JNum, Ns, StructStream, dumps_compact,
                                        event_error, gc_paused, located, need, num, plain, us_to_ns)

NAME = "kineto"
DESCRIPTION = "PyTorch profiler (Kineto) Chrome-trace JSON, optionally gzipped"

_KINETO_KEY = re.compile(r'"(?:deviceProperties|distributedInfo|baseTimeNanoseconds)"\s*:')
_KINETO_CAT = re.compile(
    r'"cat"\s*:\s*"(?:cpu_op|kernel|cuda_runtime|cuda_driver|gpu_memcpy|gpu_memset|user_annotation'
    r'|mtia_runtime|mtia_ccp_events|Kernel|Runtime|Memcpy|Memset|Operator)"'
)
_STEP = re.compile(r"ProfilerStep#(\d+)$")
_COPY_KIND = re.compile(r"Memcpy (\w+)")

# Rows wait as tuples until a batch is built: 16k rows keep that to a few MB a table,
# where 64k dict rows measured ~90 MB more peak RSS (bench/bench_kineto_memory.py).
BATCH_ROWS = 16384
# The events are decoded this much JSON text at a time (`jsonstream.StructStream`): each
# piece's events are read while they are in the CPU cache.
CHUNK_CHARS = 32 << 10
# Node shapes and dtypes converted to Arrow this many ops at a time (`_NodeCols.seal`).
SEAL_OPS = 256
# Events whose times wait to be converted together (`_Pending`).
PENDING_EVENTS = 4096
# A file of up to this much JSON is decoded once: pass 1 keeps its pieces for pass 2
# (one rank of the H200 fixture is 4.1 MB); a larger one is decoded again for pass 2.
KEEP_CHARS = WHOLE_DECODE_BYTES

class NodeRow(NamedTuple):
    """A `nodes` row: one cpu_op."""

    device: str
    device_raw: str
    rank: int | None
    step: int | None
    node_name: str
    op_type: str
    start_ns: int
    duration_ns: int
    thread_id: int | None
    seq: int
    input_shapes: list | None
    input_dtypes: list | None
    correlation_id: int | None  # the op's External id
    params: str | None
    rf_id: int | None
    process_id: int | None


class KernelRow(NamedTuple):
    """A `kernels` row: one device activity (kernel, copy, set)."""

    device: str
    device_raw: str
    rank: int | None
    step: int | None
    stream: int | None
    kind: str
    name: str
    node_name: str | None  # the launching op (module docstring: kernel -> op link)
    start_ns: int
    duration_ns: int
    bytes: int | None
    copy_kind: str | None
    correlation_id: int | None
    launch_start_ns: int | None
    grid: list | None
    block: list | None
    registers_per_thread: int | None
    shared_memory_bytes: int | None
    occupancy: float | None
    params: str | None
    node_seq: int | None
    link: str | None
    external_id: int | None


class CallRow(NamedTuple):
    """A `runtime_calls` row: one runtime or driver call, with its op and activity."""

    device: str
    device_raw: str
    rank: int | None
    step: int | None
    category: str
    name: str
    start_ns: int
    duration_ns: int
    thread_id: int | None
    correlation_id: int | None
    external_id: int | None
    node_name: str | None
    node_seq: int | None
    kernel_name: str | None
    kernel_count: int
    kernel_start_ns: int | None
    kernel_device: str | None
    seq: int
    params: str | None


class AnnotationRow(NamedTuple):
    """An `annotations` row: a host (`user_annotation`) or device range."""

    device: str
    device_raw: str
    rank: int | None
    step: int | None
    category: str
    name: str
    start_ns: int
    duration_ns: int
    thread_id: int | None
    stream: int | None
    external_id: int | None
    seq: int
    params: str | None


class StepRow(NamedTuple):
    """A `steps` row: one ProfilerStep#N span and the device work launched in it."""

    device: str
    device_raw: str
    rank: int | None
    step: int
    name: str
    start_ns: int
    duration_ns: int
    thread_id: int | None
    device_start_ns: int | None
    device_end_ns: int | None
    kernel_count: int


class EventRow(NamedTuple):
    """An `events` row: any other event with a time, its args as JSON."""

    device: str
    device_raw: str
    rank: int | None
    step: int | None
    category: str | None
    name: str | None
    phase: str | None
    start_ns: int
    duration_ns: int | None
    thread_id: int | None
    stream: int | None
    correlation_id: int | None
    external_id: int | None
    seq: int
    params: str | None


class AllocRow(NamedTuple):
    """An `allocations` row: one `[memory]` instant event."""

    device: str
    device_raw: str
    rank: int | None
    step: int | None
    ts_ns: int
    bytes: int
    kind: str
    address: int | None
    total_allocated_bytes: int | None
    total_reserved_bytes: int | None
    params: str | None


# Each table's row type (the builders take its fields as their columns).
_ROWS = {"nodes": NodeRow, "kernels": KernelRow, "allocations": AllocRow, "runtime_calls": CallRow,
         "annotations": AnnotationRow, "steps": StepRow, "events": EventRow}
# A row built from its values in field order: `tuple.__new__` skips the named tuple's
# Python-level `__new__` (~1 us a row of the 23-field KernelRow; a plain tuple's cost).
_new = tuple.__new__

_GPU_KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
# c10::DeviceType codes as `[memory]` events write them -> (canonical type, torch name).
_DEVICE_TYPE = {0: ("CPU", "cpu"), 1: ("GPU", "cuda"), 6: ("GPU", "hip"), 9: ("XLA", "xla"),
                12: ("XPU", "xpu"), 13: ("MPS", "mps"), 15: ("HPU", "hpu"), 19: ("MTIA", "mtia")}

# Args that have a column (the rest go to `params`).
_KERNEL_ARGS = ("device", "stream", "correlation", "External id", "external id", "grid", "block",
                "registers per thread", "shared memory", "est. achieved occupancy %", "bytes")
_CALL_ARGS = ("correlation", "External id", "external id")
_ANNOTATION_ARGS = ("External id", "external id")  # keep nested (TensorList) dims verbatim
_MEMORY_ARGS = ("Addr", "Bytes", "Total Allocated", "Total Reserved", "Device Type", "Device Id")


def sniff(head: bytes) -> bool:
    text = text_head(head).lstrip()
    if not text.startswith("{"):
        return False
    return bool(_KINETO_KEY.search(text)) or ('"traceEvents"' in text and bool(_KINETO_CAT.search(text)))


def _need(ev: dict, key: str, i: int) -> Any:
    return need(ev, key, i, ev.get("cat") or ev.get("ph"))  # Kineto events say their cat


def _jsonable(v: Any) -> Any:
    """Plain JSON types (JNum -> float) for run metadata that outlives the read."""
    return json.loads(json.dumps(v))


def _int(v: Any) -> int | None:
    if type(v) is int:
        return v
    n = num(v)
    return int(n) if n is not None else None


def _params(args: dict, known: tuple[str, ...], extra: dict | None = None, dumps: Any = dumps_compact) -> str | None:
    rest = args.copy()  # then drop the known keys: cheaper than filtering every key
    pop = rest.pop
    for k in known:
        pop(k, None)
    if extra:
        rest.update(extra)
    return dumps(rest) if rest else None


class _F(float):
    """A float of the reader's decoding (`_Ev` args): `_MSGSPEC_ENCODE` spells it as json does."""

    __slots__ = ()


def _json_float(o: Any) -> msgspec.Raw:
    if type(o) is _F:
        if o - o == 0.0:  # finite: json writes its repr
            return msgspec.Raw(float.__repr__(o).encode())
        return msgspec.Raw(dumps_compact(float(o)).encode())  # NaN, Infinity
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


# `dumps_compact` of the reader's values (str, int, `_F`, lists, dicts; never a Decimal,
# which msgspec would write as a string) is this encoder's output where the two cannot
# differ (ASCII without DEL: json escapes the others): 4.3 ms against 12.2 for the
# fixture's 7,245 op params. Used inline in `_NodeCols.add`.
_MSGSPEC_ENCODE = msgspec.json.Encoder(enc_hook=_json_float).encode


_NONE = -(1 << 63)  # "no External id" in an int column
_NO_ARGS: dict = {}


# Old Kineto schema (PyTorch 1.x) capitalised its categories.
_OLD_CATS = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset",
             "Runtime": "cuda_runtime", "Driver": "cuda_driver", "Operator": "cpu_op",
             "User annotation": "user_annotation", "Python": "python_function",
             "Trace": "Trace"}
_ACTIVITY_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events")
_ANNOTATION_CATS = ("user_annotation", "gpu_user_annotation")
_KINETO_CATS = frozenset(("cpu_op", "cuda_sync", "python_function") + _ACTIVITY_CATS + _ANNOTATION_CATS)
_FLOW_CATS = ("ac2g", "async_gpu", "async_cpu_to_gpu")  # repeat kernels.correlation_id: not stored
# Stored in `events` without a warning. Anything else is stored there too, and counted.
_KNOWN = {None, "", "cuda_sync", "cpu_instant_event", "python_function", "cuda_profiler_range",
          "fwdbwd", "Trace", "overhead", "cpu_op", "gpu_user_annotation"}
_COPY_DIRECTION = {"HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH", "DEVICE_TO_DEVICE": "DtoD",
                   "HOST_TO_HOST": "HtoH", "PEER_TO_PEER": "PtoP"}


def _is_runtime(cat: Any) -> bool:
    return type(cat) is str and (cat.endswith("_runtime") or cat.endswith("_driver"))


def _ext(args: dict) -> Any:
    ext = args.get("External id")
    return args.get("external id") if ext is None else ext


def _size(v: Any) -> int:
    """A launch call's byte count (`size`: an int, or a string of digits in ROCm traces),
    else _NONE (a fraction is no byte count)."""
    if type(v) is int:
        return v
    if type(v) is str and v.isdigit():
        return int(v)
    return _NONE


def _text_device(args: dict) -> dict:
    """Pass 1's view of a fractional `device` arg: its text (`GPU:0.5` for the launch's
    activity device, as the streaming reader of old read it); NaN stays a float, so
    `_int` names it as the error it is."""
    dev = args.get("device")
    return {**args, "device": float.__repr__(dev)} if type(dev) is _F and dev - dev == 0.0 else args


def _activity_device(cat: str, ev: dict, args: dict) -> tuple[str, str]:
    dev = _int(args.get("device"))
    if dev is None and args.get("device") is not None:
        dev = plain(args["device"])  # no device number: `GPU:zero`, which tracedb.validate flags
    if dev is None:
        pid = ev.get("pid")
        dev = pid if type(pid) is int else 0  # Kineto's device pid is the device index
    if cat == "mtia_ccp_events":
        return f"MTIA:{dev}", f"MTIA {dev}"
    return f"GPU:{dev}", f"GPU {dev}"


def _arrow(a: array) -> pa.Array:
    """Zero-copy int64 view of an array('q') (pa.array() would pull in numpy)."""
    return pa.Array.from_buffers(pa.int64(), len(a), [None, pa.py_buffer(a)])


def _int64s(a: pa.Array) -> array:
    """An int64 Arrow array without nulls as array('q')."""
    out = array("q")
    out.frombytes(memoryview(a.buffers()[1])[8 * a.offset: 8 * (a.offset + len(a))])
    return out


def _take(a: array, positions: array) -> array:
    return _int64s(pc.take(_arrow(a), _arrow(positions)))


_NS_TYPE = pa.decimal128(19, 3)  # Chrome-trace µs with up to 3 decimals: exactly ns
_DECIMAL_DECODE = msgspec.json.Decoder(float_hook=Decimal).decode  # exact: numbers with a fraction as Decimal
_INT64 = (-(1 << 63), 1 << 63)


def _time_value(raw: msgspec.Raw) -> Any:
    """A time's source text decoded exactly (a fraction as Decimal); what msgspec refuses
    (NaN, Infinity) by the standard library, as the float it reads."""
    try:
        return _DECIMAL_DECODE(raw)
    except msgspec.DecodeError:
        return json.loads(bytes(raw), parse_float=Decimal)


def _ns(raws: list[msgspec.Raw], events: list[_Ev] | None = None, seqs: list[int] | None = None,
        key: str = "ts") -> array:
    """`us_to_ns` of JSON numbers given as their source text, in bulk: Arrow parses the
    text as decimal µs (an error, never a rounding, where a value has more than 3
    decimals or does not fit), times 1000 is exactly ns. Where Arrow refuses, each value
    is decoded exactly (`_time_value`) and converted by `us_to_ns` (rounding half-even
    past 3 decimals); given the events (and their seqs) the values are their `key`s, and
    a bad one (NaN, no number, past int64) raises the error that names its event."""
    exact = _exact_ns(raws)
    if exact is not None:
        return exact
    if events is None:
        return array("q", [us_to_ns(_time_value(r)) for r in raws])
    return array("q", [_one_ns(r, ev, i, key) for r, ev, i in zip(raws, events, seqs)])


def _one_ns(raw: msgspec.Raw, ev: _Ev, i: int, key: str) -> int:
    value = _time_value(raw)
    try:
        if value is None:
            raise KeyError(key)
        ns = us_to_ns(value)
        if not _INT64[0] <= ns < _INT64[1]:
            raise OverflowError(f"{ns} ns does not fit in int64")
        return ns
    except (KeyError, ValueError, OverflowError, TypeError, TraceFormatError) as e:
        d = _as_dict(ev)
        d[key] = value
        if value is None:
            _need(d, key, i)
        raise event_error(e, d, i) from e


def _exact_ns(raws: list[msgspec.Raw]) -> array | None:
    """`_ns` where Arrow converts every value exactly, else None."""
    try:
        parts = b"\n".join(raws).decode("ascii").split("\n")
        if len(parts) == len(raws):
            dec = pa.array(parts, pa.string()).cast(_NS_TYPE)
            # (a scalar built here, not at import: pyarrow's first Python conversion imports pandas)
            return _int64s(pc.multiply(dec, pa.scalar(1000, pa.int32())).cast(pa.int64()))
    except (pa.ArrowInvalid, UnicodeDecodeError):
        pass
    return None


class _Ev(msgspec.Struct, gc=False):
    """A Kineto event as the reader decodes it (`jsonstream.StructStream`): only the keys
    the reader reads (the rest are skipped), UNSET where missing; `ts` and `dur` keep
    their source text (`_ns` converts them exactly); other numbers are ints and `_F`
    floats (the value of their text). Not tracked by the GC (decoded JSON makes no
    reference cycles)."""

    ph: Any = UNSET
    cat: Any = UNSET
    name: Any = UNSET
    pid: Any = UNSET
    tid: Any = UNSET
    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: msgspec.Raw = msgspec.Raw(b"")
    args: Any = UNSET
    id: Any = UNSET
    s: Any = UNSET
    bp: Any = UNSET


class _Args1(msgspec.Struct, gc=False):
    """The args of an event as pass 1 of a file past KEEP_CHARS decodes them (`_Ev1`): only
    the keys pass 1 reads, UNSET where missing; read by `get` as a dict's are."""

    ext: Any = msgspec.field(default=UNSET, name="External id")
    ext_lower: Any = msgspec.field(default=UNSET, name="external id")
    correlation: Any = UNSET
    device: Any = UNSET
    size: Any = UNSET

    def get(self, key: str, default: Any = None) -> Any:
        v = getattr(self, _ARG_ATTRS[key])
        return default if v is UNSET else v

    def as_dict(self) -> dict:
        return {key: v for key, v in zip(_ARG_KEYS, _ASTUPLE(self)) if v is not UNSET}


_ARG_KEYS = tuple(f.encode_name for f in msgspec.structs.fields(_Args1))
_ARG_ATTRS = dict(zip(_ARG_KEYS, _Args1.__struct_fields__))


class _Ev1(_Ev, gc=False):
    """`_Ev` as pass 1 decodes the events of a file past KEEP_CHARS (pass 2 decodes them
    again as `_Ev`): the same fields in the same order, but args as `_Args1` (a cpu_op's
    shapes, dtypes and other args, most of the text, skipped), a non-object args as it is."""

    args: _Args1 | list | None = UNSET  # (a piece where some event's args is a string or number: `_from_dict1`)


_EV_FIELDS = _Ev.__struct_fields__
_ASTUPLE = msgspec.structs.astuple
_ARGS = (dict, _Args1)  # an object's args, as either event type holds them


def _as_dict(ev: _Ev | _Ev1) -> dict:
    """The event's keys that were there, as a dict (`ts`/`dur` still their source text)."""
    d = {k: v for k, v in zip(_EV_FIELDS, _ASTUPLE(ev)) if v is not UNSET}
    if type(d.get("args")) is _Args1:
        d["args"] = d["args"].as_dict()
    return d


def _from_dict(d: dict, kind: type = _Ev) -> _Ev | _Ev1:
    """An event the standard library decoded (`StructStream`: text msgspec refuses) as
    msgspec would have decoded it as `kind`: times as their text, other fractional numbers
    `_F` (as `_Ev1`: object args as `_Args1`)."""
    kw = {k: _plain_f(d[k]) for k in _EV_FIELDS if k in d}
    for k in ("ts", "dur"):
        if k in d:
            v = d[k]
            kw[k] = msgspec.Raw((v.text if type(v) is JNum else json.dumps(v)).encode())
    if kind is _Ev1 and type(kw.get("args")) is dict:
        args = kw["args"]
        kw["args"] = _Args1(**{attr: args[key] for key, attr in _ARG_ATTRS.items() if key in args})
    return kind(**kw)


def _from_dict1(d: dict) -> _Ev1:
    return _from_dict(d, _Ev1)


def _plain_f(v: Any) -> Any:
    if isinstance(v, float):
        return _F(v)
    if type(v) is list:
        return [_plain_f(x) for x in v]
    if type(v) is dict:
        return {k: _plain_f(x) for k, x in v.items()}
    return v


def _event_times(events: list[dict]) -> None:
    """Each event's `ts` / `dur` (source text, from `_Ev`) as `jsonstream.Ns`, converted in
    bulk by Arrow (`_exact_ns`), which the row functions' `us_to_ns` gives back; where
    Arrow refuses one, each is decoded exactly (`_time_value`), and the row function's
    `us_to_ns` rounds it or names the bad value. A missing one is dropped."""
    slots, raws = [], []
    for d in events:
        for k in ("ts", "dur"):
            raw = d.pop(k)
            if raw:
                slots.append((d, k))
                raws.append(raw)
    if raws:
        exact = _exact_ns(raws)
        values = map(Ns, exact) if exact is not None else map(_time_value, raws)
        for (d, k), v in zip(slots, values):
            d[k] = v


class _Spill:
    """Pass 1's link state: each table's int64 columns (`array('q')`, ns relative to base)
    held in memory while they are small (SPILL_BYTES in all), and resolved there
    (`_Index._resolve_in_memory`). Past that, in a temporary folder removed when the read
    ends: each table's rows appended to its Parquet file SPILL_ROWS at a time, so memory
    holds a batch of them, not the file; `_Index._resolve` joins them (DuckDB, within
    LINK_MEMORY) into each row's links, which pass 2 reads back in file order (`rows`)."""

    def __init__(self):
        self._dir: tempfile.TemporaryDirectory | None = None
        self._writers: dict[str, pq.ParquetWriter] = {}
        self.cols = {t: [array("q") for _ in names] for t, names in _SPILLED.items()}

    @property
    def on_disk(self) -> bool:
        return self._dir is not None

    @property
    def dir(self) -> Path:
        return Path(self._dir.name)

    def path(self, table: str) -> str:
        return str(self.dir / f"{table}.parquet")

    def flush(self, table: str, full: bool = False) -> None:
        """On disk, write out `table`'s rows held (all of them, or once SPILL_ROWS are held);
        in memory, go to disk once the tables hold more than SPILL_BYTES."""
        if not self.on_disk:
            if full or 8 * sum(len(c) for cols in self.cols.values() for c in cols) <= SPILL_BYTES:
                return
            self._dir = tempfile.TemporaryDirectory(prefix="tracedb-kineto-")
            for t in _PASS1_TABLES:
                self._write(t)
            return
        if self.cols[table][0] and (full or len(self.cols[table][0]) >= SPILL_ROWS):
            self._write(table)

    def _write(self, table: str) -> None:
        cols = self.cols[table]
        if not cols[0]:
            return
        batch = pa.record_batch([_arrow(c) for c in cols], names=list(_SPILLED[table]))
        w = self._writers.get(table)
        try:
            if w is None:  # (plain ints: no dictionary or statistics to build)
                w = self._writers[table] = pq.ParquetWriter(self.path(table), batch.schema, compression="none",
                                                            use_dictionary=False, write_statistics=False)
            for lo in range(0, batch.num_rows, SPILL_ROWS):
                w.write_batch(batch.slice(lo, SPILL_ROWS))
        except OSError as e:
            raise _scratch_error(e, self.path(table)) from e
        del batch  # (it views the arrays: they are emptied in place, as pass 1 holds them)
        for c in cols:
            del c[:]

    def close(self, tables: tuple[str, ...]) -> None:
        """On disk, these tables' rest written and their files closed (a table without
        rows as an empty file)."""
        if not self.on_disk:
            return
        for table in tables:
            self._write(table)
            w = self._writers.pop(table, None)
            try:
                if w is None:
                    names = _SPILLED[table]
                    pq.write_table(pa.table({n: pa.array([], pa.int64()) for n in names}), self.path(table))
                else:
                    w.close()
            except OSError as e:
                raise _scratch_error(e, self.path(table)) from e

    def rows(self, table: str) -> Iterator[tuple]:
        """`table`'s rows (on disk) in order, as tuples (None for a null), READ_ROWS at a time."""
        for batch in self.batches(table, READ_ROWS):
            yield from zip(*(c.to_pylist() for c in batch.columns))

    def batches(self, table: str, rows: int, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
        """`table`'s file (on disk) read `rows` at a time, a row group in memory at once:
        not pre-buffered (pyarrow's default since 14, `pre_buffer=True`, reads every row
        group's column chunks into memory before the first batch: the whole file)."""
        return pq.ParquetFile(self.path(table), pre_buffer=False).iter_batches(batch_size=rows, columns=columns)

    def cleanup(self) -> None:
        for w in self._writers.values():
            try:
                w.close()
            except OSError:
                pass
        if self._dir is not None:
            self._dir.cleanup()


def _scratch_error(e: OSError, path: str) -> WarehouseError:
    """A write of the spilled link state that failed (disk full, file size limit): the
    machine's, not the source trace's."""
    return WarehouseError(f"cannot write {path} (the Kineto reader's temporary link state: TMPDIR): "
                          f"{e.strerror or e} (the source file is not at fault)")


# The link state pass 1 spills (`_Spill`): each table's int64 columns. `seq` is the event's
# position in the file; a flag column says whether the int beside it is there (1) or not.
_SPILLED = {
    "ops": ("th", "t0", "t1", "seq", "name"),  # every cpu_op, file order
    "op_ext": ("ext", "seq"),  # the ops with an int External id
    "calls": ("seq", "t0", "t1", "th", "ext", "size", "corr", "has_corr"),  # ext, size: _NONE if none
    "acts": ("seq", "corr", "has_corr", "name", "t0", "dev", "ext", "ext_kind"),  # ext_kind: _EXT_*
    "syncs": ("seq", "corr", "has_corr"),  # cuda_sync events: their launch call's start
    "call_op": ("call", "op"),  # the enclosing-op sweep's output: call seq -> op seq
}
_PASS1_TABLES = ("ops", "op_ext", "calls", "acts", "syncs")
_EXT_NONE, _EXT_INT, _EXT_OTHER = 0, 1, 2  # an activity's own External id: none, an int, no int

_NONE_SQL = f"CAST({_NONE} AS BIGINT)"
# Link state held in memory at most (beyond, it goes to disk: `_Spill`).
SPILL_BYTES = 16 << 20
# Rows of the link state written to disk at a time (a Parquet row group: pass 2 holds
# one a file it reads back), and read back at a time.
SPILL_ROWS = 1 << 16
# Spilled rows made Python values at a time (pass 2 reads three tables at once).
READ_ROWS = 4096
# DuckDB's memory for joining and sorting the link state (past it, DuckDB spills to the
# read's temporary folder).
LINK_MEMORY = "64MB"
LINK_CONFIG: dict = {"threads": 1}

# The links of each runtime call, activity and cuda_sync (file order), one join a
# statement (a few joins in one query need more memory than LINK_MEMORY on large files;
# one at a time, DuckDB spills what does not fit): (table, query) made in turn, each
# dropped once no later query reads it (`_unused`); the last of each is sorted by seq (a
# statement of its own: a join and the sort in one did not fit LINK_MEMORY at 10 M events)
# into the `<name>_links` file pass 2 reads.
_FIRST_CALLS = ("cf", "SELECT corr, min(seq) AS seq FROM calls WHERE has_corr = 1 GROUP BY corr")
# A call: its start and end, the op enclosing it, the first activity it launched (by
# correlation) and their count.
_CALL_LINKS = (
    ("af", "SELECT corr, min(seq) AS first, count(*) AS n FROM acts WHERE has_corr = 1 GROUP BY corr"),
    ("c1", "SELECT c.seq, c.t0, c.t1, c.corr, c.has_corr, co.op FROM calls c LEFT JOIN call_op co ON co.call = c.seq"),
    ("c2", "SELECT c1.*, o.name AS op_name FROM c1 LEFT JOIN ops o ON o.seq = c1.op"),
    ("c3", "SELECT c2.*, af.first, af.n FROM c2 LEFT JOIN af ON c2.has_corr = 1 AND af.corr = c2.corr"),
    ("call", "SELECT c3.seq, c3.t0, c3.t1, c3.op, c3.op_name, a.name AS act_name, a.t0 AS act_t0, "
             "a.dev AS act_dev, coalesce(c3.n, 0) AS acts FROM c3 LEFT JOIN acts a ON a.seq = c3.first"),
)
# An activity (module docstring: kernel -> op link): its launch call (the first call with
# its correlation: start, External id, byte count), the op and how it was found (1: the
# op enclosing the launch call, 2: the op with its External id, which must span the
# launch; 0: none).
_KERNEL_LINKS = (
    ("oe", "SELECT ext, min(seq) AS seq FROM op_ext GROUP BY ext"),
    ("k1", "SELECT a.seq, a.ext, a.ext_kind, cf.seq AS call FROM acts a "
           "LEFT JOIN cf ON a.has_corr = 1 AND cf.corr = a.corr"),
    ("k2", "SELECT k1.*, c.t0 AS launch, c.ext AS c_ext, c.size FROM k1 LEFT JOIN calls c ON c.seq = k1.call"),
    ("k3", "SELECT k2.*, co.op AS l_seq FROM k2 LEFT JOIN call_op co ON co.call = k2.call"),
    ("k4", "SELECT k3.*, o.name AS l_name, o.t0 AS l_t0 FROM k3 LEFT JOIN ops o ON o.seq = k3.l_seq"),
    ("k5", f"SELECT k4.*, oe.seq AS x_seq FROM k4 LEFT JOIN oe ON oe.ext = CASE "
           f"WHEN k4.ext_kind = {_EXT_INT} THEN k4.ext WHEN k4.ext_kind = {_EXT_NONE} AND k4.c_ext <> {_NONE_SQL} "
           f"THEN k4.c_ext END"),
    ("k6", "SELECT k5.*, o.name AS x_name, o.t0 AS x_t0, o.t1 AS x_t1, CASE WHEN l_seq IS NOT NULL THEN 1 "
           "WHEN o.seq IS NOT NULL AND (launch IS NULL OR (o.t0 <= launch AND launch <= o.t1)) THEN 2 ELSE 0 END "
           "AS link FROM k5 LEFT JOIN ops o ON o.seq = k5.x_seq"),
    ("kernel", f"SELECT seq, launch, nullif(c_ext, {_NONE_SQL}) AS call_ext, nullif(size, {_NONE_SQL}) AS size, "
               "CASE link WHEN 1 THEN l_name WHEN 2 THEN x_name END AS op_name, "
               "CASE link WHEN 1 THEN l_t0 WHEN 2 THEN x_t0 END AS op_t0, "
               "CASE link WHEN 1 THEN l_seq WHEN 2 THEN x_seq END AS op_seq, link FROM k6"),
)
# A cuda_sync: its launch call's start.
_SYNC_LINKS = (
    ("s1", "SELECT s.seq, cf.seq AS call FROM syncs s LEFT JOIN cf ON s.has_corr = 1 AND cf.corr = s.corr"),
    ("sync", "SELECT s1.seq, c.t0 AS launch FROM s1 LEFT JOIN calls c ON c.seq = s1.call"),
)
# The enclosing-op sweep's order (`_Index._enclosing`): by thread, start, ops before
# calls, longer first, file order.
_SWEEP = """
SELECT th, t0, 0 AS kind, t1, seq FROM ops UNION ALL SELECT th, t0, 1, t1, seq FROM calls
ORDER BY th, t0, kind, t1 DESC, seq"""


def _unused(made: list[str], later: tuple) -> list[str]:
    """The tables of `made` that no query of `later` reads: each is dropped as soon as that
    is so, not at the end of its steps (the chain of them held at once did not fit
    LINK_MEMORY at 10 M events)."""
    rest = " ".join(query for _, query in later)
    return [t for t in made if not re.search(rf"\b{t}\b", rest)]


class _KeyIndex:
    """int key -> positions (file order) of the rows that hold it, for link state held in
    memory: the keys sorted (stable) beside their positions; lookups bisect (C speed)."""

    def __init__(self, keys: array, has: array | None = None):
        k, pos = _arrow(keys), pa.array(range(len(keys)), pa.int64())
        if has is not None:
            mask = pc.equal(_arrow(has), pa.scalar(1, pa.int64()))
            k, pos = pc.filter(k, mask), pc.filter(pos, mask)
        order = pc.sort_indices(k)  # stable: file order within a key
        self.keys, self.pos = _int64s(pc.take(k, order)), _int64s(pc.take(pos, order))

    def span(self, key: int) -> tuple[int, int]:
        """[lo, hi) in the sorted keys of the rows with this key."""
        return bisect.bisect_left(self.keys, key), bisect.bisect_right(self.keys, key)

    def first(self, key: int) -> int | None:
        """Position of the first row with this key."""
        keys = self.keys
        k = bisect.bisect_left(keys, key)
        return self.pos[k] if k < len(keys) and keys[k] == key else None


def _enclosing_in_memory(ops: list[array], calls: list[array]) -> array:
    """`_Index._enclosing` for link state held in memory: for each runtime call (file
    order), the seq of the innermost cpu_op enclosing it on its thread, else _NONE."""
    n_ops, n_calls = len(ops[0]), len(calls[0])
    out = array("q", [_NONE]) * n_calls
    if not n_ops or not n_calls:
        return out
    th, start, end, seq = (pa.concat_arrays([_arrow(a), _arrow(b)]) for a, b in zip(
        ops[:4], (calls[3], calls[1], calls[2], calls[0])))
    kind = pa.concat_arrays([pa.repeat(pa.scalar(0, pa.int8()), n_ops), pa.repeat(pa.scalar(1, pa.int8()), n_calls)])
    pos = pa.concat_arrays([pa.array(range(n_ops), pa.int64()), pa.array(range(n_calls), pa.int64())])
    table = pa.table({"th": th, "start": start, "kind": kind, "end": end, "seq": seq, "pos": pos})
    order = pc.sort_indices(table, sort_keys=[("th", "ascending"), ("start", "ascending"), ("kind", "ascending"),
                                              ("end", "descending"), ("seq", "ascending")])
    table = table.select(["th", "start", "kind", "end", "pos"])
    op_seq = ops[3]
    parts = (table.take(order.slice(lo, SPILL_ROWS)) for lo in range(0, len(order), SPILL_ROWS))
    for pairs in _sweep(parts):
        for p, o in pairs:
            out[p] = op_seq[o]
    return out


def _sweep(batches: Iterable) -> Iterator[list[tuple[int, int]]]:
    """The enclosing-op sweep over batches of (thread, start, kind, end, key) rows sorted
    by thread, start, ops (kind 0) first, longer first, file order: for each batch, the
    (call key, key of the innermost op enclosing it) pairs. A stack of the ops still open
    on the thread; ops are nested, so the first entry from the top that reaches the
    call's end is the innermost."""
    stack: list[tuple[int, int]] = []  # (end, op key)
    cur = None
    for batch in batches:
        pairs = []
        for t, s, k, e, q in zip(*(col.to_pylist() for col in batch.columns)):
            if t != cur:
                stack, cur = [], t
            while stack and stack[-1][0] < s:
                stack.pop()
            if k == 0:
                stack.append((e, q))
                continue
            for j in range(len(stack) - 1, -1, -1):
                if stack[j][0] >= e:
                    pairs.append((q, stack[j][1]))
                    break
        yield pairs


class _Pending:
    """Events of several pieces waiting for their times (`_ns`, `_event_times`): Arrow's
    conversion costs ~0.1 ms a call, so it runs on a few thousand values at a time, not a
    piece's hundred. Their Raw times keep the text of their pieces alive until then."""

    def __init__(self):
        self.clear_ops()
        self.others: list[tuple[int, Any, Any]] = []

    def clear_ops(self) -> None:
        self.ts: list[msgspec.Raw] = []
        self.dur: list[msgspec.Raw] = []
        self.ops: list[_Ev] = []
        self.seqs: list[int] = []
        self.steps: list[tuple[int, int, Any, int]] = []  # (pending position, N, tid, seq)


class _Index:
    """Pass 1: what linking rows needs, as ints and interned names (ns relative to base);
    the link state spilled to disk (`_Spill`) and resolved at its end (`_resolve`)."""

    @classmethod
    def build(cls, pieces: Iterator[list[_Ev]], meta: Callable[[], dict], spill: _Spill) -> _Index:
        """Pass 1 over the file's events, a decoded piece at a time (`_Source`); `meta()`
        gives the top-level keys once the events are read."""
        self = cls.__new__(cls)
        self._start(spill)
        op_cols = spill.cols["ops"]  # thread key, start, end, seq, name index
        pending = _Pending()
        for events in pieces:
            self._piece(events, op_cols, pending)
            if len(pending.ops) >= PENDING_EVENTS:
                self._op_times(pending, op_cols)
            if len(pending.others) >= PENDING_EVENTS:
                self._others(pending)
        self._op_times(pending, op_cols)
        self._others(pending)
        self._finish(meta())
        return self

    def _piece(self, events: list[_Ev], op_cols: list[array], pending: _Pending) -> None:
        """Pass 1 of one piece: the cpu_ops (most events) read from their Structs in the
        loop, written out inline, their times left to `_op_times` (in bulk); the other `X`
        events left to `_others`."""
        th_add, seq_add, name_add = op_cols[0].append, op_cols[3].append, op_cols[4].append
        ext_add, ext_seq_add = self.spill.cols["op_ext"][0].append, self.spill.cols["op_ext"][1].append
        ts_raw, dur_raw, op_evs, op_seqs = pending.ts, pending.dur, pending.ops, pending.seqs
        step_ops, others = pending.steps, pending.others
        threads, name_ix, add_name, old_cats = self._threads, self._name_ix, self.name, _OLD_CATS
        last: tuple = (_NO_ARGS, _NO_ARGS, 0)  # (pid, tid, thread key) of the last op (equal to no id)
        i = self._seq
        for ev in events:
            ph, cat = ev.ph, ev.cat
            if ph != "X":
                if cat == "cuda_sync" and ph != "M":
                    self._sync(i, ev)
                i += 1
                continue  # only spans link
            if cat != "cpu_op":
                cat = old_cats.get(cat, cat)
                if cat != "cpu_op":
                    if cat == "cuda_sync":
                        self._sync(i, ev)
                    others.append((i, ev, cat))
                    i += 1
                    continue
            name, args, tid, pid = ev.name, ev.args, ev.tid, ev.pid
            if not args or args is UNSET:
                args = _NO_ARGS
            if type(name) is not str or not ev.ts or not ev.dur or type(args) not in _ARGS:
                _odd_op(ev, i)
            tid = None if tid is UNSET else tid
            ix = name_ix.get(name)
            if ix is None:
                ix = add_name(name)
            if tid != last[1] or pid != last[0]:  # (ops come in runs of one thread; == as the dict's keys)
                last = (pid, tid, threads.setdefault((None if pid is UNSET else pid, tid), len(threads)))
            th_add(last[2])
            seq_add(i)
            name_add(ix)
            ts_raw.append(ev.ts)
            dur_raw.append(ev.dur)
            op_evs.append(ev)
            op_seqs.append(i)
            if name.startswith("ProfilerStep#"):
                m = _STEP.match(name)
                if m:
                    step_ops.append((len(op_seqs) - 1, int(m[1]), tid, i))
            ext = args.get("External id")
            if ext is None:
                ext = args.get("external id")
            if type(ext) is int:
                ext_add(ext)
                ext_seq_add(i)
            i += 1
        self._seq = i

    def _sync(self, i: int, ev: _Ev) -> None:
        """A cuda_sync event's correlation (as `_event` reads it), for its launch call."""
        args = ev.args
        corr = args.get("correlation") if isinstance(args, _ARGS) else None
        if corr is None and ev.ph in ("s", "f", "t"):
            corr = ev.id
        cols = self.spill.cols["syncs"]
        cols[0].append(i)
        cols[1].append(corr if type(corr) is int else 0)
        cols[2].append(type(corr) is int)

    def _op_times(self, pending: _Pending, op_cols: list[array]) -> None:
        """The pending ops' starts and ends (ns), converted in bulk (`_ns`); their steps.
        Then the ops written out once SPILL_ROWS are held."""
        if not pending.ops:
            return
        op_evs, op_seqs = pending.ops, pending.seqs
        starts = _ns(pending.ts, op_evs, op_seqs, "ts")
        durs = _ns(pending.dur, op_evs, op_seqs, "dur")
        try:
            ends = _int64s(pc.add_checked(_arrow(starts), _arrow(durs)))
        except pa.ArrowInvalid:  # overflow: the first op past int64 named
            k = next(k for k, (s, d) in enumerate(zip(starts, durs)) if not _INT64[0] <= s + d < _INT64[1])
            raise event_error(OverflowError("end past int64 ns"), _as_dict(op_evs[k]), op_seqs[k]) from None
        op_cols[1].extend(starts)
        op_cols[2].extend(ends)
        for k, n, tid, seq in pending.steps:
            self.steps.append((starts[k], ends[k], n, tid, seq))
        self.kineto_events += len(op_evs)
        pending.clear_ops()
        self.spill.flush("ops")
        self.spill.flush("op_ext")

    def _others(self, pending: _Pending) -> None:
        """Pass 1 of the pending `X` events other than cpu_ops, as dicts, in file order."""
        if not pending.others:
            return
        dicts = [_as_dict(ev) for _, ev, _ in pending.others]
        _event_times(dicts)
        for (i, _, cat), ev in zip(pending.others, dicts):  # (`ev`, `i`: named as errors find them, jsonstream.located)
            self._other(i, ev, cat)
        pending.others = []
        for table in ("calls", "acts", "syncs"):
            self.spill.flush(table)

    def _start(self, spill: _Spill) -> None:
        self.spill = spill
        self.steps: list[tuple[int, int, int, Any, int]] = []  # (start, end, N, tid, seq)
        self.names: list[str] = []
        self._name_ix: dict[str, int] = {}
        self._threads: dict[Any, int] = {}
        self.kineto_events = 0  # events of a Kineto category (else: not a Kineto trace)
        self._seq = 0  # events seen

    def _other(self, i: int, ev: dict, cat: Any) -> None:
        """Pass 1 for an `X` event other than a cpu_op: step spans, launch calls, activities."""
        if cat in _KINETO_CATS or _is_runtime(cat):
            self.kineto_events += 1
        args = ev.get("args") or _NO_ARGS
        if type(args) is not dict and (cat in _ACTIVITY_CATS or cat in _ANNOTATION_CATS or _is_runtime(cat)):
            # (their rows read args' keys; `located` words the TypeError with the event)
            raise TypeError(f"'args' is no JSON object: {str(args)[:60]}")
        if cat == "user_annotation":
            name, ts = ev.get("name"), ev.get("ts")
            if name is None or ts is None:
                for key in ("name", "ts"):
                    _need(ev, key, i)
            start = us_to_ns(ts)
            m = _STEP.match(name)
            if m:
                dur = ev.get("dur")
                end = start + us_to_ns(dur if dur is not None else _need(ev, "dur", i))
                self.steps.append((start, end, int(m[1]), ev.get("tid"), i))
        elif _is_runtime(cat):
            start = us_to_ns(_need(ev, "ts", i))
            end = start + us_to_ns(_need(ev, "dur", i))
            ext, corr = _ext(args), args.get("correlation")
            th = self._threads.setdefault((ev.get("pid"), ev.get("tid")), len(self._threads))
            has_corr = type(corr) is int
            for col, v in zip(self.spill.cols["calls"], (i, start, end, th, ext if type(ext) is int else _NONE,
                                                         _size(args.get("size")), corr if has_corr else 0,
                                                         has_corr)):
                col.append(v)
        elif cat in _ACTIVITY_CATS:
            name = _need(ev, "name", i)
            dev = _activity_device(cat, ev, _text_device(args))[0]
            corr, ext = args.get("correlation"), _ext(args)
            has_corr = type(corr) is int
            kind = _EXT_NONE if ext is None else _EXT_INT if type(ext) is int else _EXT_OTHER
            for col, v in zip(self.spill.cols["acts"], (i, corr if has_corr else 0, has_corr, self.name(name),
                                                        us_to_ns(_need(ev, "ts", i)), self.name(dev),
                                                        ext if kind == _EXT_INT else 0, kind)):
                col.append(v)

    def _finish(self, meta: dict) -> None:
        self.meta = meta  # every top-level key, wherever it stood
        self.steps.sort()
        self._starts = [s[0] for s in self.steps]
        self.spill.close(_PASS1_TABLES)
        if self.kineto_events or meta.get("baseTimeNanoseconds"):
            self._resolve() if self.spill.on_disk else self._resolve_in_memory()

    def name(self, name: str) -> int:
        ix = self._name_ix.get(name)
        if ix is None:
            ix = self._name_ix[name] = len(self.names)
            self.names.append(name)
        return ix

    def _resolve(self) -> None:
        """Every row's links, from the spilled link state: the enclosing-op sweep, then the
        runtime calls', activities' and cuda_syncs' links, each written in file order."""
        import duckdb  # (here: a reader that fails earlier never loads it)

        spill = self.spill
        con = duckdb.connect(str(spill.dir / "links.duckdb"), config={
            "memory_limit": LINK_MEMORY, "temp_directory": str(spill.dir / "tmp"), **LINK_CONFIG})
        try:
            con.execute("SET enable_progress_bar = false")  # (it prints to stdout)
            for table in _PASS1_TABLES:
                con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{spill.path(table)}')")
            self._enclosing(con.sql(_SWEEP).to_arrow_reader(READ_ROWS))
            con.execute(f"CREATE VIEW call_op AS SELECT * FROM read_parquet('{spill.path('call_op')}')")
            con.execute(f"CREATE TABLE {_FIRST_CALLS[0]} AS {_FIRST_CALLS[1]}")
            for steps in (_CALL_LINKS, _KERNEL_LINKS, _SYNC_LINKS):
                made: list[str] = []
                for k, (table, query) in enumerate(steps):
                    con.execute(f"CREATE TABLE {table} AS {query}")
                    made.append(table)
                    for done in _unused(made[:-1], steps[k + 1:]):
                        con.execute(f"DROP TABLE {done}")
                        made.remove(done)
                con.execute(f"COPY (SELECT * EXCLUDE (seq) FROM {table} ORDER BY seq) TO "
                            f"'{spill.path(table + '_links')}' "
                            f"(FORMAT parquet, COMPRESSION uncompressed, ROW_GROUP_SIZE {SPILL_ROWS})")
                con.execute(f"DROP TABLE {table}")
        except duckdb.IOException as e:
            raise WarehouseError(f"cannot write the Kineto reader's temporary link state (TMPDIR): {e} "
                                 "(the source file is not at fault)") from e
        except duckdb.OutOfMemoryException as e:
            raise WarehouseError(f"the Kineto reader's link state did not fit kineto.LINK_MEMORY ({LINK_MEMORY}): "
                                 f"{str(e).splitlines()[0]} (the source file is not at fault)") from e
        finally:
            con.close()
        self.links = {t: spill.rows(t) for t in ("call_links", "kernel_links", "sync_links")}

    def _resolve_in_memory(self) -> None:
        """The links of `_resolve` (the same rows, as generators), for link state held in
        memory: ids sorted by Arrow, looked up by bisect (DuckDB takes ~0.1 s to start)."""
        c = self.spill.cols
        ops, calls, acts = c["ops"], c["calls"], c["acts"]
        call_op = _enclosing_in_memory(ops, calls)
        call_of, act_of, op_of = _KeyIndex(calls[6], calls[7]), _KeyIndex(acts[1], acts[2]), _KeyIndex(c["op_ext"][0])
        op_ext_seq, op_seq = c["op_ext"][1], ops[3]

        def call_links() -> Iterator[tuple]:
            for p in range(len(calls[0])):
                seq = call_op[p]
                op_name = ops[4][bisect.bisect_left(op_seq, seq)] if seq != _NONE else None
                lo, hi = act_of.span(calls[6][p]) if calls[7][p] else (0, 0)
                a = act_of.pos[lo] if hi > lo else None
                yield (calls[1][p], calls[2][p], seq if seq != _NONE else None, op_name,
                       *((acts[3][a], acts[4][a], acts[5][a]) if a is not None else (None, None, None)), hi - lo)

        def kernel_links() -> Iterator[tuple]:
            for a in range(len(acts[0])):
                pos = call_of.first(acts[1][a]) if acts[2][a] else None
                launch = call_ext = size = None
                if pos is not None:
                    launch, call_ext, size = calls[1][pos], calls[4][pos], calls[5][pos]
                    call_ext, size = (call_ext if call_ext != _NONE else None), (size if size != _NONE else None)
                    seq = call_op[pos]
                    if seq != _NONE:
                        k = bisect.bisect_left(op_seq, seq)
                        yield launch, call_ext, size, ops[4][k], ops[1][k], seq, 1
                        continue
                kind = acts[7][a]
                ext = acts[6][a] if kind == _EXT_INT else call_ext if kind == _EXT_NONE else None
                j = op_of.first(ext) if ext is not None else None
                if j is not None:
                    seq = op_ext_seq[j]
                    k = bisect.bisect_left(op_seq, seq)
                    if launch is None or ops[1][k] <= launch <= ops[2][k]:
                        yield launch, call_ext, size, ops[4][k], ops[1][k], seq, 2
                        continue
                yield launch, call_ext, size, None, None, None, 0

        def sync_links() -> Iterator[tuple]:
            syncs = c["syncs"]
            for s in range(len(syncs[0])):
                pos = call_of.first(syncs[1][s]) if syncs[2][s] else None
                yield (calls[1][pos] if pos is not None else None,)

        self.links = {"call_links": call_links(), "kernel_links": kernel_links(), "sync_links": sync_links()}

    def _enclosing(self, sweep: pa.RecordBatchReader) -> None:
        """For each runtime call, the seq of the innermost cpu_op that encloses it on its
        thread (start <= call start, call end <= end), into the spilled `call_op`
        (`_sweep`, as the in-memory path)."""
        out = self.spill.cols["call_op"]
        for pairs in _sweep(sweep):
            for call, op in pairs:
                out[0].append(call)
                out[1].append(op)
            self.spill.flush("call_op")
        self.spill.close(("call_op",))

    def step_at(self, t: int) -> int | None:
        k = bisect.bisect_right(self._starts, t) - 1
        if k >= 0 and t < self.steps[k][1]:
            return self.steps[k][2]
        return None


def _odd_op(ev: _Ev, i: int) -> None:
    """The error of a cpu_op pass 1 cannot read: no name, time or duration, a name that is
    no string, args that are no object."""
    d = _as_dict(ev)
    for key in ("ts", "dur"):
        if not d.get(key):
            d.pop(key, None)
    for key in ("name", "ts", "dur"):
        _need(d, key, i)
    if type(ev.name) is not str:
        raise event_error(TypeError(f"the name is no string: {ev.name!r}"), d, i)
    raise event_error(TypeError(f"'args' is no JSON object: {str(ev.args)[:60]}"), d, i)


def _shapes(dims: Any) -> list | None:
    if type(dims) is not list:
        return None
    for d in dims:  # the usual case: every entry a list of ints, used as it is
        if type(d) is not list:
            break
        for x in d:
            if type(x) is not int:
                break
        else:
            continue
        break
    else:
        return dims
    # A TensorList input records a list of shapes: not one shape, so NULL (raw in params).
    return [d if type(d) is list and all(type(x) is int for x in d) else None for d in dims]


# PyTorch records C++ scalar type names; tracedb spells dtypes like TF and MegEngine do
# (float32, int64, ...) so that one filter works across formats. Input kinds that are no
# dtype (Scalar, ScalarList, TensorList, "") and unknown names pass through unchanged.
_TORCH_DTYPES = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "long int": "int64", "long": "int64", "int": "int32", "short int": "int16", "short": "int16",
    "signed char": "int8", "unsigned char": "uint8", "bool": "bool",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128",
    "c10::complex<c10::Half>": "complex32", "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
}


def _dtypes(dtypes: Any) -> list[str] | None:
    if type(dtypes) is not list:
        return None
    return [_TORCH_DTYPES.get(d, d) if type(d) is str else str(plain(d)) for d in dtypes]


def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    return gc_paused(located(_read(path, ctx)))  # errors name the event (jsonstream.located)


class _Out:
    """The builders of one read, flushed when full."""

    def __init__(self):
        self.b = {table: BatchBuilder(table, BATCH_ROWS, row._fields) for table, row in _ROWS.items()}

    def flush_full(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        """The builders holding BATCH_ROWS rows or more (checked after every piece)."""
        for b in self.b.values():
            if len(b.rows) >= BATCH_ROWS:
                yield from b.flush()

    def flush(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        for b in self.b.values():
            yield from b.flush()


class _Source:
    """The file's events as `jsonstream.StructStream` decodes them, a piece at a time, for
    each pass. Pass 1 keeps the pieces of a file of up to KEEP_CHARS of JSON, and pass 2
    walks them again (each event decoded once); a larger file is decoded again for pass 2,
    so memory holds a piece at a time, not the file."""

    def __init__(self, path: Path):
        self.path = path
        self.kept: list[list[_Ev]] | None = []
        self.meta: dict = {}

    def _stream(self) -> StructStream:
        return StructStream(self.path, _Ev, _F, _from_dict, chunk_chars=CHUNK_CHARS)

    def first(self) -> Iterator[list[_Ev] | list[_Ev1]]:
        stream = self._stream()
        for events in stream:
            if self.kept is not None:
                self.kept.append(events)
                if stream.position() > KEEP_CHARS:
                    self.kept = None
                    stream.retype(_Ev1, _from_dict1)  # decoded again for pass 2: pass 1's fields only
            yield events
        self.meta = stream.meta

    def second(self) -> Iterator[list[_Ev]]:
        if self.kept is None:
            yield from self._stream()
            return
        kept, self.kept = self.kept, None
        kept.reverse()
        while kept:  # each piece freed once walked
            yield kept.pop()


def _read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    source = _Source(path)
    spill = _Spill()
    try:
        index = _Index.build(source.first(), lambda: source.meta, spill)
        _check_kineto(index)
        batches = _rows(index, source.second(), ctx)
        # A kept file's batches are all made before the first is given out: its events are
        # freed before the consumer's GC could walk them.
        yield from (list(batches) if source.kept is not None else batches)
    finally:
        spill.cleanup()


def _rows(index: _Index, pieces: Iterator[list[_Ev]], ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Pass 2: each piece's cpu_ops as node columns (`_NodeCols`), a batch each BATCH_ROWS
    ops; its other events as dicts through `_Pass2`'s row functions."""
    out = _Out()
    p2 = _Pass2(index, ctx, out)
    nodes = _NodeCols(index)
    i = 0
    old_cats, flow_cats = _OLD_CATS, _FLOW_CATS
    rest: list[tuple[int, _Ev]] = []  # the other events, waiting for their times (`_Pending`)
    add_op = nodes.add
    for events in pieces:
        for ev in events:
            ph, cat = ev.ph, ev.cat
            if cat != "cpu_op" or ph != "X":  # (most events are cpu_ops: no _OLD_CATS lookup for them)
                cat = old_cats.get(cat, cat)
                if ph != "X" or cat != "cpu_op":
                    if ph == "X" or (ph != "M" and cat not in flow_cats):  # (M, flows: not stored)
                        rest.append((i, ev))
                    i += 1
                    continue
            add_op(ev)
            i += 1
        nodes.seal()
        if len(rest) >= PENDING_EVENTS:
            _rest_rows(rest, p2)
            rest = []
        if len(nodes) >= BATCH_ROWS:
            yield "nodes", nodes.batch(index, p2.base, p2.rank)
        yield from out.flush_full()
    _rest_rows(rest, p2)
    if len(nodes):
        yield "nodes", nodes.batch(index, p2.base, p2.rank)
    yield from p2.finish()


def _rest_rows(rest: list[tuple[int, _Ev]], p2: _Pass2) -> None:
    """The rows of events other than cpu_ops: as dicts, their times in bulk (`_event_times`)."""
    dicts = [_as_dict(ev) for _, ev in rest]
    _event_times(dicts)
    for (i, _), ev in zip(rest, dicts):  # (`ev`, `i`: named as errors find them, jsonstream.located)
        cat = ev.get("cat")
        p2.add(i, ev, ev.get("ph"), _OLD_CATS.get(cat, cat))


class _Ops:
    """Pass 1's ops (file order), read back for pass 2's node batches: from memory, or
    from their spilled file."""

    def __init__(self, spill: _Spill):
        self._spill = spill
        self._batches: Iterator[pa.RecordBatch] | None = None
        self._held: list[pa.RecordBatch] = []
        self.done = 0  # ops already taken

    def take(self, n: int) -> list[pa.Array]:
        """The next n ops' start, end, seq and name index."""
        lo, self.done = self.done, self.done + n
        if not self._spill.on_disk:
            return [_arrow(c)[lo:lo + n] for c in self._spill.cols["ops"][1:]]
        if self._batches is None:
            self._batches = self._spill.batches("ops", SPILL_ROWS, ["t0", "t1", "seq", "name"])
        held = sum(b.num_rows for b in self._held)
        while held < n:
            b = next(self._batches)
            self._held.append(b)
            held += b.num_rows
        table = pa.Table.from_batches(self._held)
        self._held = table.slice(n).to_batches()
        return [c.combine_chunks() for c in table.slice(0, n).columns]


class _NodeCols:
    """The `nodes` columns of pass 2's cpu_ops until a batch is made (`batch`): read from
    each op's Struct in one loop (its fields then in the CPU cache); start, duration, seq
    and name come from pass 1's arrays (the same ops in the same order)."""

    def __init__(self, index: _Index):
        self.ops = _Ops(index.spill)
        self._clear()
        self.dtype_names = dict(_TORCH_DTYPES)  # grows by the names seen that map to themselves

    def _clear(self) -> None:
        self.tids, self.shapes, self.dtypes, self.exts, self.params, self.rf_ids, self.pids = ([] for _ in range(7))
        self.sealed: list[tuple[pa.Array, pa.Array]] = []  # (shapes, dtypes) of earlier pieces (`seal`)

    def seal(self, least: int = SEAL_OPS) -> None:
        """The shapes and dtypes added since the last seal as Arrow arrays, once there are
        `least` (called after each piece, and by `batch`): a batch's ops would otherwise
        hold a few lists each (a shape a tensor) until the batch, long enough for the GC
        to promote them and walk them again at every full collection. Not every piece
        (~50 ops): fewer, larger conversions and chunks to concatenate. Where Arrow
        refuses a value they stay lists, and the batch names it."""
        if not self.shapes or len(self.shapes) < least:
            return
        try:
            sealed = (pa.array(self.shapes, _SHAPES_TYPE), pa.array(self.dtypes, _DTYPES_TYPE))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError):
            return
        self.sealed.append(sealed)
        self.shapes, self.dtypes = [], []

    def _column(self, k: int, rest: list, kind: pa.DataType) -> pa.Array | list:
        """The sealed arrays of column k (0 shapes, 1 dtypes) and the rest, as one column."""
        if not rest:
            return pa.concat_arrays([s[k] for s in self.sealed]) if self.sealed else pa.array([], kind)
        return [v for s in self.sealed for v in s[k].to_pylist()] + rest

    def __len__(self) -> int:
        return len(self.tids)

    def add(self, ev: _Ev) -> None:
        args, tid, pid = ev.args, ev.tid, ev.pid
        if not args or args is UNSET:
            args = _NO_ARGS
        tid = None if tid is UNSET else tid
        ext = args.get("External id")
        if ext is None:
            ext = args.get("external id")
        self.exts.append(ext if type(ext) is int else _int(ext))
        self.rf_ids.append(_rf_id(args))
        self.pids.append(pid if type(pid) is int else None)
        dims = args.get("Input Dims")
        shape = _shapes(dims)
        self.shapes.append(shape)
        types = args.get("Input type")
        try:  # _dtypes, for a list of dtype names (C); mapped: only str keys
            self.dtypes.append(list(map(self.dtype_names.__getitem__, types)) if type(types) is list else None)
        except (KeyError, TypeError):
            self.dtypes.append(_dtypes(types))
            self.dtype_names.update((d, d) for d in types if type(d) is str and d not in self.dtype_names)
        # _params(args, known, {"tid": tid} unless an int), by _MSGSPEC_ENCODE, inline
        kept = args.copy()
        pop = kept.pop
        pop("External id", None)
        pop("external id", None)
        pop("Input type", None)
        if shape is dims or shape is None:  # else (a new list, with a None) the nested dims stay in params
            pop("Input Dims", None)
        if type(tid) is int:
            self.tids.append(tid)
        else:
            self.tids.append(None)
            kept["tid"] = tid
        if kept:
            out = _MSGSPEC_ENCODE(kept)
            self.params.append(out.decode() if out.isascii() and b"\x7f" not in out else dumps_compact(kept))
        else:
            self.params.append(None)

    def batch(self, index: _Index, base: int, rank: int | None) -> pa.RecordBatch:
        """The node rows of the ops added since the last batch."""
        n = len(self.tids)
        lo = self.ops.done
        self.seal(1)
        starts, ends, seqs, name_ix = self.ops.take(n)
        try:  # one conversion a name
            names = pa.array(index.names, pa.string()).take(name_ix)
        except (pa.ArrowInvalid, ValueError):  # (a name Arrow refuses: named below)
            names = [index.names[k] for k in name_ix.to_pylist()]
        cols = {"node_name": names, "op_type": names,
                "duration_ns": pc.subtract(ends, starts), "thread_id": self.tids,
                "seq": seqs, "input_shapes": self._column(0, self.shapes, _SHAPES_TYPE),
                "input_dtypes": self._column(1, self.dtypes, _DTYPES_TYPE),
                "correlation_id": self.exts, "params": self.params, "rf_id": self.rf_ids, "process_id": self.pids,
                "device": pa.repeat(pa.scalar("CPU:0"), n), "device_raw": pa.repeat(pa.scalar("CPU"), n),
                "rank": pa.repeat(pa.scalar(rank, pa.int32()), n), "step": _steps_at(index, starts),
                "start_ns": pc.add_checked(starts, pa.scalar(base, pa.int64()))}
        schema = BatchBuilder("nodes").schema
        try:
            arrays = [pa.array(cols[f.name], f.type) if f.name in cols else pa.nulls(n, f.type) for f in schema]
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError) as e:
            raise _bad_nodes(cols, lo, e) from e
        self._clear()
        return annotate_nodes(pa.RecordBatch.from_arrays(arrays, schema=schema))


_SHAPES_TYPE = BatchBuilder("nodes").schema.field("input_shapes").type
_DTYPES_TYPE = BatchBuilder("nodes").schema.field("input_dtypes").type


def _bad_nodes(cols: dict[str, Any], first: int, error: Exception) -> TraceFormatError:
    """The row and column of a node batch Arrow refused, worded as `BatchBuilder` words it."""
    values = {k: v.to_pylist() if isinstance(v, pa.Array) else list(v) for k, v in cols.items()}
    b = BatchBuilder("nodes", columns=tuple(values))
    b.rows, b.emitted = list(zip(*values.values())), first
    return TraceFormatError(b._bad_value(error))


def _steps_at(index: _Index, starts: pa.Array) -> pa.Array | list:
    """`index.step_at` of each start: with few steps, one Arrow pass a step (the last step
    starting at or before t decides, as `step_at`'s bisect): 0.1 ms against 0.9 for 7,245 ops."""
    if len(index.steps) > 16:
        return [index.step_at(s) for s in starts.to_pylist()]
    t = starts
    out = pa.nulls(len(t), pa.int64())
    for start, end, n, _, _ in index.steps:  # sorted by start
        here = pc.if_else(pc.less(t, end), pa.scalar(n, pa.int64()), pa.scalar(None, pa.int64()))
        out = pc.if_else(pc.greater_equal(t, start), here, out)
    return out


def _check_kineto(index: _Index) -> None:
    if not index.kineto_events and not index.meta.get("baseTimeNanoseconds"):
        # Claimed by a top-level key, but not one event is Kineto's: the generic
        # Chrome-trace reader reads such a file better (formats.read falls back).
        raise TraceFormatError("no Kineto events (no cpu_op, kernel, runtime or annotation category)")


class _Pass2:
    """Pass 2 for every event but a cpu_op: its row into its table's builder; then steps."""

    def __init__(self, index: _Index, ctx: ReadContext, out: _Out):
        self.index, self.ctx, self.out = index, ctx, out
        self.base, self.rank = _metadata(index, ctx)
        # Each runtime call's, activity's and cuda_sync's links, in file order (`_Index._resolve`)
        self.call_links = index.links["call_links"]
        self.kernel_links = index.links["kernel_links"]
        self.sync_links = index.links["sync_links"]
        self.device_work: dict[int, list[int]] = {}  # step -> [first start, last end, count]

    def add(self, i: int, ev: dict, ph: Any, cat: Any) -> None:
        """The event's row, appended to its builder (the caller flushes: `_Out.flush_full`)."""
        base, rank, index, b = self.base, self.rank, self.index, self.out.b
        sync = next(self.sync_links)[0] if cat == "cuda_sync" else None  # (pass 1 read each cuda_sync)
        if ph == "X":
            if cat in _ACTIVITY_CATS:
                row = _kernel(ev, cat, i, base, rank, index, next(self.kernel_links))
                b["kernels"].rows.append(row)
                _count_work(self.device_work, row)
                return
            if _is_runtime(cat):
                b["runtime_calls"].rows.append(_call(ev, cat, i, base, rank, index, next(self.call_links)))
                return
            if cat in _ANNOTATION_CATS:
                b["annotations"].rows.append(_annotation(ev, cat, i, base, rank, index))
                return
        elif ph == "M" or cat in _FLOW_CATS:
            return
        elif (ph == "i" or ph == "I") and ev.get("name") == "[memory]":
            b["allocations"].rows.append(_allocation(ev, i, base, rank, index))
            return
        if cat not in _KNOWN:
            self.ctx.warn(f"unknown event category {str(cat)[:60]!r} (kept in events)")
        row = _event(ev, cat, i, base, rank, index, sync)
        if row is None:
            self.ctx.warn("event without 'ts' (skipped)")
        else:
            b["events"].rows.append(row)

    def finish(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        """The step rows, then every builder flushed."""
        rank, base = self.rank, self.base
        for start, end, n, tid, seq in self.index.steps:
            work = self.device_work.get(n)
            self.out.b["steps"].rows.append(_new(StepRow, (
                "CPU:0", "CPU", rank, n, f"ProfilerStep#{n}", base + start, end - start,
                tid if type(tid) is int else None,
                work[0] if work else None, work[1] if work else None, work[2] if work else 0)))
        yield from self.out.flush()


def _count_work(device_work: dict, row: KernelRow) -> None:
    step = row.step
    if step is None:
        return
    start, end = row.start_ns, row.start_ns + row.duration_ns
    w = device_work.get(step)
    if w is None:
        device_work[step] = [start, end, 1]
    else:
        w[0], w[1], w[2] = min(w[0], start), max(w[1], end), w[2] + 1


def _metadata(index: _Index, ctx: ReadContext) -> tuple[int, int | None]:
    """Base time and rank; run-level metadata into ctx. Uses pass 1's full view of the keys."""
    full = index.meta
    base = _int(full.get("baseTimeNanoseconds")) or 0
    dist = full.get("distributedInfo")
    rank = _int(dist.get("rank")) if isinstance(dist, dict) else None
    if "deviceProperties" in full:
        ctx.metadata["device_properties"] = _jsonable(full["deviceProperties"])
    if dist is not None:
        ctx.metadata["distributed_info"] = _jsonable(dist)
    if rank is not None:
        ctx.metadata["rank"] = rank
    ctx.metadata["kineto"] = _jsonable({k: v for k, v in full.items()
                                        if k not in ("deviceProperties", "distributedInfo")})
    return base, rank


def _rf_id(args: dict) -> int | None:
    """The op's `Record function id` (PyTorch 2.1+; also kept in `params`): the key an
    execution trace's ops join on (`tracedb.formats.chakra_et`)."""
    rf = args.get("Record function id")
    return rf if type(rf) is int else None


_LINKS = (None, "launch", "external_id")  # `_KERNEL_LINKS`' link codes


def _kernel(ev: dict, cat: str, i: int, base: int, rank: int | None, index: _Index, links: tuple) -> KernelRow:
    """`links`: the activity's row of `_KERNEL_LINKS` (launch call, op, how the op was found)."""
    args = ev.get("args") or _NO_ARGS
    name, ts = ev.get("name"), ev.get("ts")
    if name is None or ts is None:
        for key in ("name", "ts"):
            _need(ev, key, i)
    start = us_to_ns(ts)
    corr = args.get("correlation")
    ext = _ext(args)
    launch, call_ext, size, op_name, op_start, op_seq, link = links
    if ext is None and call_ext is not None:
        ext = call_ext
    step = index.step_at(op_start) if link else (index.step_at(launch) if launch is not None else None)
    device, device_raw = _activity_device(cat, ev, args)
    if cat == "mtia_ccp_events":
        kind = "memcpy" if name.startswith("dma") else "kernel"
        nbytes = _int(args.get("size")) if kind == "memcpy" else None
        copy_kind = _COPY_DIRECTION.get(args.get("direction")) if kind == "memcpy" else None
    else:
        kind = _GPU_KIND[cat]
        copy = _COPY_KIND.match(name) if kind == "memcpy" else None
        copy_kind = copy[1] if copy else None
        nbytes = None
        if kind != "kernel":
            nbytes = _int(args.get("bytes"))
            if nbytes is None:
                nbytes = size  # ROCm copies: the byte count is on the launch call
    grid, block = args.get("grid"), args.get("block")
    occ = num(args.get("est. achieved occupancy %"))
    stream = _int(args.get("stream"))
    return _new(KernelRow, (
        device, device_raw, rank, step,
        stream if stream is not None else _int(ev.get("tid")),
        kind, name, index.names[op_name] if link else None,
        base + start, us_to_ns(_need(ev, "dur", i)),
        nbytes, copy_kind, _int(corr),
        base + launch if launch is not None else None,
        plain(grid) if type(grid) is list else None,
        plain(block) if type(block) is list else None,
        _int(args.get("registers per thread")),
        _int(args.get("shared memory")),
        float(occ) if occ is not None else None,
        _params(args, _KERNEL_ARGS),
        op_seq if link else None, _LINKS[link], _int(ext),
    ))


def _call(ev: dict, cat: str, i: int, base: int, rank: int | None, index: _Index, links: tuple) -> CallRow:
    """`links`: the call's row of `_CALL_LINKS` (its times, enclosing op, first activity)."""
    args = ev.get("args") or _NO_ARGS
    start, end, seq, op_name, act_name, act_start, act_dev, acts = links
    corr = args.get("correlation")
    first = act_name is not None
    names = index.names
    tid = ev.get("tid")
    return _new(CallRow, (
        "CPU:0", "CPU", rank, index.step_at(start), cat, _need(ev, "name", i), base + start,
        end - start, tid if type(tid) is int else None, _int(corr), _int(_ext(args)),
        names[op_name] if seq is not None else None, seq,
        names[act_name] if first else None, acts,
        base + act_start if first else None, names[act_dev] if first else None,
        i, _params(args, _CALL_ARGS, None if type(tid) is int else {"tid": tid}),
    ))


def _annotation(ev: dict, cat: str, i: int, base: int, rank: int | None, index: _Index) -> AnnotationRow:
    args = ev.get("args") or _NO_ARGS
    name, ts, dur = ev.get("name"), ev.get("ts"), ev.get("dur")
    if name is None or ts is None or dur is None:
        for key in ("name", "ts", "dur"):
            _need(ev, key, i)
    start = us_to_ns(ts)
    tid = ev.get("tid")
    m = _STEP.match(name)
    if cat == "gpu_user_annotation":  # a device range: on its GPU and stream, in device time
        device, device_raw = _activity_device("kernel", ev, args)
        stream = _int(args.get("stream"))
        stream, thread, step = stream if stream is not None else _int(tid), None, int(m[1]) if m else None
    else:
        device, device_raw, stream = "CPU:0", "CPU", None
        thread, step = tid if type(tid) is int else None, index.step_at(start)
    return _new(AnnotationRow, (
        device, device_raw, rank, step, cat, name, base + start, us_to_ns(dur), thread, stream,
        _int(_ext(args)), i, _params(args, _ANNOTATION_ARGS, None if type(tid) is int else {"tid": tid})))


def _event(ev: dict, cat: Any, i: int, base: int, rank: int | None, index: _Index,
           sync: int | None) -> EventRow | None:
    """`sync`: a cuda_sync's launch call's start (`_SYNC_LINKS`)."""
    ts = ev.get("ts")
    if ts is None:
        return None
    args = ev.get("args")
    args = args if isinstance(args, dict) else _NO_ARGS
    start, dur, tid, ph = us_to_ns(ts), ev.get("dur"), ev.get("tid"), ev.get("ph")
    corr = args.get("correlation")
    if corr is None and ph in ("s", "f", "t"):
        corr = ev.get("id")
    if cat == "cuda_sync":  # device-side: its GPU and stream; its step is its call's
        device, device_raw = _activity_device("kernel", ev, args)
        stream, thread = _int(args.get("stream")), None
        step = index.step_at(sync) if sync is not None else None
    else:
        device, device_raw, stream = "CPU:0", "CPU", None
        thread, step = (tid if type(tid) is int else None), index.step_at(start)
    extra = {k: ev[k] for k in ("pid", "tid", "s", "bp") if k in ev and type(ev[k]) is not int}
    if args is not _NO_ARGS:
        extra = {**args, **extra}
    return _new(EventRow, (
        device, device_raw, rank, step, cat if type(cat) is str else None,
        str(ev.get("name")) if ev.get("name") is not None else None, ph if type(ph) is str else None,
        base + start, us_to_ns(dur) if dur is not None else None, thread, stream, _int(corr),
        _int(_ext(args)), i, dumps_compact(extra) if extra else None))


def _allocation(ev: dict, i: int, base: int, rank: int | None, index: _Index) -> AllocRow:
    args = ev.get("args")
    if not isinstance(args, dict):
        raise TraceFormatError(f"[memory] event #{i} has no 'args'")
    size = _int(args.get("Bytes"))
    if size is None:
        raise TraceFormatError(f"[memory] event #{i} has no numeric 'Bytes'")
    dtype, did = plain(args.get("Device Type")), _int(args.get("Device Id"))
    if isinstance(dtype, str):  # some writers spell the type out
        canon, torch_name = dtype.upper().replace("CUDA", "GPU"), dtype.lower()
    else:
        canon, torch_name = _DEVICE_TYPE.get(_int(dtype), (f"DEVICE{dtype}", f"device{dtype}"))
    idx = did if did is not None and did >= 0 else 0  # CPU events write Device Id -1
    tid = ev.get("tid")
    ts = us_to_ns(_need(ev, "ts", i))
    return _new(AllocRow, (
        f"{canon}:{idx}", f"{torch_name}:{did if did is not None else ''}", rank,
        index.step_at(ts), base + ts,
        size, "free" if size < 0 else "alloc",
        _int(args.get("Addr")),
        _int(args.get("Total Allocated")),
        _int(args.get("Total Reserved")),
        _params(args, _MEMORY_ARGS, {"tid": tid} if tid is not None else None),
    ))
