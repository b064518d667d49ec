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
from tracedb.formats.jsonstream import EventStream, num, us_to_ns

NAME = "kineto"
DESCRIPTION = "PyTorch profiler (Kineto) Chrome-trace JSON, optionally gzipped"

_KINETO_KEY = re.compile(r'"(?:deviceProperties|distributedInfo|baseTimeNanoseconds)"\s*:')
_KINETO_CAT = re.compile(
    r'"cat"\s*:\s*"(?:cpu_op|kernel|cuda_runtime|cuda_driver|gpu_memcpy|gpu_memset|user_annotation)"'
)
_STEP = re.compile(r"ProfilerStep#(\d+)$")
_COPY_KIND = re.compile(r"Memcpy (\w+)")

# Rows are dicts (~1 KB each) until a batch is built: 16k rows keep that under ~20 MB a
# table, where 64k rows measured ~90 MB more peak RSS (bench/bench_kineto_memory.py).
BATCH_ROWS = 16384

_GPU_KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
# c10::DeviceType codes as `[memory]` events write them -> (canonical type, torch name).
_DEVICE_TYPE = {0: ("CPU", "cpu"), 1: ("GPU", "cuda"), 6: ("GPU", "hip"), 9: ("XLA", "xla"),
                12: ("XPU", "xpu"), 13: ("MPS", "mps"), 15: ("HPU", "hpu"), 19: ("MTIA", "mtia")}

_KERNEL_ARGS = {"device", "stream", "correlation", "External id", "grid", "block",
                "registers per thread", "shared memory", "est. achieved occupancy %", "bytes"}
_NODE_ARGS = {"External id", "Input Dims", "Input type"}
_MEMORY_ARGS = {"Addr", "Bytes", "Total Allocated", "Total Reserved", "Device Type", "Device Id"}


def sniff(head: bytes) -> bool:
    text = text_head(head).lstrip()
    if not text.startswith("{"):
        return False
    return bool(_KINETO_KEY.search(text)) or ('"traceEvents"' in text and bool(_KINETO_CAT.search(text)))


def _need(ev: dict, key: str, i: int) -> Any:
    val = ev.get(key)
    if val is None:
        raise TraceFormatError(
            f"{ev.get('cat') or ev.get('ph')} event #{i} ({str(ev.get('name'))[:60]!r}) has no '{key}'"
        )
    return val


def _jsonable(v: Any) -> Any:
    """Plain JSON types (JNum -> float) for run metadata that outlives the read."""
    return json.loads(json.dumps(v))


def _int(v: Any) -> int | None:
    n = num(v)
    return int(n) if n is not None else None


def _params(args: dict, known: set[str], extra: dict | None = None) -> str | None:
    rest = {k: v for k, v in args.items() if k not in known}
    if extra:
        rest.update(extra)
    return json.dumps(rest, separators=(",", ":")) if rest else None


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
        if self.keys and key < self.keys[-1]:
            self._sorted = False
        self.keys.append(key)
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
        k = bisect.bisect_left(self.keys, key)
        if k < len(self.keys) and self.keys[k] == key:
            return tuple(c[k] for c in self.cols)
        return None


_NONE = -(1 << 63)  # "no External id" in an int column


class _Index:
    """Pass 1: what linking rows needs, as ints and interned names (ns relative to base)."""

    def __init__(self, stream: EventStream):
        self.steps: list[tuple[int, int, int]] = []  # (start, end, N), sorted by start
        self.runtime = _IntMap(2)  # correlation -> (launch start, External id)
        self.ops = _IntMap(2)  # cpu_op External id -> (name index, op start)
        self.annotations: dict[int, tuple[int, int]] = {}  # user_annotation ids (few)
        self.names: list[str] = []
        name_ix: dict[str, int] = {}
        self.strings: dict[str, str] = {}  # pass 2 shares one copy of each repeated name
        for i, ev in enumerate(stream):
            if ev.get("ph") != "X":
                continue
            cat = ev.get("cat")
            args = ev.get("args") or {}
            if cat == "cpu_op" or cat == "user_annotation":
                name = _need(ev, "name", i)
                start = us_to_ns(_need(ev, "ts", i))
                m = _STEP.match(name)
                if m:
                    self.steps.append((start, start + us_to_ns(_need(ev, "dur", i)), int(m[1])))
                ext = args.get("External id")
                if ext is not None:
                    ix = name_ix.get(name)
                    if ix is None:
                        ix = name_ix[name] = len(self.names)
                        self.names.append(name)
                    if cat == "cpu_op":
                        self.ops.add(ext, ix, start)
                    elif type(ext) is int:
                        self.annotations[ext] = (ix, start)
            elif cat in _RUNTIME_CATS:
                corr = args.get("correlation")
                if corr is not None:
                    ext = args.get("External id")
                    self.runtime.add(corr, us_to_ns(_need(ev, "ts", i)), ext if type(ext) is int else _NONE)
        self.meta = stream.meta  # every top-level key, wherever it stood
        self.ops.finish()
        self.runtime.finish()
        self.steps.sort()
        self._starts = [s[0] for s in self.steps]

    def op(self, ext: Any) -> tuple[str, int] | None:
        """(name, start) of the op (else annotation) with this External id."""
        hit = self.ops.get(ext) or (self.annotations.get(ext) if type(ext) is int else None)
        return (self.names[hit[0]], hit[1]) if hit else None

    def intern(self, s: str) -> str:
        return self.strings.setdefault(s, s)

    def step_at(self, t: int) -> int | None:
        k = bisect.bisect_right(self._starts, t) - 1
        if k >= 0 and t < self.steps[k][1]:
            return self.steps[k][2]
        return None


