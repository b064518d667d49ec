"""TensorFlow RunMetadata / StepStats, text or binary protobuf (gzip handled by base).

`/job:...` devices hold framework ops (-> nodes, tensors, allocations); numbered
`/device:GPU:N/stream:K` devices hold GPU activity (-> kernels). `/stream:all` and
`/memcpy` only repeat rows of the numbered streams (the seed trace checks this), so
they are skipped and every GPU activity lands once.

Text is read by `pbtext` (the descriptors of our .proto files, lines through a cache
of tokens, `pbtext.Plain` messages, each NodeExecStats yielded as it closes:
`_text_dev_stats`), fed 1 MiB of decoded text at a time (`_text_chunks`): 17 MB of
StepStats text parses ~16x faster than with `text_format.Parse` (10x when its
timestamps never repeat), and reads into Arrow ~7.4x faster (5.6x; bench/bench_tf_text.py,
load 5-12); an 80 MB text reads in the memory of a 10 MB one (tests/test_streaming.py).
`text_format.Parse` stays the fallback for
anything outside the common subset and so gives the same messages and the same errors;
it needs the whole text, so only files under $TRACEDB_MAX_WHOLE_FILE_BYTES (2 GiB) take
it (a larger one is an error naming the limit).

Binary is read by `pbwire`: pass 1 walks RunMetadata -> StepStats -> DeviceStepStats on
the wire and parses each device's own fields (`device`, and `thread_names`, which come
after its node_stats); pass 2 parses the NodeExecStats a 256 KB run at a time (those of
`/stream:all` and `/memcpy` not at all). Memory:
one run, not the file (10 -> 40 MB reads in the same peak RSS, tests/test_streaming.py).
100 MB of node_stats (bench/bench_stream.py): peak RSS 342 MB vs 567 MB for
`ParseFromString` + the same rows (18 vs 323 MB with 2048-row batches), CPU 1.13-1.21x
(walking every element twice in Python); 0.97-1.15x on the 86-546 KB seeds.
RunMetadata's graphs are walked past unparsed.

Rows are built a column at a time (`base.ColumnBuilder`, columns in `_*_COLS` order): a
run of one device's NodeExecStats (a binary run as `pbwire` parses it; text nodes joined
until `_RUN_NODES`, `_runs`) has each field read by one comprehension over its nodes, or
over all their outputs, memory entries and allocation records at once, and each column
becomes one `pa.array`. Attribute access on a upb message costs more than the rest of a
row, so each field is read once (an output's shape and dtype serve its tensor row and its
node's lists); dtype names, labels (`name = Op(...)`, parsed once per distinct label) and
a stream row's kernel name, kind and copy kind (once per distinct name and label) are
remembered, and the params JSON is spelt out as `json.dumps(sort_keys=True)` writes it
(tests/test_tf_columns.py checks every column against an oracle from the messages). Text
gives Plain messages (a dict look-up a field); the row code reads both alike.
"""

from __future__ import annotations

import codecs
import json
import re
from json.encoder import encode_basestring_ascii  # json.dumps' str encoder (ensure_ascii)
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa
from google.protobuf import text_format

from tracedb import devices
from tracedb.errors import TraceFormatError
from tracedb.formats import pbtext, pbwire
from tracedb.formats.base import (HEAD_BYTES, ColumnBuilder, ReadContext, copy_kind, flush, open_trace, read_all,
                                  read_head, text_head, varint)
from tracedb.proto import run_metadata_pb2, step_stats_pb2, types_pb2

NAME = "tf_stepstats"
DESCRIPTION = "TensorFlow RunMetadata / StepStats (text or binary protobuf, optionally gzipped)"

# Text format: optional comments/blank lines, then the first field of RunMetadata or StepStats.
_TEXT_COMMENTS = re.compile(r"\A(?:\s|#[^\n]*(?:\n|\Z))*")
_TEXT_START = re.compile(r"(step_stats|dev_stats)\s*:?\s*[{<]")

