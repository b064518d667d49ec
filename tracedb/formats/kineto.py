"""PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzipped.

Rows:
- `nodes`: `cpu_op` events (device CPU:0); `correlation_id` = the op's `External id`,
  input shapes/dtypes from `Input Dims` / `Input type` when shapes were recorded.
- `kernels`: `kernel`, `gpu_memcpy`, `gpu_memset` events on `GPU:<args.device>`.
  The launching op: the kernel's own `External id` arg when Kineto wrote one, else its
  `correlation` -> the `cuda_runtime`/`cuda_driver` event with that correlation -> that
  event's `External id` -> the cpu_op. (The `ac2g` flow events carry the same correlation
  id, so they add no link of their own.) `launch_start_ns` is that runtime event's start.
- `allocations`: `[memory]` instant events (bytes negative for a free).

Steps: `ProfilerStep#N` spans are on the main thread, but the backward pass runs on the
autograd thread, so a node's step is the ProfilerStep span containing its start on *any*
thread; a kernel takes its launching op's step (else its launch call's).

Time: Kineto writes `ts` relative to `baseTimeNanoseconds` (PyTorch's own test recovers
`ts = (absolute_ns - baseTimeNanoseconds) / 1000`), so absolute ns = base + ts µs. Older
traces without the key write absolute epoch µs; then base is 0.

Streaming: two passes over `EventStream`. Pass 1 keeps small maps (step spans,
correlation -> (launch ns, External id), External id -> (op name, start)); pass 2 emits
rows. Two passes because Kineto writes the CPU ops before the ProfilerStep spans and the
GPU events after, and top-level keys (base time, rank) may follow `traceEvents`.
Pass 1 reads event numbers as text (it needs only `ts`/`dur`), pass 2 as Decimal: both
exact and decoded in C; Decimals become floats where they reach a row (`plain`, the
params encoder). Rows are tuples in `_*_COLS` order, built into batches column-wise.
"""

from __future__ import annotations

import bisect
import json
import re
from array import array
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from tracedb.errors import TraceFormatError
from tracedb.formats.base import BatchBuilder, ReadContext, text_head
from tracedb.formats.jsonstream import EventStream, dumps_compact, gc_paused, located, need, num, plain, us_to_ns

NAME = "kineto"
DESCRIPTION = "PyTorch profiler (Kineto) Chrome-trace JSON, optionally gzipped"

_KINETO_KEY = re.compile(r'"(?:deviceProperties|distributedInfo|baseTimeNanoseconds)"\s*:')
_KINETO_CAT = re.compile(
    r'"cat"\s*:\s*"(?:cpu_op|kernel|cuda_runtime|cuda_driver|gpu_memcpy|gpu_memset|user_annotation)"'
)
_STEP = re.compile(r"ProfilerStep#(\d+)$")
_COPY_KIND = re.compile(r"Memcpy (\w+)")

# Rows wait as tuples until a batch is built: 16k rows keep that to a few MB a table,
# where 64k dict rows measured ~90 MB more peak RSS (bench/bench_kineto_memory.py).
BATCH_ROWS = 16384

_NODE_COLS = ("device", "device_raw", "rank", "step", "node_name", "op_type", "start_ns",
              "duration_ns", "thread_id", "seq", "input_shapes", "input_dtypes",
              "correlation_id", "params")
_KERNEL_COLS = ("device", "device_raw", "rank", "step", "stream", "kind", "name", "node_name",
                "start_ns", "duration_ns", "bytes", "copy_kind", "correlation_id",
                "launch_start_ns", "grid", "block", "registers_per_thread",
                "shared_memory_bytes", "occupancy", "params")
_ALLOC_COLS = ("device", "device_raw", "rank", "step", "ts_ns", "bytes", "kind", "address",
               "total_allocated_bytes", "total_reserved_bytes", "params")

_GPU_KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
# c10::DeviceType codes as `[memory]` events write them -> (canonical type, torch name).
_DEVICE_TYPE = {0: ("CPU", "cpu"), 1: ("GPU", "cuda"), 6: ("GPU", "hip"), 9: ("XLA", "xla"),
                12: ("XPU", "xpu"), 13: ("MPS", "mps"), 15: ("HPU", "hpu"), 19: ("MTIA", "mtia")}

# Args that have a column (the rest go to `params`).
_KERNEL_ARGS = ("device", "stream", "correlation", "External id", "grid", "block",
                "registers per thread", "shared memory", "est. achieved occupancy %", "bytes")
_NODE_ARGS = ("External id", "Input Dims", "Input type")
_NODE_ARGS_NESTED = ("External id", "Input type")  # keep nested (TensorList) dims verbatim
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


