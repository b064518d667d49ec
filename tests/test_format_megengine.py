"""MegEngine graph-profile reader, on the real seed profile.

Expected numbers were worked out with plain `json` on the seed file (not through the
reader): e.g. device time = sum(round(end*1e9) - round(start*1e9)) over profiler.device.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from tracedb.errors import TraceFormatError
from tracedb.formats import detect, megengine, node_dump, node_list
from tracedb.formats.base import ReadContext, read_head

DATA = Path(__file__).parent / "data"
SEED = DATA / "megengine_graph_profile" / "004_825e28a4f520ddc2.txt"
CONV_621 = "conv(FUSE_ADD_RELU[619],const{128,512,1,1}[176])[621]"


def read_tables(path: Path) -> dict[str, pa.Table]:
    batches: dict[str, list[pa.RecordBatch]] = {}
    for table, batch in megengine.read(path, ReadContext(run_id="r", source_file=path.name)):
        batches.setdefault(table, []).append(batch)
    return {t: pa.Table.from_batches(b) for t, b in batches.items()}


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    return read_tables(SEED)


def rows(table: pa.Table, **match) -> list[dict]:
    return [r for r in table.to_pylist() if all(r[k] == v for k, v in match.items())]


def test_sniff_from_content_not_name(tmp_path):
    anon = tmp_path / "trace.bin"
    shutil.copy(SEED, anon)
    assert detect(anon) is megengine


def test_sniff_rejects_other_json_and_junk():
    kineto = read_head(DATA / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz")
    assert not megengine.sniff(kineto)
    assert not megengine.sniff(b'{"traceEvents": [{"name": "profiler", "ph": "X"}]}')
    assert not megengine.sniff(b"")
    assert not megengine.sniff(random.Random(4096).randbytes(4096))
    # The other text formats of this task must not claim the profile either.
    head = read_head(SEED)
    assert not node_dump.sniff(head) and not node_list.sniff(head)


def test_nodes(tables):
    nodes = tables["nodes"]
    assert nodes.num_rows == 240
    timed = [r for r in nodes.to_pylist() if r["duration_ns"] is not None]
    assert len(timed) == 234
    untimed = {r["node_name"] for r in nodes.to_pylist() if r["duration_ns"] is None}
    assert untimed == {"const<-1>[511]", "subtensor(shape_of[834])[836]", "const<0>[507]",
                       "concat(subtensor[836],const<-1>[511])[838]", "shape_of(pooling[831])[834]",
                       "h2d[55]"}
    assert all(r["start_ns"] is None and r["seq"] is None for r in nodes.to_pylist()
               if r["node_name"] in untimed)
    assert sorted(r["seq"] for r in timed) == list(range(234))
    assert sum(r["flops"] or 0 for r in nodes.to_pylist()) == 81_954_092_640
    assert sum(r["memory_bytes"] or 0 for r in nodes.to_pylist()) == 2_551_250_656

    (conv,) = rows(nodes, node_name=CONV_621)
    assert conv["op_type"] == "ConvolutionForward"
    assert conv["device"] == "GPU:0" and conv["device_raw"] == "gpu0:0"
    assert conv["seq"] == 123
    assert conv["start_ns"] == 147_893_000 and conv["duration_ns"] == 38_000  # host 0.147893 .. 0.147931 s
    assert conv["flops"] == 1_027_604_480 and conv["memory_bytes"] == 20_332_544
    assert conv["input_shapes"] == [[10, 512, 28, 28], [128, 512, 1, 1]]
    assert conv["output_shapes"] == [[10, 128, 28, 28]]
    params = json.loads(conv["params"])
    assert params["id"] == "621" and params["output_vars"] == ["622", "623"]
    assert params["param"]["format"] == "NCHW"
    # The host-to-device copy lives on the CPU comp node of its output var.
    assert rows(nodes, node_name="h2d[55]")[0]["device"] == "CPU:0"


def test_kernels(tables):
    kernels = tables["kernels"].to_pylist()
    assert len(kernels) == 234
    assert {(k["device"], k["device_raw"], k["kind"]) for k in kernels} == {("GPU:0", "gpu0:0", "kernel")}
    total = sum(k["duration_ns"] for k in kernels)
    assert total == 22_430_132
    assert round(total / 1e6, 3) == 22.430

    by_type: dict[str, list[int]] = {}
    for k in kernels:
        by_type.setdefault(k["name"], []).append(k["duration_ns"])
    ranked = sorted(by_type, key=lambda t: -sum(by_type[t]))
    assert ranked[:2] == ["ConvolutionForward", "Elemwise"]
    assert len(by_type["ConvolutionForward"]) == 53 and sum(by_type["ConvolutionForward"]) == 15_487_374
    assert len(by_type["Elemwise"]) == 69 and sum(by_type["Elemwise"]) == 6_236_200

    (conv,) = [k for k in kernels if k["node_name"] == CONV_621]
    assert conv["name"] == "ConvolutionForward"
    assert conv["start_ns"] == 151_141_220 and conv["duration_ns"] == 214_005
    assert conv["kern_ns"] == 151_142_242


def test_tensors(tables):
    tensors = tables["tensors"]
    assert tensors.num_rows == 299
    assert sum(1 for r in tensors.to_pylist() if r["dtype"] is not None) == 104
    (const,) = rows(tensors, tensor_id=211)
    assert const["tensor_name"] == "const{128,128,3,3}[210]"
    assert const["node_name"] == "const{128,128,3,3}[210]" and const["slot"] == 0
    assert const["shape"] == [128, 128, 3, 3] and const["dtype"] == "float32"
    assert const["allocated_bytes"] == 589_824 and const["allocation_id"] == 211
    assert const["ptr"] == 139_947_715_854_336 and const["device"] == "GPU:0"
    (ws,) = rows(tensors, tensor_id=623)  # second output of conv 621: its workspace
    assert ws["node_name"] == CONV_621 and ws["slot"] == 1
    (h2d,) = rows(tensors, tensor_id=56)
    assert h2d["device"] == "CPU:0" and h2d["device_raw"] == "cpu0:0"


def test_allocations(tables):
    allocs = tables["allocations"].to_pylist()
    assert len(allocs) == 104
    assert sum(a["bytes"] for a in allocs) == 102_106_528
    assert {(a["kind"], a["ts_ns"], a["device"], a["allocator"]) for a in allocs} == {("chunk", None, "GPU:0", "gpu0:0")}
    (chk,) = [a for a in allocs if json.loads(a["params"])["chunk_id"] == "chk211"]
    assert chk["bytes"] == 589_824 and chk["address"] == 139_947_715_854_336
    assert chk["node_name"] == "const{128,128,3,3}[210]"


def test_gzipped_copy_reads_the_same(tmp_path, tables):
    gz = tmp_path / "trace.bin"
    gz.write_bytes(gzip.compress(SEED.read_bytes(), compresslevel=1))
    assert detect(gz) is megengine
    assert read_tables(gz)["kernels"].num_rows == tables["kernels"].num_rows


def test_bad_input_is_a_format_error(tmp_path):
    cut = tmp_path / "cut.json"
    cut.write_bytes(SEED.read_bytes()[:5000])
    with pytest.raises(TraceFormatError, match="not valid JSON"):
        read_tables(cut)
    partial = tmp_path / "partial.json"
    partial.write_text('{"profiler": {"host": {}}}')
    with pytest.raises(TraceFormatError, match="graph_exec"):
        read_tables(partial)
    broken = tmp_path / "broken.json"
    doc = json.loads(SEED.read_text())
    del doc["profiler"]["device"]["621"]["gpu0:0"]["start"]
    broken.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match="malformed operator 621"):
        read_tables(broken)