# Label `[alloc summary] name = Op(in1, in2, ^ctrl)`; the bracket prefix is TF's memory note.
_LABEL = re.compile(r"^(?:\[[^\]]*\]\s*)?(?P<name>\S+) = (?P<op>[^(\s]+)\((?P<args>.*)\)\s*$", re.S)
_COPY = re.compile(r"^(?P<kind>MEMCPY|MEMSET)(?P<dir>[A-Z]to[A-Z])?")
_BYTES = re.compile(r"(\d+) bytes")

_INT64_MAX = 2**63 - 1


# ---------------------------------------------------------------- sniffing


def _varint(buf: bytes, pos: int) -> tuple[int, int] | None:
    """The protobuf varint at pos -> (value, next pos), None if cut or too long."""
    try:
        return varint(buf, pos)
    except IndexError:
        return None


def _binary_depth(head: bytes) -> int | None:
    """Number of nested `field 1, length-delimited` headers before the first device string.

    StepStats -> dev_stats -> device is 2 deep, RunMetadata -> step_stats -> dev_stats ->
    device is 3 deep. Each inner length must fit in its parent and the device string
    must look like a TF device (`/...:...`, printable). None when it is neither.
    """
    pos, limit = 0, None
    for depth in (1, 2, 3):
        if pos >= len(head) or head[pos] != 0x0A:
            return None
        got = _varint(head, pos + 1)
        if got is None:
            return None
        length, pos = got
        if length == 0 or (limit is not None and pos + length > limit):
            return None
        limit = pos + length
        if depth >= 2 and head[pos : pos + 1] == b"/":
            dev = head[pos : min(limit, len(head))]
            if 2 <= length <= 512 and b":" in dev and all(0x20 < c < 0x7F for c in dev):
                return depth
            return None
    return None


def _text_kind(head: bytes) -> str | None:
    """'step_stats' (RunMetadata) or 'dev_stats' (StepStats) for text format, else None."""
    text = text_head(head)
    if not text:
        return None
    m = _TEXT_START.match(text, _TEXT_COMMENTS.match(text).end())
    return m.group(1) if m else None


def sniff(head: bytes) -> bool:
    return _text_kind(head) is not None or _binary_depth(head) is not None


# ---------------------------------------------------------------- parsing


_STREAM = "tracedb.tf.StepStats.dev_stats"
# Text: the fields whose elements pbtext yields as they close.
_STREAMS = (_STREAM, "tracedb.tf.DeviceStepStats.node_stats")
_DEVICE = step_stats_pb2.DeviceStepStats.DESCRIPTOR
_REPEATS = ("all", "memcpy")  # device streams that only repeat the numbered streams' rows
_BINARY = "bad or truncated TF binary protobuf"
# Binary: walked on the wire (`pbwire`), one run of NodeExecStats parsed at a time.
_DEV = pbwire.Spec(step_stats_pb2.DeviceStepStats, "dev_stats", stream=(2, "node_stats"))
_STEP_STATS = pbwire.Spec(step_stats_pb2.StepStats, "", nested={1: _DEV})
# RunMetadata's other fields (cost and partition graphs) are walked past unparsed.
_RUN_METADATA = pbwire.Spec(run_metadata_pb2.RunMetadata, "", keep=False, nested={
    1: pbwire.Spec(step_stats_pb2.StepStats, "step_stats", nested={1: _DEV})})


def _dev_stats(path: Path) -> Iterator[tuple[Any, Any]]:
    """(DeviceStepStats, a run of its NodeExecStats) pairs of a text or binary trace, a
    device's runs in order and next to each other.

    Binary: `pbwire` walks the outer messages and parses the NodeExecStats a run at a time
    (the device's other fields, thread_names included, are read first), so memory holds
    one run, not the file. Text: `_text_dev_stats`.
    """
    head = read_head(path)
    kind = _text_kind(head[:HEAD_BYTES])
    if kind is None:
        yield from _binary(path, head)
    else:
        yield from _text_dev_stats(path, run_metadata_pb2.RunMetadata if kind == "step_stats"
                                   else step_stats_pb2.StepStats)


