"""Large traces made from the real ones by repeating their elements, written gzipped as
they are made (never whole in memory): for tests/test_streaming.py and
bench/bench_stream.py."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from google.protobuf import text_format

from tracedb.formats.pbwire import varint_bytes as _varint
from tracedb.proto import step_stats_pb2, xplane_pb2


def _field(fn: int, payload_len: int) -> bytes:
    return _varint(fn << 3 | 2) + _varint(payload_len)


def _write(dst: Path, parts) -> int:
    """Write the byte strings of `parts` (an iterable) to dst, gzipped; the decompressed size."""
    n = 0
    with gzip.open(dst, "wb", compresslevel=1) as f:
        for p in parts:
            f.write(p)
            n += len(p)
    return n


def xspace(src: Path, dst: Path, mb: float) -> tuple[int, int]:
    """The XSpace `src` with its busiest GPU stream line's events repeated to about `mb`
    MB: (decompressed bytes, events in that line)."""
    space = xplane_pb2.XSpace.FromString(src.read_bytes())
    pi, li = max(((i, j) for i, p in enumerate(space.planes) for j, _ in enumerate(p.lines)
                  if p.name.startswith("/device:GPU")),
                 key=lambda ij: len(space.planes[ij[0]].lines[ij[1]].events))
    plane, line = space.planes[pi], space.planes[pi].lines[li]
    events = b"".join(_field(4, e.ByteSize()) + e.SerializeToString() for e in line.events)
    reps = max(1, int(mb * 1e6 // len(events)))
    bare_line = xplane_pb2.XLine()
    bare_line.CopyFrom(line)
    del bare_line.events[:]
    line_head = bare_line.SerializeToString()
    line_len = len(line_head) + reps * len(events)
    others = xplane_pb2.XPlane()
    others.CopyFrom(plane)
    del others.lines[:]
    plane_rest = others.SerializeToString()
    plane_lines = [ln for j, ln in enumerate(plane.lines) if j != li]
    lines_before = b"".join(_field(3, ln.ByteSize()) + ln.SerializeToString() for ln in plane_lines)
    line_prefix = _field(3, line_len) + line_head
    plane_len = len(lines_before) + len(line_prefix) + reps * len(events) + len(plane_rest)

    def parts():
        for i, p in enumerate(space.planes):
            if i != pi:
                yield _field(1, p.ByteSize()) + p.SerializeToString()
                continue
            yield _field(1, plane_len) + lines_before + line_prefix
            for _ in range(reps):
                yield events
            yield plane_rest
        rest = xplane_pb2.XSpace()
        rest.CopyFrom(space)
        del rest.planes[:]
        yield rest.SerializeToString()
    return _write(dst, parts()), reps * len(line.events)


def step_stats(src_text: Path, dst: Path, mb: float) -> tuple[int, int]:
    """TF StepStats text `src_text` as binary, each device's node_stats repeated to about
    `mb` MB in all: (decompressed bytes, node_stats)."""
    ss = step_stats_pb2.StepStats()
    text_format.Parse(src_text.read_text(), ss)
    total = ss.ByteSize()
    reps = max(1, int(mb * 1e6 // total))

    def parts():
        for d in ss.dev_stats:
            nodes = b"".join(_field(2, n.ByteSize()) + n.SerializeToString() for n in d.node_stats)
            bare = step_stats_pb2.DeviceStepStats()
            bare.CopyFrom(d)
            del bare.node_stats[:]
            head = bare.SerializeToString()
            yield _field(1, len(head) + reps * len(nodes)) + head
            for _ in range(reps):
                yield nodes
    return _write(dst, parts()), reps * sum(len(d.node_stats) for d in ss.dev_stats)


def step_stats_text(src_text: Path, dst: Path, mb: float) -> tuple[int, int]:
    """TF StepStats text `src_text` repeated to about `mb` MB (`dev_stats` is a repeated
    top-level field, so the concatenation is one StepStats with more devices):
    (decompressed bytes, node_stats)."""
    text = src_text.read_bytes()
    ss = step_stats_pb2.StepStats()
    text_format.Parse(text, ss)
    reps = max(1, int(mb * 1e6 // len(text)))
    return _write(dst, [text] * reps), reps * sum(len(d.node_stats) for d in ss.dev_stats)


def padded_json(text: bytes, dst: Path, mb: float) -> int:
    """A JSON document with about `mb` MB of whitespace after its first `{`."""
    pad = b" " * (1 << 20)
    reps = max(1, int(mb * 1e6 // len(pad)))
    i = text.index(b"{") + 1
    return _write(dst, [text[:i], *([pad] * reps), text[i:]])


def megengine(src: Path, dst: Path, reps: int) -> int:
    """The MegEngine profile `src` with its graph repeated `reps` times (operator, var and
    chunk ids shifted by 100000 a copy, so each copy is its own subgraph): bytes written."""
    doc = json.loads(src.read_text())
    shift = lambda i, r: str(int(i) + 100000 * r)  # noqa: E731

    def chunk(c: str, r: int) -> str:
        return "chk" + shift(c[3:], r) if isinstance(c, str) and c.startswith("chk") else c

    out: dict = {"profiler": {k: {} for k in doc["profiler"]}, "graph_exec": {k: {} for k in doc["graph_exec"]}}
    out["graph_exec"]["comp_seq"] = []
    for r in range(reps):
        for sec in ("host", "device", "opr_footprint"):
            for k, v in doc["profiler"][sec].items():
                out["profiler"][sec][shift(k, r)] = v
        g, og = doc["graph_exec"], out["graph_exec"]
        og["comp_seq"] += [shift(o, r) for o in g["comp_seq"]]
        for k, v in g["mem_chunk"].items():
            og["mem_chunk"][chunk(k, r)] = {**v, "id": chunk(k, r), "owner_var": shift(v["owner_var"], r)}
        for k, v in g["var"].items():
            plan = v.get("mem_plan")
            if plan:
                plan = {**plan, "mem_chunk_id": chunk(plan.get("mem_chunk_id"), r)}
            og["var"][shift(k, r)] = {**v, "id": shift(k, r), "mem_plan": plan}
        for k, v in g["operator"].items():
            og["operator"][shift(k, r)] = {**v, "id": shift(k, r), "input": [shift(i, r) for i in v["input"]],
                                            "output": [shift(o, r) for o in v["output"]]}
    data = json.dumps(out).encode()
    return _write(dst, [data])


def kineto_tiny(dst: Path, triples: int) -> int:
    """A Kineto trace of `triples` x (a cpu_op, its `cudaLaunchKernel`, the kernel), ops and
    calls first and the kernels at the end, as Kineto writes them: 3 x `triples` tiny
    events whose links (kernel -> call -> op) span the whole file. Written plain (not
    gzipped); returns the file's size."""
    def host(i: int) -> str:
        t = 10 * i
        return (f'{{"ph":"X","cat":"cpu_op","name":"aten::op{i % 7}","pid":1,"tid":1,"ts":{t}.5,"dur":4,'
                f'"args":{{"External id":{i}}}}},\n'
                f'{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{t + 1},'
                f'"dur":2,"args":{{"correlation":{i},"External id":{i}}}}},\n')

    def kernel(i: int) -> str:
        return (f'{{"ph":"X","cat":"kernel","name":"k{i % 5}","pid":0,"tid":7,"ts":{10 * i + 3}.25,"dur":1,'
                f'"args":{{"device":0,"stream":7,"correlation":{i}}}}}')

    n = 0
    with open(dst, "w") as f:
        n += f.write('{"baseTimeNanoseconds":1000,"traceEvents":[\n')
        for i in range(triples):
            n += f.write(host(i))
        n += f.write(",\n".join(map(kernel, range(triples))))
        n += f.write("\n]}\n")
    return n