def _params(args: dict, known: tuple[str, ...], extra: dict | None = None) -> str | None:
    rest = args.copy()  # then drop the known keys: cheaper than filtering every key
    pop = rest.pop
    for k in known:
        pop(k, None)
    if extra:
        rest.update(extra)
    return dumps_compact(rest) if rest else None


class _IntMap:
    """int key -> tuple of ints, as parallel `array('q')` columns sorted by key.

    ~8 bytes a column per entry instead of ~200 for a dict of tuples: a 1 GB trace has
    millions of ops. Lookups bisect the sorted keys (C speed).
    """

    def __init__(self, ncols: int):
        self.keys = array("q")
        self.cols = [array("q") for _ in range(ncols)]
        self._sorted = True

    def add(self, key: Any, *vals: int) -> None:
        if type(key) is not int:
            return  # Kineto ids are ints; anything else cannot be linked
        keys = self.keys
        if keys and key < keys[-1]:
            self._sorted = False
        keys.append(key)
        for col, v in zip(self.cols, vals):
            col.append(v)

    def finish(self) -> None:
        if self._sorted or not self.keys:
            return
        def arrow(a: array) -> pa.Array:  # zero-copy view; pa.array() would pull in numpy
            return pa.Array.from_buffers(pa.int64(), len(a), [None, pa.py_buffer(a)])

        order = pc.sort_indices(arrow(self.keys))

        def take(a: array) -> array:
            taken = pc.take(arrow(a), order)
            out = array("q")
            out.frombytes(memoryview(taken.buffers()[1])[: 8 * len(taken)])
            return out

        self.keys = take(self.keys)
        self.cols = [take(c) for c in self.cols]

    def get(self, key: Any) -> tuple[int, ...] | None:
        if type(key) is not int:
            return None
        keys = self.keys
        k = bisect.bisect_left(keys, key)
        if k < len(keys) and keys[k] == key:
            return tuple([c[k] for c in self.cols])
        return None


_NONE = -(1 << 63)  # "no External id" in an int column
_NO_ARGS: dict = {}


class _Index:
    """Pass 1: what linking rows needs, as ints and interned names (ns relative to base)."""

    def __init__(self, stream: EventStream):
        self.steps: list[tuple[int, int, int]] = []  # (start, end, N), sorted by start
        self.runtime = _IntMap(2)  # correlation -> (launch start, External id)
        self.ops = _IntMap(2)  # cpu_op External id -> (name index, op start)
        self.annotations: dict[int, tuple[int, int]] = {}  # user_annotation ids (few)
        self.names: list[str] = []
        name_ix: dict[str, int] = {}
        add_op, add_runtime, step_match = self.ops.add, self.runtime.add, _STEP.match
        for i, ev in enumerate(stream):
            if ev.get("ph") != "X":
                continue
            cat = ev.get("cat")
            args = ev.get("args") or _NO_ARGS
            if cat == "cpu_op" or cat == "user_annotation":
                name, ts = ev.get("name"), ev.get("ts")
                if name is None or ts is None:
                    for key in ("name", "ts"):
                        _need(ev, key, i)
                start = us_to_ns(ts)
                m = step_match(name)
                if m:
                    self.steps.append((start, start + us_to_ns(_need(ev, "dur", i)), int(m[1])))
                ext = args.get("External id")
                if ext is not None:
                    ix = name_ix.get(name)
                    if ix is None:
                        ix = name_ix[name] = len(self.names)
                        self.names.append(name)
                    if cat == "cpu_op":
                        add_op(ext, ix, start)
                    elif type(ext) is int:
                        self.annotations[ext] = (ix, start)
            elif cat in _RUNTIME_CATS:
                corr = args.get("correlation")
                if corr is not None:
                    ext = args.get("External id")
                    add_runtime(corr, us_to_ns(_need(ev, "ts", i)), ext if type(ext) is int else _NONE)
        self.meta = stream.meta  # every top-level key, wherever it stood
        self.ops.finish()
        self.runtime.finish()
        self.steps.sort()
        self._starts = [s[0] for s in self.steps]

    def op(self, ext: Any) -> tuple[str, int] | None:
        """(name, start) of the op (else annotation) with this External id."""
        hit = self.ops.get(ext) or (self.annotations.get(ext) if type(ext) is int else None)
        return (self.names[hit[0]], hit[1]) if hit else None

    def step_at(self, t: int) -> int | None:
        k = bisect.bisect_right(self._starts, t) - 1
        if k >= 0 and t < self.steps[k][1]:
            return self.steps[k][2]
        return None


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