def _text_dev_stats(path: Path, root: type) -> Iterator[tuple[Any, Any]]:
    """Text goes through `pbtext` in chunks (descriptor-driven, into `pbtext.Plain`
    messages), each NodeExecStats yielded as it closes with its device so far (its name
    known; TF writes it first), so memory and the garbage collector see one node at a
    time, not a device's thousands (a device held whole cost 3 extra full collections on
    17 MB, 0.2 s). Held until the device closes: a node that needs the device's
    thread_names (TF writes them after the nodes) and those after it, or all of the
    device's if its name comes late. Where pbtext gives up, `text_format.Parse` reads
    the whole text (if under $TRACEDB_MAX_WHOLE_FILE_BYTES) and the nodes not yet
    yielded come from it: the same messages, and text_format's error for bad input.
    """
    devices_done = sent = nodes = 0  # devices closed, nodes of the open one yielded, all nodes
    held: list[Any] = []
    try:
        for parent, element in pbtext.iter_plain(_text_chunks(path), root.DESCRIPTOR, _STREAMS):
            if element.DESCRIPTOR is _DEVICE:  # a device closed, its nodes yielded or held
                yield element, held
                devices_done, sent, held = devices_done + 1, 0, []
            elif held or element.thread_id or not parent.HasField("device"):
                nodes += 1
                held.append(element)
            else:
                nodes, sent = nodes + 1, sent + 1
                yield parent, (element,)
    except pbtext.Unsupported:
        stats = _parse_text(_whole_text(path), root())
        rest = list(stats.dev_stats)[devices_done:]
        if not (nodes or any(d.node_stats for d in rest)):
            raise TraceFormatError("TF step stats have no node_stats") from None
        for i, dev in enumerate(rest):
            yield dev, dev.node_stats[sent:] if i == 0 else dev.node_stats
        return
    if not nodes:
        raise TraceFormatError("TF step stats have no node_stats")


CHUNK_BYTES = 1 << 20  # text read (and decoded) at a time


def _text_chunks(path: Path) -> Iterator[str]:
    """The decoded text, CHUNK_BYTES at a time (at most $TRACEDB_MAX_DECOMPRESSED_BYTES if
    gzipped). Bad UTF-8 gives the message `bytes.decode` gives for the whole text."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    try:
        with open_trace(path) as f:
            while data := f.read(CHUNK_BYTES):
                yield _decode(decoder, data, offset, False)
                offset += len(data)
            yield _decode(decoder, b"", offset, True)
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise TraceFormatError(f"truncated or corrupt gzip: {e}") from e


def _decode(decoder: Any, data: bytes, offset: int, final: bool) -> str:
    """decoder.decode(data); bad UTF-8 -> the error `bytes.decode` gives for the whole text
    (positions count from the file's start; `offset`: bytes given to the decoder before)."""
    pending = len(decoder.getstate()[0])  # bytes of a character cut by the last chunk
    try:
        return decoder.decode(data, final)
    except UnicodeDecodeError as e:
        start, end = e.start + offset - pending, e.end + offset - pending
        where = (f"byte 0x{e.object[e.start]:02x} in position {start}" if end == start + 1
                 else f"bytes in position {start}-{end - 1}")
        raise TraceFormatError(f"bad or truncated TF text protobuf: '{e.encoding}' codec can't decode "
                               f"{where}: {e.reason}") from e


def _whole_text(path: Path) -> str:
    """The whole text for `text_format.Parse`: only files under $TRACEDB_MAX_WHOLE_FILE_BYTES."""
    try:
        data = read_all(path)
    except TraceFormatError as e:
        raise TraceFormatError(f"TF text protobuf uses syntax outside what tracedb streams (pbtext), "
                               f"which is parsed whole, and the file is too large for that: {e}") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"bad or truncated TF text protobuf: {e}") from e


