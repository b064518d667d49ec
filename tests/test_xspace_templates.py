"""XSpace rows built from per-metadata templates (issue 29): every kernel and host row,
params JSON included, against an oracle that reads the same file with protobuf's own
`XSpace` class and applies the documented rules by hand.

The reader decodes each distinct stat encoding once, builds one template per event
metadata and set of column-deciding stats, and fills in only what varies per event (the
times, the correlation id, the other stats' values in the params text). The oracle here
knows nothing of that: per event it merges the metadata's stats and the event's own by
name (later wins, first position kept), resolves ref values to stat names and bytes to
`<N bytes>`, takes out what the row's columns hold, and `json.dumps` the rest.

The synthetic trace has what the real fixtures lack: a metadata stat an event overrides,
a name twice in one event, stat ids past 127 and negative int64s (not the usual one-byte
encodings), doubles (NaN too), bytes, a ref to a missing name, non-ASCII text and braces in
a value, memcpy details, an event without metadata, an aggregated event, host allocations.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from tracedb.errors import TraceFormatError
from tracedb.formats import xspace
from tracedb.formats.base import ReadContext
from tracedb.proto import xplane_pb2

FIXTURE = Path(__file__).parent / "data" / "xspace_jax_h200" / "jax_h200.xplane.pb"
GPU_STATS = {1: "correlation_id", 2: "kernel_details", 3: "context_id", 4: "scope_range_id", 5: "hlo_op",
             6: "ref_target", 7: "theoretical_occupancy_pct", 8: "memcpy_details", 9: "tf_op", 10: "note",
             11: "blob", 200: "big_id_stat", 201: "ratio"}
HOST_STATS = {1: "correlation_id", 2: "tf_op", 3: "_src", 4: "allocator_name", 5: "allocation_bytes", 6: "addr",
              7: "label"}


def _stat(ev, mid: int, **value) -> None:
    st = ev.stats.add(metadata_id=mid)
    (field, v), = value.items()
    setattr(st, field, v)


def _synthetic(path: Path) -> None:
    space = xplane_pb2.XSpace()
    gpu = space.planes.add(id=1, name="/device:GPU:0")
    for k, v in GPU_STATS.items():
        gpu.stat_metadata[k].id, gpu.stat_metadata[k].name = k, v
    md = gpu.event_metadata[1]
    md.id, md.name, md.display_name = 1, "kern_a_long", "kern_a"
    _stat(md, 10, str_value="from metadata")
    _stat(md, 3, int64_value=7)  # the events override it
    gpu.event_metadata[2].id, gpu.event_metadata[2].name = 2, "MemcpyDtoH"
    line = gpu.lines.add(id=3, name="Stream #3(Compute)", timestamp_ns=1_000_000)
    details = "regs:32 grid:2,1,1 block:64,1,1 static_shared:16 dynamic_shared:128"
    for i in range(6):
        ev = line.events.add(metadata_id=1, offset_ps=5_000_000 * i + 123_456, duration_ps=2_000_999 + i)
        _stat(ev, 1, uint64_value=100 + i)
        _stat(ev, 2, str_value=details)
        _stat(ev, 3, int64_value=9 + i % 2)
        _stat(ev, 4, int64_value=-5 - i)  # a 10-byte varint
        _stat(ev, 200, uint64_value=3 * i)  # a two-byte metadata id
        _stat(ev, 7, double_value=50.0 + i)
        _stat(ev, 10, str_value="first")
        _stat(ev, 10, str_value=f"é✓ {{brace}} {i}")  # the same name again: last value wins
        _stat(ev, 11, bytes_value=b"xyz" * i)
        _stat(ev, 6, ref_value=2 if i % 2 else 999)  # a stat's name, or a missing one
        _stat(ev, 201, double_value=math.nan if i == 3 else i / 3)
        if i % 3 == 0:
            _stat(ev, 5, ref_value=10)  # hlo_op "note"
        else:
            _stat(ev, 9, str_value=f"scope/op{i}:MatMul")
    agg = line.events.add(metadata_id=1, num_occurrences=4, duration_ps=9)
    _stat(agg, 1, uint64_value=1)
    copy = line.events.add(metadata_id=2, offset_ps=40_000_000, duration_ps=1_000)
    _stat(copy, 1, uint64_value=500)
    _stat(copy, 8, str_value="kind_src:device kind_dst:pinned size:4096 channel:2")
    orphan = line.events.add(metadata_id=77, offset_ps=41_000_000, duration_ps=1_000)
    _stat(orphan, 1, uint64_value=501)

    host = space.planes.add(id=2, name="/host:CPU")
    for k, v in HOST_STATS.items():
        host.stat_metadata[k].id, host.stat_metadata[k].name = k, v
    host.event_metadata[1].id, host.event_metadata[1].name, host.event_metadata[1].display_name = 1, "op", "Op!"
    host.event_metadata[2].id, host.event_metadata[2].name = 2, "MemoryAllocation"
    thread = host.lines.add(id=635, name="t635", display_name="Host Threads/635", timestamp_ns=1_000_000)
    for i in range(5):
        ev = thread.events.add(metadata_id=1, offset_ps=1_000_000 * i, duration_ps=500_000)
        _stat(ev, 1, uint64_value=100 + i)
        _stat(ev, 3, ref_value=7)
        _stat(ev, 3, str_value=f"src{i}")
        _stat(ev, 7, int64_value=-i)
        if i % 2:
            _stat(ev, 2, str_value=f"outer/inner{i}:Conv2D")
    alloc = thread.events.add(metadata_id=2, offset_ps=9_000_000, duration_ps=0)
    _stat(alloc, 4, str_value="GPU_0_bfc")
    _stat(alloc, 5, int64_value=4096)
    _stat(alloc, 6, int64_value=1 << 40)
    path.write_bytes(space.SerializeToString())


# ---------------------------------------------------------------- the oracle

def _value(names: dict, st) -> object:
    which = st.WhichOneof("value")
    if which is None:
        return None
    v = getattr(st, which)
    return names.get(v, v) if which == "ref_value" else f"<{len(v)} bytes>" if which == "bytes_value" else v


def _merged(plane, ev) -> tuple[str, str, dict]:
    names = {k: m.name for k, m in plane.stat_metadata.items()}
    out: dict = {}
    md = plane.event_metadata.get(ev.metadata_id) if ev.metadata_id in plane.event_metadata else None
    for st in list(md.stats if md else []) + list(ev.stats):
        out[names.get(st.metadata_id) or f"stat_{st.metadata_id}"] = _value(names, st)
    full = md.name if md else f"event_{ev.metadata_id}"
    return full, (md.display_name or md.name) if md else full, out


def _oracle(path: Path) -> tuple[list, list]:
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    kernels, nodes = [], []
    for plane in space.planes:
        for line in plane.lines:
            for ev in line.events:
                if ev.WhichOneof("data") == "num_occurrences":
                    continue
                full, name, st = _merged(plane, ev)
                start = line.timestamp_ns + ev.offset_ps // 1000
                if plane.name == "/host:CPU":
                    if "allocator_name" in st:
                        continue
                    node, op = full, name
                    if ":" in str(st.get("tf_op", "")):
                        node, _, op = st.pop("tf_op").rpartition(":")
                    extra = {"thread_name": line.display_name, **st}
                    if name != full:
                        extra["display_name"] = name
                    nodes.append((node, op, start, st.get("correlation_id"), json.dumps(extra)))
                    continue
                corr = st.pop("correlation_id")
                extras = {}
                if "memcpy_details" in st:
                    det = dict(p.split(":") for p in st.pop("memcpy_details").split())
                    extras = {f"memcpy_{k}": v for k, v in det.items() if k != "size"}
                    cols = ("memcpy", int(det["size"]), None, None)
                elif "kernel_details" in st:
                    det = dict(p.split(":") for p in st.pop("kernel_details").split())
                    cols = ("kernel", None, [int(x) for x in det["grid"].split(",")], int(det["regs"]))
                else:
                    cols = ("kernel", None, None, None)
                occ = st.pop("theoretical_occupancy_pct", None)
                node = st.pop("hlo_op") if st.get("hlo_op") else st.pop("tf_op").rpartition(":")[0] \
                    if "tf_op" in st else None
                st.update(extras)
                if full != name:
                    st["full_name"] = full
                kernels.append((name, start, ev.duration_ps // 1000, corr, *cols, occ, node,
                                json.dumps(st) if st else None))
    return kernels, nodes


def _tables(path: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for table, batch in xspace.read(path, ReadContext("run", path.name)):
        out.setdefault(table, []).extend(batch.to_pylist())
    return out


@pytest.mark.parametrize("which", ["synthetic", "fixture"])
def test_rows_and_params_match_the_oracle(tmp_path, which):
    path = FIXTURE
    if which == "synthetic":
        path = tmp_path / "synthetic.xplane.pb"
        _synthetic(path)
    want_kernels, want_nodes = _oracle(path)
    got = _tables(path)
    kernels = [(k["name"], k["start_ns"], k["duration_ns"], k["correlation_id"], k["kind"], k["bytes"], k["grid"],
                k["registers_per_thread"], k["occupancy"], k["node_name"], k["params"]) for k in got["kernels"]]
    assert kernels == want_kernels
    host = [(n["node_name"], n["op_type"], n["start_ns"], n["correlation_id"], n["params"])
            for n in got["nodes"] if n["device"] == "CPU:0"]
    assert host == want_nodes
    if which == "synthetic":
        assert len(kernels) == 8 and len(host) == 5  # 6 kernels, the memcpy, the orphan; no aggregate
        assert [a["bytes"] for a in got["allocations"]] == [4096]
        assert "NaN" in kernels[3][-1] and '"ref_target": 999' in kernels[0][-1]


def test_a_bad_stat_is_the_error_of_its_event(tmp_path):
    """A stat whose string is not UTF-8 (the events parse with their stats as bytes, so it
    is found when the stat is decoded): the error names the event and where it starts, as
    parsing the run whole gives it."""
    data = FIXTURE.read_bytes()
    space = xplane_pb2.XSpace.FromString(data)
    pi = next(i for i, p in enumerate(space.planes) if p.name == "/device:GPU:0")
    event = space.planes[pi].lines[0].events[7]
    st = next(s for s in event.stats if s.WhichOneof("value") == "str_value")
    good = st.SerializeToString()
    at, where = data.find(event.SerializeToString()), data.find(good, data.find(event.SerializeToString()))
    assert at > 0 and where > at and good.endswith(st.str_value.encode())
    bad = bytearray(data)
    bad[where + len(good) - 1] = 0xFF  # the string's last byte
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(bytes(bad))
    with pytest.raises(Exception):  # protobuf refuses it
        xplane_pb2.XSpace.FromString(bytes(bad))
    with pytest.raises(TraceFormatError) as err:
        _tables(path)
    m = re.fullmatch(rf"truncated or corrupt XSpace protobuf: bad or truncated planes\[{pi}\]\.lines\[0\]\.events\[7\] "
                     r"\(.+\) at byte (\d+)", str(err.value))
    assert m, str(err.value)
    assert at - 3 <= int(m[1]) < at  # the event's tag, before its length and payload