def _read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    index = _Index(EventStream(path, floats="text"))
    stream = EventStream(path, floats="decimal")
    nodes = BatchBuilder("nodes", BATCH_ROWS, _NODE_COLS)
    kernels = BatchBuilder("kernels", BATCH_ROWS, _KERNEL_COLS)
    allocs = BatchBuilder("allocations", BATCH_ROWS, _ALLOC_COLS)
    node_rows, kernel_rows, alloc_rows = nodes.rows, kernels.rows, allocs.rows
    base = rank = None
    for i, ev in enumerate(stream):
        if base is None:  # header is complete once the first event arrives
            base, rank = _metadata(index, ctx)
        ph = ev.get("ph")
        if ph == "X":
            cat = ev.get("cat")
            if cat == "cpu_op":
                node_rows.append(_node(ev, i, base, rank, index))
                if len(node_rows) >= BATCH_ROWS:
                    yield from nodes.flush()
                    node_rows = nodes.rows
            elif cat in _GPU_KIND:
                kernel_rows.append(_kernel(ev, i, base, rank, index))
                if len(kernel_rows) >= BATCH_ROWS:
                    yield from kernels.flush()
                    kernel_rows = kernels.rows
        elif (ph == "i" or ph == "I") and ev.get("name") == "[memory]":
            alloc_rows.append(_allocation(ev, i, base, rank, index))
            if len(alloc_rows) >= BATCH_ROWS:
                yield from allocs.flush()
                alloc_rows = allocs.rows
    if base is None:  # no events at all
        _metadata(index, ctx)
    yield from nodes.flush()
    yield from kernels.flush()
    yield from allocs.flush()


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


def _node(ev: dict, i: int, base: int, rank: int | None, index: _Index) -> tuple:
    args = ev.get("args") or _NO_ARGS
    name, ts, dur = ev.get("name"), ev.get("ts"), ev.get("dur")
    if name is None or ts is None or dur is None:
        for key in ("name", "ts", "dur"):
            _need(ev, key, i)  # raises for the first one missing
    start = us_to_ns(ts)
    tid = ev.get("tid")
    shapes = _shapes(args.get("Input Dims"))
    known = _NODE_ARGS if shapes is None or None not in shapes else _NODE_ARGS_NESTED
    return ("CPU:0", "CPU", rank, index.step_at(start), name, name, base + start, us_to_ns(dur),
            tid if type(tid) is int else None, i, shapes, _dtypes(args.get("Input type")),
            _int(args.get("External id")),
            _params(args, known, None if type(tid) is int else {"tid": tid}))


def _kernel(ev: dict, i: int, base: int, rank: int | None, index: _Index) -> tuple:
    cat = ev["cat"]
    args = ev.get("args") or _NO_ARGS
    name, ts = ev.get("name"), ev.get("ts")
    if name is None or ts is None:
        for key in ("name", "ts"):
            _need(ev, key, i)
    start = us_to_ns(ts)
    corr = args.get("correlation")
    launch = index.runtime.get(corr)
    ext = args.get("External id")
    if ext is None and launch is not None and launch[1] != _NONE:
        ext = launch[1]
    op = index.op(ext)
    step = index.step_at(op[1]) if op else (index.step_at(launch[0]) if launch else None)
    dev = _int(args.get("device"))
    if dev is None and args.get("device") is not None:
        dev = plain(args["device"])  # no device number: `GPU:zero`, which tracedb.validate flags
    if dev is None:
        dev = ev.get("pid") if type(ev.get("pid")) is int else 0  # Kineto's GPU pid is the device
    kind = _GPU_KIND[cat]
    copy = _COPY_KIND.match(name) if kind == "memcpy" else None
    grid, block = args.get("grid"), args.get("block")
    occ = num(args.get("est. achieved occupancy %"))
    stream = _int(args.get("stream"))
    return (
        f"GPU:{dev}", f"GPU {dev}", rank, step,
        stream if stream is not None else _int(ev.get("tid")),
        kind, name, op[0] if op else None,
        base + start, us_to_ns(_need(ev, "dur", i)),
        _int(args.get("bytes")) if kind != "kernel" else None,
        copy[1] if copy else None,
        _int(corr),
        base + launch[0] if launch else None,
        plain(grid) if type(grid) is list else None,
        plain(block) if type(block) is list else None,
        _int(args.get("registers per thread")),
        _int(args.get("shared memory")),
        float(occ) if occ is not None else None,
        _params(args, _KERNEL_ARGS, {"External id": ext} if ext is not None else None),
    )


def _allocation(ev: dict, i: int, base: int, rank: int | None, index: _Index) -> tuple:
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
    return (
        f"{canon}:{idx}", f"{torch_name}:{did if did is not None else ''}", rank,
        index.step_at(ts), base + ts,
        size, "free" if size < 0 else "alloc",
        _int(args.get("Addr")),
        _int(args.get("Total Allocated")),
        _int(args.get("Total Reserved")),
        _params(args, _MEMORY_ARGS, {"tid": tid} if tid is not None else None),
    )
