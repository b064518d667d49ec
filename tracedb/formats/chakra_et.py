"""PyTorch execution traces (Chakra ET JSON, `torch.profiler.ExecutionTraceObserver`), plain or gzipped.

The format. One JSON object: `schema` ("1.0.1" to "1.1.1-chakra.0.0.4"), `pid`, `time`,
`start_ts`, `finish_ts` and `nodes`, one per recorded op (record function) of the
process, none timed. Each node has an `id` (assigned as ops start: execution order), a
`name`, its enclosing node (`ctrl_deps`, `parent` before 1.0.2), and its arguments as
parallel lists of values, shapes, types and (from 1.0.3) strides: under `inputs` /
`outputs` objects (`values`, `shapes`, `types`, `strides`) from 1.0.2 on, as
`inputs`, `input_shapes`, `input_types`, ... before. Its attributes (`rf_id`, `tid`,
`op_schema`, `seq_id`, `fw_parent`, `scope`, ...) are node keys up to 1.0.1 and an
`attrs` list of {name, type, value} after. A tensor argument (type `Tensor(<dtype>)`)
is the tuple `[tensor id, storage id, offset, element count, element size, device]`; a
`GenericList[Tensor(..),..]` argument is a list of such tuples. The root
`[pytorch|profiler|execution_trace|process]` node and one `...|thread]` node per thread
(`execution_graph` before 1.0.2) are markers, not ops.

Where it lands.
- `nodes`: every node, untimed (start_ns NULL), device CPU:0: `seq` = the node id,
  `parent_seq` = its enclosing node, `thread_id` = the trace's own thread number
  (`tid`, not the OS thread), `rf_id`, `process_id` = the trace's pid, `op_schema`,
  `inputs` / `outputs` = each argument's value as compact JSON, shapes (a flat shape,
  else NULL) and dtypes (a tensor's dtype, else the argument's type), the other
  attributes and the strides in `params`. `step` = N of the nearest enclosing
  `ProfilerStep#N` node (NULL on threads outside it, e.g. autograd's).
- `tensors`: one row per *value* of a tensor. A tensor is its whole tuple (an id alone
  may be reused by PyTorch's observer after a free). Walking the nodes in id order, a
  node first reads its inputs and then writes its outputs: each write starts a new value
  (`node_seq`, `node_name`, `slot` of the writer; a tensor written twice by one node
  counts once), each read adds the reader to the current value's `consumer_seqs`; a
  tensor read before any write gets a value with `node_seq` NULL (a parameter, an input).
  Nested ops write the same tensor (aten::linear and its aten::addmm): the inner op,
  which starts later, holds the readers. An op also writes the arguments its schema
  marks mutable (`Tensor(a!)`) that it does not return (`aten::_foreach_add_(Tensor(a!)[]
  self, ...) -> ()`, the optimizer's update): such a value has `slot` NULL and
  `params.mutated_input` = the argument's position. Columns: `tensor_id`, `storage_id`,
  `storage_offset` (elements), `numel`, `element_bytes`, `dtype`, `shape`, `strides`,
  `device` (cuda:N -> GPU:N); `params` names the list index of a tensor inside a list
  argument. So a query follows data from op to op: `unnest(consumer_seqs)` joins
  `nodes.seq` of the same source file (sql/tensor_flow.sql).
- The file's header (schema, pid, time, start_ts, finish_ts) goes to `files.metadata`.

Joining the Kineto trace of the same steps. Readers parse one file each, maybe in other
processes (`tracedb.workers`), and a run's files land together; so the join is a key
column on `nodes` that both readers fill: `rf_id`, the record-function id, which PyTorch
2.1+ writes as the Kineto op's `Record function id` arg and the ET node's `rf_id`, and
`process_id` (Kineto's pid, the ET's pid). The join is plain SQL:
`nodes e JOIN nodes k USING (run_id, process_id, rf_id)` with `e.source_format =
'chakra_et'` and `k.source_format = 'kineto'`: the ET gives the op's tensors and schema,
Kineto its time, step and kernels. For older pairs, whose Kineto ops carry no record
function id, a run-level step (`tracedb.etlink`, run by the ingest once a run's files are
read) fills the Kineto rows' `rf_id` from the matched ET node by `match_ops` below, the
fallback of Chakra's trace linker (mlcommons/chakra `src/trace_link/`, which before
`rf_id` matched each ET op, in id order, to the nearest Kineto op of the same name in
the step's Kineto ops); the same join then works for both.

`match_ops`, per process: ops are compared per thread, the ET's in id order, Kineto's
by start (the outer op first). The anchor is the first ET op whose name and autograd
sequence number (`seq_id`) equal a Kineto op's (`Sequence number`): the number is
process-wide, so it picks the right step of a Kineto trace that spans many steps where
names alone repeat every step. From the anchor, forward and backward, each ET op takes
the next Kineto op of its name within MATCH_WINDOW ops (else it stays unmatched and the
Kineto cursor stays). Without a sequence number, each occurrence of the first ET name
found in the Kineto thread (at most MAX_STARTS) is tried as the start and the most
matches win (the earliest on a tie). Each ET thread pairs with the Kineto thread it
matches most (greedily, most matches first). On the fixtures' PyTorch 2.11 pair this
reproduces all 282 `Record function id` pairs with the ids withheld.

Bounded input: the document is parsed whole (`read_all`, $TRACEDB_MAX_WHOLE_FILE_BYTES):
the tensors' values need every node anyway, and an ET is a few MB for a model's step.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import msgspec

from tracedb.errors import TraceFormatError
from tracedb.formats.base import BatchBuilder, ReadContext, read_all, text_head
from tracedb.formats.jsonstream import dumps_compact
from tracedb.formats.kineto import _TORCH_DTYPES

NAME = "chakra_et"
DESCRIPTION = "PyTorch execution trace (Chakra ET JSON, schema 1.0.x-1.1.x), optionally gzipped"

_SCHEMA = re.compile(r'"schema"\s*:\s*"(\d+)\.(\d+)\.\d+')
_ET_MARK = re.compile(r'"nodes"\s*:\s*\[|"ctrl_deps"\s*:|"rf_id"|\[pytorch\|profiler\|execution_(?:trace|graph)\|')
_STEP = re.compile(r"ProfilerStep#(\d+)$")
_MARKER = "[pytorch|profiler|execution_"
_TENSOR_TYPE = re.compile(r"^Tensor\((.*)\)$")
# Attributes with a column of their own (the others go to `params`).
_ATTR_COLS = ("rf_id", "tid", "op_schema")
_OLD_ARG_KEYS = ("inputs", "input_shapes", "input_types", "input_strides",
                 "outputs", "output_shapes", "output_types", "output_strides")
_NODE_KEYS = ("id", "name", "parent", "ctrl_deps", "attrs") + _OLD_ARG_KEYS

# match_ops: how far ahead of the cursor a Kineto op of the ET op's name is looked for,
# and how many starts are tried for a thread without sequence numbers.
MATCH_WINDOW = 64
MAX_STARTS = 256

_NODE_COLS = ("device", "device_raw", "step", "node_name", "op_type", "thread_id", "seq", "parent_seq",
              "rf_id", "process_id", "op_schema", "inputs", "outputs", "input_shapes", "input_dtypes",
              "output_shapes", "output_dtypes", "params")
_TENSOR_COLS = ("device", "device_raw", "step", "node_name", "slot", "tensor_id", "storage_id",
                "storage_offset", "numel", "element_bytes", "dtype", "shape", "strides", "node_seq",
                "consumer_seqs", "params")


def sniff(head: bytes) -> bool:
    text = text_head(head).lstrip()
    return text.startswith("{") and bool(_SCHEMA.search(text)) and bool(_ET_MARK.search(text))


def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, Any]]:
    doc = _document(path)
    nodes = [_Node.of(raw, i) for i, raw in enumerate(doc["nodes"])]
    nodes.sort(key=lambda n: n.id)
    ctx.metadata["execution_trace"] = {k: doc[k] for k in ("schema", "pid", "time", "start_ts", "finish_ts")
                                       if k in doc}
    pid = doc.get("pid") if type(doc.get("pid")) is int else None
    steps = _steps(nodes)
    out = BatchBuilder("nodes", 65536, _NODE_COLS)
    for n in nodes:
        yield from out.append(_node_row(n, steps.get(n.id), pid))
    yield from out.flush()
    tensors = BatchBuilder("tensors", 65536, _TENSOR_COLS)
    for row in _tensor_values(nodes, steps):
        yield from tensors.append(row)
    yield from tensors.flush()


def _document(path: Path) -> dict:
    try:
        doc = msgspec.json.decode(read_all(path))
    except msgspec.DecodeError as e:
        raise TraceFormatError(f"not valid JSON: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise TraceFormatError("not an execution trace: no `nodes` list at the top level")
    version = doc.get("schema")
    m = _SCHEMA.match(f'"schema": "{version}"') if isinstance(version, str) else None
    if not m or (int(m[1]), int(m[2])) not in ((1, 0), (1, 1)):
        raise TraceFormatError(f"execution trace schema {version!r} is not supported (1.0.x to 1.1.x are)")
    return doc


class _Node:
    """One ET node in either layout: id, name, parent, attributes, argument lists."""

    __slots__ = ("id", "name", "parent", "attrs", "inputs", "outputs")

    @classmethod
    def of(cls, raw: Any, i: int) -> "_Node":
        if not isinstance(raw, dict):
            raise TraceFormatError(f"node #{i}: expected an object, got {type(raw).__name__}")
        self = cls()
        self.id, self.name = raw.get("id"), raw.get("name")
        if type(self.id) is not int:
            raise TraceFormatError(f"node #{i}: `id` is missing or not an integer ({self.id!r})")
        if not isinstance(self.name, str):
            raise TraceFormatError(f"node #{i} (id {self.id}): `name` is missing or not a string")
        parent = raw.get("ctrl_deps", raw.get("parent"))
        self.parent = parent if type(parent) is int and parent != self.id else None
        if isinstance(raw.get("inputs"), dict) or "attrs" in raw:  # 1.0.2+
            attrs = raw.get("attrs") or []
            if not isinstance(attrs, list) or not all(isinstance(a, dict) and "name" in a for a in attrs):
                raise TraceFormatError(f"node #{i} (id {self.id}): `attrs` is not a list of {{name, value}}")
            self.attrs = {a["name"]: a.get("value") for a in attrs}
            self.inputs = _args(raw.get("inputs"), i, self.id, "inputs")
            self.outputs = _args(raw.get("outputs"), i, self.id, "outputs")
        else:  # 1.0.1: attributes are node keys, arguments parallel top-level lists
            self.attrs = {k: v for k, v in raw.items() if k not in _NODE_KEYS}
            self.inputs = _old_args(raw, "input", i, self.id)
            self.outputs = _old_args(raw, "output", i, self.id)
        return self

    @property
    def marker(self) -> bool:
        return self.name.startswith(_MARKER)


def _args(obj: Any, i: int, nid: int, what: str) -> list[tuple]:
    """[(value, shape, type, strides)] of an `inputs` / `outputs` object."""
    if obj is None:
        return []
    if not isinstance(obj, dict):
        raise TraceFormatError(f"node #{i} (id {nid}): `{what}` is not an object of values/shapes/types")
    return _zip(obj.get("values"), obj.get("shapes"), obj.get("types"), obj.get("strides"), i, nid, what)


def _old_args(raw: dict, prefix: str, i: int, nid: int) -> list[tuple]:
    return _zip(raw.get(f"{prefix}s"), raw.get(f"{prefix}_shapes"), raw.get(f"{prefix}_types"),
                raw.get(f"{prefix}_strides"), i, nid, f"{prefix}s")


def _zip(values: Any, shapes: Any, types: Any, strides: Any, i: int, nid: int, what: str) -> list[tuple]:
    values = values if values is not None else []
    lists = (values, shapes if shapes is not None else [None] * len(values),
             types if types is not None else [None] * len(values),
             strides if strides is not None else [None] * len(values))
    if not all(isinstance(x, list) for x in lists) or len({len(x) for x in lists}) != 1:
        raise TraceFormatError(f"node #{i} (id {nid}): {what}' values, shapes, types and strides "
                               "are not lists of one length")
    return list(zip(*lists))


def _steps(nodes: list[_Node]) -> dict[int, int]:
    """Node id -> N of its nearest enclosing `ProfilerStep#N` node (itself included)."""
    parent = {n.id: n.parent for n in nodes}
    own = {n.id: int(m[1]) for n in nodes if (m := _STEP.match(n.name))}
    out: dict[int, int | None] = {}
    for n in nodes:
        chain, cur = [], n.id
        while cur is not None and cur not in out and cur not in own and len(chain) <= len(parent):
            chain.append(cur)
            cur = parent.get(cur)
        step = out.get(cur) if cur in out else own.get(cur)
        for c in chain:
            out[c] = step
        if cur in own:
            out[cur] = own[cur]
    return {k: v for k, v in out.items() if v is not None}


def _dtype(type_name: Any) -> str | None:
    m = _TENSOR_TYPE.match(type_name) if isinstance(type_name, str) else None
    return _TORCH_DTYPES.get(m[1], m[1]) if m else None


def _flat(shape: Any) -> list | None:
    return shape if isinstance(shape, list) and all(type(d) is int for d in shape) else None


def _node_row(n: _Node, step: int | None, pid: int | None) -> tuple:
    a = n.attrs
    rf = a.get("rf_id")
    tid = a.get("tid")
    params = {k: v for k, v in a.items() if k not in _ATTR_COLS and v not in ("", None)}
    for what, args in (("input_strides", n.inputs), ("output_strides", n.outputs)):
        if any(s is not None for _, _, _, s in args):
            params[what] = [s for _, _, _, s in args]
    schema = a.get("op_schema")
    return ("CPU:0", "CPU", step, n.name, n.name, tid if type(tid) is int else None, n.id, n.parent,
            rf if type(rf) is int and not n.marker else None, pid, schema if schema else None,
            [dumps_compact(v) for v, _, _, _ in n.inputs], [dumps_compact(v) for v, _, _, _ in n.outputs],
            [_flat(s) for _, s, _, _ in n.inputs], [_dtype(t) or t for _, _, t, _ in n.inputs],
            [_flat(s) for _, s, _, _ in n.outputs], [_dtype(t) or t for _, _, t, _ in n.outputs],
            dumps_compact(params) if params else None)


def _is_tensor(v: Any) -> bool:
    return (isinstance(v, list) and len(v) in (5, 6) and all(type(x) is int for x in v[:5])
            and (len(v) == 5 or isinstance(v[5], str)))


def _list_types(type_name: Any) -> list[str]:
    """The element types of `GenericList[Tensor(float),Tensor(float)]`."""
    if not isinstance(type_name, str) or not type_name.startswith("GenericList[") or not type_name.endswith("]"):
        return []
    out, depth, cur = [], 0, ""
    for ch in type_name[len("GenericList["):-1]:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += (ch in "[(") - (ch in "])")
        cur += ch
    return out + [cur]


def tensor_uses(args: list[tuple]) -> Iterator[tuple[int, int | None, tuple, Any, Any, str | None]]:
    """(slot, list index, tensor tuple, shape, strides, dtype) of each tensor among an op's
    arguments: `Tensor(..)` values, and the tensor elements of `GenericList[..]` values."""
    for slot, (value, shape, typ, strides) in enumerate(args):
        dtype = _dtype(typ)
        if dtype is not None and _is_tensor(value):
            yield slot, None, tuple(value), shape, strides, dtype
        elif dtype is None and isinstance(value, list):
            types = _list_types(typ)
            for j, v in enumerate(value):
                el = _dtype(types[j]) if j < len(types) else None
                if el is not None and _is_tensor(v):
                    yield (slot, j, tuple(v), _at(shape, j), _at(strides, j), el)


def _at(xs: Any, j: int) -> Any:
    return xs[j] if isinstance(xs, list) and j < len(xs) else None


def _device(raw: str | None) -> str:
    """cuda:0 -> GPU:0, cpu -> CPU:0, meta -> META:0."""
    if not raw:
        return "CPU:0"
    kind, _, index = raw.partition(":")
    kind = {"cuda": "GPU", "hip": "GPU"}.get(kind.lower(), kind.upper())
    return f"{kind}:{int(index) if index.isdigit() else 0}"


def _tensor_values(nodes: list[_Node], steps: dict[int, int]) -> Iterator[tuple]:
    """The `tensors` rows: one per value of each tensor (module docstring)."""
    current: dict[tuple, list] = {}  # tensor tuple -> its current value's row (a list, consumers last)
    rows: list[list] = []

    def value(key: tuple, writer: _Node | None, slot, index, shape, strides, dtype, mutated=None) -> list:
        raw = key[5] if len(key) > 5 else None
        params = {k: v for k, v in (("list_index", index), ("mutated_input", mutated)) if v is not None}
        row = [_device(raw), raw, steps.get(writer.id) if writer else None, writer.name if writer else None,
               slot, key[0], key[1], key[2], key[3], key[4], dtype, _flat(shape), _flat(strides),
               writer.id if writer else None, [], dumps_compact(params) if params else None]
        rows.append(row)
        current[key] = row
        return row

    for n in nodes:
        for slot, index, key, shape, strides, dtype in tensor_uses(n.inputs):
            row = current.get(key) or value(key, None, None, None, shape, strides, dtype)
            if not row[-2] or row[-2][-1] != n.id:
                row[-2].append(n.id)
        written = set()
        for slot, index, key, shape, strides, dtype in tensor_uses(n.outputs):
            if key not in written:
                written.add(key)
                value(key, n, slot, index, shape, strides, dtype)
        mutated = _mutated_slots(n.attrs.get("op_schema"))
        for slot, index, key, shape, strides, dtype in tensor_uses(n.inputs) if mutated else ():
            if slot in mutated and key not in written:
                written.add(key)
                value(key, n, None, index, shape, strides, dtype, mutated=slot)
    for row in rows:
        yield tuple(row)


def _mutated_slots(op_schema: Any) -> set[int]:
    """Argument positions whose schema type is a mutable alias: `Tensor(a!) self`,
    `Tensor(a!)[] self`, `*, Tensor(a!) out` (the `*` is no argument)."""
    if not isinstance(op_schema, str) or "!" not in op_schema or ") ->" not in op_schema:
        return set()
    head = op_schema.partition(") ->")[0]
    args, depth, cur = [], 0, ""
    for ch in head[head.find("(") + 1:]:
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
            continue
        depth += (ch in "[(") - (ch in "])")
        cur += ch
    args = [a for a in args + [cur.strip()] if a and a != "*"]
    return {i for i, a in enumerate(args) if "!" in a.rsplit(" ", 1)[0]}


# -- the fallback join (run by tracedb.etlink) ---------------------------------------------


def match_ops(et_ops: list[tuple], kineto_ops: list[tuple]) -> dict[int, int]:
    """Pair ET ops with Kineto ops of one process, without record-function ids (module
    docstring). `et_ops`: (ET id, thread, name, seq_id); `kineto_ops`: (key, thread, name,
    sequence number, start, duration). Returns Kineto key -> ET id."""
    et_threads = _by_thread(sorted(et_ops, key=lambda o: o[0]))
    k_threads = _by_thread(sorted(kineto_ops, key=lambda o: (o[4], -o[5])))
    scored = []
    for et_tid, e in et_threads.items():
        for k_tid, k in k_threads.items():
            pairs = _align_thread([o[2] for o in e], [o[3] for o in e], [o[2] for o in k], [o[3] for o in k])
            if pairs:
                scored.append((-len(pairs), et_tid, k_tid, pairs))
    out: dict[int, int] = {}
    taken_e, taken_k = set(), set()
    for _, et_tid, k_tid, pairs in sorted(scored, key=lambda s: s[0]):  # stable: first found wins ties
        if et_tid in taken_e or k_tid in taken_k:
            continue
        taken_e.add(et_tid)
        taken_k.add(k_tid)
        e, k = et_threads[et_tid], k_threads[k_tid]
        for i, q in pairs:
            out[k[q][0]] = e[i][0]
    return out


def _by_thread(ops: list[tuple]) -> dict[Any, list[tuple]]:
    out: dict[Any, list[tuple]] = {}
    for o in ops:
        out.setdefault(o[1], []).append(o)
    return out


def _align_thread(e: list[str], e_seq: list, k: list[str], k_seq: list) -> list[tuple[int, int]]:
    """[(ET index, Kineto index)] of one thread pair: anchored by a sequence number, else
    the best of the starts at the first ET name's occurrences."""
    first_at: dict[tuple, int] = {}
    for q, (name, s) in enumerate(zip(k, k_seq)):
        if type(s) is int and s >= 0:
            first_at.setdefault((name, s), q)
    for j, (name, s) in enumerate(zip(e, e_seq)):
        q = first_at.get((name, s)) if type(s) is int and s >= 0 else None
        if q is not None:
            back = _greedy(e[:j][::-1], k[:q][::-1], 0)
            return sorted([(j - 1 - i, q - 1 - x) for i, x in back] + [(j + i, x) for i, x in _greedy(e[j:], k, q)])
    present = set(k)
    first = next((name for name in e if name in present), None)
    best: list[tuple[int, int]] = []
    for start in [q for q, name in enumerate(k) if name == first][:MAX_STARTS]:
        pairs = _greedy(e, k, start)
        if len(pairs) > len(best):
            best = pairs
    return best


def _greedy(e: list[str], k: list[str], p: int) -> list[tuple[int, int]]:
    """Each of `e` in order takes the next op of its name in `k` (from position p) within
    MATCH_WINDOW of the cursor: [(index in e, index in k)]."""
    out = []
    for i, name in enumerate(e):
        for q in range(p, min(p + MATCH_WINDOW, len(k))):
            if k[q] == name:
                out.append((i, q))
                p = q + 1
                break
    return out