def _shapes(dims: Any) -> list | None:
    if not isinstance(dims, list):
        return None
    # A TensorList input records a list of shapes: not one shape, so NULL (raw in params).
    return [d if isinstance(d, list) and all(type(x) is int for x in d) else None for d in dims]


def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    index = _Index(EventStream(path))
    stream = EventStream(path)
    nodes, kernels, allocs = (BatchBuilder(t, BATCH_ROWS) for t in ("nodes", "kernels", "allocations"))
    base = rank = None
    for i, ev in enumerate(stream):
        if base is None:  # header is complete once the first event arrives
            base, rank = _metadata(index, ctx)
        ph = ev.get("ph")
        if ph == "X":
            cat = ev.get("cat")
            if cat == "cpu_op":
                yield from nodes.append(_node(ev, i, base, rank, index))
            elif cat in _GPU_KIND:
                yield from kernels.append(_kernel(ev, i, base, rank, index))
        elif (ph == "i" or ph == "I") and ev.get("name") == "[memory]":
            yield from allocs.append(_allocation(ev, i, base, rank))
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


def _node(ev: dict, i: int, base: int, rank: int | None, index: _Index) -> dict:
    args = ev.get("args") or {}
    name = index.intern(_need(ev, "name", i))
    start = us_to_ns(_need(ev, "ts", i))
    tid = ev.get("tid")
    known = _NODE_ARGS
    shapes = _shapes(args.get("Input Dims"))
    if shapes is not None and None in shapes:
        known = _NODE_ARGS - {"Input Dims"}  # keep nested (TensorList) dims verbatim
    dtypes = args.get("Input type")
    return {
        "device": "CPU:0", "device_raw": "CPU", "rank": rank,
        "step": index.step_at(start),
        "node_name": name, "op_type": name,
        "start_ns": base + start, "duration_ns": us_to_ns(_need(ev, "dur", i)),
        "thread_id": tid if type(tid) is int else None,
        "seq": i,
        "input_shapes": shapes,
        "input_dtypes": [index.intern(str(d)) for d in dtypes] if isinstance(dtypes, list) else None,
        "correlation_id": _int(args.get("External id")),
        "params": _params(args, known, None if type(tid) is int else {"tid": tid}),
    }


def _kernel(ev: dict, i: int, base: int, rank: int | None, index: _Index) -> dict:
    cat = ev["cat"]
    args = ev.get("args") or {}
    name = index.intern(_need(ev, "name", i))
    start = us_to_ns(_need(ev, "ts", i))
    corr = args.get("correlation")
    launch = index.runtime.get(corr)
    ext = args.get("External id")
    if ext is None and launch is not None and launch[1] != _NONE:
        ext = launch[1]
    op = index.op(ext)
    step = index.step_at(op[1]) if op else (index.step_at(launch[0]) if launch else None)
    dev = _int(args.get("device"))
    if dev is None:
        dev = ev.get("pid") if type(ev.get("pid")) is int else 0  # Kineto's GPU pid is the device
    kind = _GPU_KIND[cat]
    copy = _COPY_KIND.match(name) if kind == "memcpy" else None
    grid, block = args.get("grid"), args.get("block")
    occ = num(args.get("est. achieved occupancy %"))
    stream = _int(args.get("stream"))
    return {
        "device": f"GPU:{dev}", "device_raw": f"GPU {dev}", "rank": rank, "step": step,
        "stream": stream if stream is not None else _int(ev.get("tid")),
        "kind": kind, "name": name, "node_name": op[0] if op else None,
        "start_ns": base + start, "duration_ns": us_to_ns(_need(ev, "dur", i)),
        "bytes": _int(args.get("bytes")) if kind != "kernel" else None,
        "copy_kind": copy[1] if copy else None,
        "correlation_id": _int(corr),
        "launch_start_ns": base + launch[0] if launch else None,
        "grid": grid if isinstance(grid, list) else None,
        "block": block if isinstance(block, list) else None,
        "registers_per_thread": _int(args.get("registers per thread")),
        "shared_memory_bytes": _int(args.get("shared memory")),
        "occupancy": float(occ) if occ is not None else None,
        "params": _params(args, _KERNEL_ARGS, {"External id": ext} if ext is not None else None),
    }


def _allocation(ev: dict, i: int, base: int, rank: int | None) -> dict:
    args = ev.get("args")
    if not isinstance(args, dict):
        raise TraceFormatError(f"[memory] event #{i} has no 'args'")
    size = _int(args.get("Bytes"))
    if size is None:
        raise TraceFormatError(f"[memory] event #{i} has no numeric 'Bytes'")
    dtype, did = args.get("Device Type"), _int(args.get("Device Id"))
    if isinstance(dtype, str):  # some writers spell the type out
        canon, torch_name = dtype.upper().replace("CUDA", "GPU"), dtype.lower()
    else:
        canon, torch_name = _DEVICE_TYPE.get(_int(dtype), (f"DEVICE{dtype}", f"device{dtype}"))
    idx = did if did is not None and did >= 0 else 0  # CPU events write Device Id -1
    tid = ev.get("tid")
    return {
        "device": f"{canon}:{idx}", "device_raw": f"{torch_name}:{did if did is not None else ''}",
        "rank": rank,
        "ts_ns": base + us_to_ns(_need(ev, "ts", i)),
        "bytes": size, "kind": "free" if size < 0 else "alloc",
        "address": _int(args.get("Addr")),
        "total_allocated_bytes": _int(args.get("Total Allocated")),
        "total_reserved_bytes": _int(args.get("Total Reserved")),
        "params": _params(args, _MEMORY_ARGS, {"tid": tid} if tid is not None else None),
    }