def _parse_text(text: str, msg: Any) -> step_stats_pb2.StepStats:
    try:
        # Unknown fields (newer TF, graphs in the placeholders) are skipped, not errors.
        text_format.Parse(text, msg, allow_unknown_field=True)
    except text_format.ParseError as e:
        raise TraceFormatError(f"bad or truncated TF text protobuf: {e}") from e
    except RecursionError:
        raise TraceFormatError("bad TF text protobuf: messages nested too deeply") from None
    return msg.step_stats if isinstance(msg, run_metadata_pb2.RunMetadata) else msg


def _binary(path: Path, head: bytes) -> Iterator[tuple[Any, Any]]:
    depth = _binary_depth(head)
    if depth is None:
        raise TraceFormatError("not a TF RunMetadata/StepStats protobuf")
    spec = _RUN_METADATA if depth == 3 else _STEP_STATS
    with open_trace(path) as f:
        tree = pbwire.index(f, spec, _BINARY)
    devs = [d for s in tree.children for d in s.children] if depth == 3 else tree.children
    if not any(d.count for d in devs):
        raise TraceFormatError("TF step stats have no node_stats")
    with open_trace(path) as f:
        for node, node_stats in pbwire.stream(f, spec, tree, _BINARY, want=_wanted):
            yield node.header, node_stats


def _wanted(node: pbwire.Node) -> bool:
    """Devices whose rows `read` keeps: `/stream:all` and `/memcpy` ones are skipped unparsed."""
    return devices.parse_tf_device(node.header.device)[1] not in _REPEATS


# Times: `<field>_nanos` when set, else `<field>_micros` * 1000 (TF writes both when it
# can); written out per field below as `ns.x_nanos or ns.x_micros * 1000`.

_DTYPES: dict[int, str | None] = {}


def _dtype(value: int) -> str | None:
    """DT_FLOAT -> float32, DT_HALF_REF -> float16_ref (TF's Python names)."""
    try:
        return _DTYPES[value]
    except KeyError:
        name = _dtype_name(value)
        if len(_DTYPES) < 1024:  # the enum has ~50 values; junk files may have more
            _DTYPES[value] = name
        return name


def _dtype_name(value: int) -> str | None:
    try:
        name = types_pb2.DataType.Name(value)
    except ValueError:
        return f"dtype_{value}"
    if name == "DT_INVALID":
        return None
    name = name[3:].lower()
    ref = name.endswith("_ref")
    base = name[:-4] if ref else name
    base = {"float": "float32", "double": "float64", "half": "float16"}.get(base, base)
    return base + ("_ref" if ref else "")


# List values in columns are tuples: a tuple of strings or numbers leaves the garbage
# collector's view at its first collection (a list stays, and rows live until their batch
# is built: 17 MB of text, 0.03 s of collections less).


_MEMO_MAX = 1 << 16  # distinct labels (or kernel names) a read remembers before starting over


def _remembered(memo: dict, key: Any, make: Callable[..., Any], *args: Any) -> Any:
    """memo[key], made by make(*args) the first time (callers try `memo.get(key)` first: the
    values are non-empty tuples): a read's memo of values that repeat (a step's graph
    repeats every step), started over past _MEMO_MAX entries."""
    got = memo.get(key)
    if got is None:
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        got = memo[key] = make(*args)
    return got


def _parse_label(label: str) -> tuple[str | None, tuple[str, ...] | None, tuple[str, ...] | None]:
    """`name = Op(a, ^b)` -> ('Op', ('a',), ('b',)); (None, None, None) without `=`."""
    m = _LABEL.match(label)
    if not m:
        return None, None, None
    args = [a for a in map(str.strip, m["args"].split(",")) if a]
    return (m["op"], tuple([a for a in args if not a.startswith("^")]),
            tuple([a[1:] for a in args if a.startswith("^")]))


def _label_json(label: str) -> str | None:
    """A kernel row's params, json.dumps({"timeline_label": label}) spelt out; None for ""."""
    return '{"timeline_label": ' + encode_basestring_ascii(label) + "}" if label else None


_SINGLE_REFERENCE = json.dumps({"has_single_reference": True})


def _int64(v: int) -> int | None:
    return v if v <= _INT64_MAX else None


_NODE_COLS = ("device", "device_raw", "step", "node_name", "op_type", "start_ns", "duration_ns",
              "thread_id", "seq", "op_start_ns", "op_end_ns", "scheduled_ns", "timeline_label",
              "inputs", "control_inputs", "outputs", "output_shapes", "output_dtypes",
              "temp_memory_bytes", "persistent_memory_bytes", "params")
_KERNEL_COLS = ("device", "device_raw", "step", "stream", "kind", "name", "node_name",
                "start_ns", "duration_ns", "bytes", "copy_kind", "params")
_TENSOR_COLS = ("device", "device_raw", "step", "node_name", "slot", "dtype", "shape",
                "requested_bytes", "allocated_bytes", "allocator", "allocation_id", "ptr", "params")
_ALLOC_COLS = ("device", "device_raw", "step", "allocator", "node_name", "ts_ns", "bytes", "kind")
_MEMORY_KEYS = ("allocator_name", "total_bytes", "peak_bytes", "live_bytes", "allocator_bytes_in_use")
_BATCH_ROWS = 65536


_RUN_NODES = 256  # at least so many nodes of one device converted together (text yields them one by one)


def _runs(path: Path) -> Iterator[tuple[Any, list[Any]]]:
    """(DeviceStepStats, NodeExecStats) of `_dev_stats`, a device's consecutive runs joined
    until they hold _RUN_NODES nodes, so that each field of a run is read by one
    comprehension (text yields nodes one at a time; a binary run of 256 KB is already
    hundreds, and is not held longer: memory stays one run). A node's row needs its
    device's thread_names only if it has a thread id, and such a node comes with its closed
    device (`_text_dev_stats`)."""
    last, held = None, []
    for dev_stats, node_stats in _dev_stats(path):
        if dev_stats is not last or len(held) >= _RUN_NODES:
            if held:
                yield last, held
            last, held = dev_stats, []
        held.extend(node_stats)
    if held:
        yield last, held


def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    nodes = ColumnBuilder("nodes", _BATCH_ROWS, _NODE_COLS)
    kernels = ColumnBuilder("kernels", _BATCH_ROWS, _KERNEL_COLS)
    tensors = ColumnBuilder("tensors", _BATCH_ROWS, _TENSOR_COLS)
    allocs = ColumnBuilder("allocations", _BATCH_ROWS, _ALLOC_COLS)
    step, seq = ctx.file_ordinal, 0
    labels: dict[str, tuple] = {}  # label -> _parse_label's
    kernel_names: dict[tuple[str, str], tuple] = {}  # (node name, label) -> _kernel_names'
    for dev_stats, nss in _runs(path):
        raw = dev_stats.device
        dev, stream = devices.parse_tf_device(raw)  # also legacy `/gpu:0` names
        if stream in _REPEATS:
            continue  # repeats of numbered-stream rows
        if stream is not None and stream.isdigit():
            yield from kernels.extend(_kernel_cols(nss, dev, raw, step, int(stream), kernel_names))
            continue
        # Any other device (normally /job:...) holds framework ops.
        node_cols, tensor_cols, alloc_cols = _node_cols(nss, dev_stats.thread_names, dev, raw, step, seq, labels)
        seq += len(nss)
        yield from nodes.extend(node_cols)
        yield from tensors.extend(tensor_cols)
        yield from allocs.extend(alloc_cols)
    yield from flush(nodes, kernels, tensors, allocs)


def _node_cols(nss: list[Any], thread_names: Any, dev: str, raw: str, step: int, seq: int,
               memo: dict[str, tuple]) -> tuple[tuple, tuple, tuple]:
    """The nodes, tensors and allocations columns of a run of one device's NodeExecStats:
    each field read by one comprehension over the run's nodes, or over all their outputs,
    memory entries or allocation records at once."""
    n = len(nss)
    names = [ns.node_name for ns in nss]
    labels = [ns.timeline_label for ns in nss]
    op_types, inputs, controls = zip(*[memo.get(label) or _remembered(memo, label, _parse_label, label)
                                       for label in labels])
    starts = [ns.all_start_nanos or ns.all_start_micros * 1000 for ns in nss]
    tids = [ns.thread_id for ns in nss]
    mems = [ns.memory_stats if ns.HasField("memory_stats") else None for ns in nss]
    # Outputs: the tensors rows in file order; each node's lists by slot.
    node_outs = [ns.output for ns in nss]
    counts = [len(outs) for outs in node_outs]
    flat = [o for outs in node_outs for o in outs]
    t_name = [name for name, k in zip(names, counts) for _ in range(k)]
    t_slot = [o.slot for o in flat]
    descs = [o.tensor_description for o in flat]
    t_dtype = [_dtype(td.dtype) for td in descs]
    t_shape = [None if sh.unknown_rank else tuple([d.size for d in sh.dim]) for sh in [td.shape for td in descs]]
    ads = [td.allocation_description if td.HasField("allocation_description") else None for td in descs]
    t_ptr = [_int64(ptr) if ptr else None for ptr in [ad.ptr if ad is not None else 0 for ad in ads]]
    tensor_cols = (
        t_name, t_slot, t_dtype, t_shape,
        [ad.requested_bytes if ad is not None else None for ad in ads],
        [ad.allocated_bytes if ad is not None else None for ad in ads],
        [(ad.allocator_name or None) if ad is not None else None for ad in ads],
        [ad.allocation_id if ad is not None else None for ad in ads],
        t_ptr,
        [_SINGLE_REFERENCE if ad is not None and ad.has_single_reference else None for ad in ads],
    )
    outputs, shapes, dtypes = [], [], []
    i = 0
    for name, k in zip(names, counts):
        if k == 0:
            outputs.append(None)
            shapes.append(None)
            dtypes.append(None)
            continue
        slots, out_shapes, out_dtypes = t_slot[i:i + k], t_shape[i:i + k], t_dtype[i:i + k]
        i += k
        if k > 1 and slots != sorted(slots):  # by slot, stable
            order = sorted(range(k), key=slots.__getitem__)
            slots = [slots[j] for j in order]
            out_shapes = [out_shapes[j] for j in order]
            out_dtypes = [out_dtypes[j] for j in order]
        outputs.append(tuple([f"{name}:{slot}" for slot in slots]))
        shapes.append(tuple(out_shapes))
        dtypes.append(tuple(out_dtypes))
    # Memory: each entry's params JSON, and its allocation records as allocations rows.
    node_mems = [ns.memory for ns in nss]
    flat_mems = [m for ms in node_mems for m in ms]
    mem_json = [_memory_json(m) for m in flat_mems]
    mem_names = [name for name, ms in zip(names, node_mems) for _ in range(len(ms))]
    mem_recs = [m.allocation_records for m in flat_mems]
    recs = [r for rs in mem_recs for r in rs]
    a_name = [name for name, rs in zip(mem_names, mem_recs) for _ in range(len(rs))]
    a_allocator = [allocator for allocator, rs in zip([m.allocator_name or None for m in flat_mems], mem_recs)
                   for _ in range(len(rs))]
    a_bytes = [r.alloc_bytes for r in recs]
    # params: memory, referenced_tensors, thread_name (sorted keys), those with a value
    refs = [len(ns.referenced_tensor) for ns in nss]
    params = []
    i = 0
    for ms, ref, tid in zip(node_mems, refs, tids):
        parts = []
        if ms:
            k = len(ms)
            parts.append('"memory": [' + ", ".join(mem_json[i:i + k]) + "]")
            i += k
        if ref:
            parts.append(f'"referenced_tensors": {ref}')
        if tid and (thread_name := thread_names.get(tid)):
            parts.append('"thread_name": ' + encode_basestring_ascii(thread_name))
        params.append("{" + ", ".join(parts) + "}" if parts else None)
    node_cols = (
        [dev] * n, [raw] * n, [step] * n, names, op_types, starts,
        [ns.all_end_rel_nanos or ns.all_end_rel_micros * 1000 for ns in nss],
        [t or None for t in tids],  # 0 = not recorded
        range(seq, seq + n),
        [s + (ns.op_start_rel_nanos or ns.op_start_rel_micros * 1000) for s, ns in zip(starts, nss)],
        [s + (ns.op_end_rel_nanos or ns.op_end_rel_micros * 1000) for s, ns in zip(starts, nss)],
        [(ns.scheduled_nanos or ns.scheduled_micros * 1000) or None for ns in nss],
        [label or None for label in labels],
        inputs,
        [c or None for c in controls],
        outputs, shapes, dtypes,
        [m.temp_memory_size if m else None for m in mems],
        [m.persistent_memory_size if m else None for m in mems],
        params,
    )
    k, m = len(t_name), len(a_name)
    return (node_cols, ([dev] * k, [raw] * k, [step] * k, *tensor_cols),
            ([dev] * m, [raw] * m, [step] * m, a_allocator, a_name, [r.alloc_micros * 1000 for r in recs], a_bytes,
             ["free" if b < 0 else "alloc" for b in a_bytes]))


def _memory_json(m: Any) -> str:
    """One AllocatorMemoryUsed's non-zero `_MEMORY_KEYS` as json.dumps(sort_keys=True) writes them."""
    in_use, name, live, peak, total = (m.allocator_bytes_in_use, m.allocator_name, m.live_bytes, m.peak_bytes,
                                       m.total_bytes)
    parts = []
    if in_use:
        parts.append(f'"allocator_bytes_in_use": {in_use:d}')
    if name:
        parts.append('"allocator_name": ' + encode_basestring_ascii(name))
    if live:
        parts.append(f'"live_bytes": {live:d}')
    if peak:
        parts.append(f'"peak_bytes": {peak:d}')
    if total:
        parts.append(f'"total_bytes": {total:d}')
    return "{" + ", ".join(parts) + "}"


def _kernel_cols(nss: list[Any], dev: str, raw: str, step: int, stream: int,
                 memo: dict[tuple[str, str], tuple]) -> tuple:
    """The kernels columns of a run of one GPU stream's NodeExecStats."""
    n = len(nss)
    named = [memo.get(key) or _remembered(memo, key, _kernel_names, *key)
             for key in zip([ns.node_name for ns in nss], [ns.timeline_label for ns in nss])]
    kinds, names, node_names, nbytes, copies, params = zip(*named)
    return ([dev] * n, [raw] * n, [step] * n, [stream] * n, kinds, names, node_names,
            [ns.all_start_nanos or ns.all_start_micros * 1000 for ns in nss],
            [ns.all_end_rel_nanos or ns.all_end_rel_micros * 1000 for ns in nss],
            nbytes, copies, params)


def _kernel_names(full_name: str, label: str) -> tuple:
    """(kind, name, node_name, bytes, copy_kind, params) of a stream row named `full_name`."""
    # Stream rows are named `op/name:KernelName`; TF node names never contain ':', kernel
    # names may (`void foo::bar<...>`), so split at the first one.
    node_name, sep, name = full_name.partition(":")
    if not sep:
        node_name, name = None, full_name
    m = _COPY.match(label) or _COPY.match(name)
    kind = {"MEMCPY": "memcpy", "MEMSET": "memset"}[m["kind"]] if m else "kernel"
    if m:  # a copy is named by its kind, also when TF names the op twice: `op:Pack:MEMCPYDtoD`
        name = name.rsplit(":", 1)[-1]
    nbytes = _BYTES.search(label) if m else None
    return (kind, name, node_name, int(nbytes.group(1)) if nbytes else None,
            copy_kind(m["dir"]) if m and kind == "memcpy" else None, _label_json(label))
