"""Node/shape dump reader, on the real seed dump.

Expected numbers come from plain string handling of the seed (line count, lines ending
in `, GPU, 0` / `, CPU, 0`, occurrences of `, ^` and `int32`), not from the reader.
"""

from __future__ import annotations

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
SEED = DATA / "node_shape_dump" / "002_11cf062b29f34b60.txt"


def read_nodes(path: Path) -> list[dict]:
    batches = []
    for table, batch in node_dump.read(path, ReadContext(run_id="r", source_file=path.name)):
        assert table == "nodes"
        batches.append(batch)
    return pa.Table.from_batches(batches).to_pylist()


@pytest.fixture(scope="module")
def nodes() -> list[dict]:
    return read_nodes(SEED)


def by_name(nodes: list[dict], name: str) -> dict:
    (row,) = [n for n in nodes if n["node_name"] == name]
    return row


def test_sniff_from_content_not_name(tmp_path):
    anon = tmp_path / "trace.bin"
    shutil.copy(SEED, anon)
    assert detect(anon) is node_dump


def test_sniff_rejects_others():
    assert not node_dump.sniff(b"")
    assert not node_dump.sniff(random.Random(4096).randbytes(4096))
    assert not node_dump.sniff(read_head(DATA / "node_name_list" / "003_5bf2854c930b1b8f.txt"))
    assert not node_dump.sniff(read_head(DATA / "tf_runmetadata_text" / "000_6b18107121892edf.txt"))
    assert not node_dump.sniff(b"a,b,c\n1,2,3\n")
    head = read_head(SEED)
    assert not megengine.sniff(head) and not node_list.sniff(head)


def test_counts_and_devices(nodes):
    assert len(nodes) == 178
    devices = [n["device"] for n in nodes]
    assert devices.count("GPU:0") == 168 and devices.count("CPU:0") == 10
    assert {n["device_raw"] for n in nodes} == {"GPU, 0", "CPU, 0"}
    assert [n["seq"] for n in nodes] == list(range(178))
    assert all(n["start_ns"] is None and n["duration_ns"] is None for n in nodes)
    assert sum(len(n["control_inputs"]) for n in nodes) == 18
    with_int32 = [n for n in nodes if "int32" in (n["input_dtypes"] or []) + (n["output_dtypes"] or [])]
    assert len(with_int32) == 38


def test_conv1(nodes):
    conv = by_name(nodes, "conv1/Conv2D")
    assert conv["seq"] == 25
    assert conv["input_shapes"] == [[128, 3, 224, 224], [11, 11, 3, 64]]
    assert conv["output_shapes"] == [[128, 64, 56, 56]]
    assert conv["input_dtypes"] is None and conv["output_dtypes"] is None
    assert conv["device"] == "GPU:0" and conv["control_inputs"] == []


def test_control_inputs_dtypes_and_special_outputs(nodes):
    first = nodes[0]
    assert first["node_name"] == "ConstantFolding/gradients/conv1/Conv2D_grad/ShapeN-matshapes-1"
    assert first["control_inputs"] == ["conv1/weights/read", "Variable/read"]
    assert first["input_shapes"] == []
    assert first["output_shapes"] == [[4, 1]] and first["output_dtypes"] == ["int32"]

    transpose = by_name(nodes, "conv1-2-1-TransposeNCHWToNHWC-LayoutOptimizer")
    assert transpose["input_shapes"] == [[128, 64, 56, 56], [4, 1]]
    assert transpose["input_dtypes"] == [None, "int32"]
    assert transpose["output_shapes"] == [[128, 56, 56, 64]]

    kernel = by_name(nodes, "conv1/Conv2D:Conv2D")  # (no input), (no output)
    assert kernel["input_shapes"] == [] and kernel["output_shapes"] is None

    copy = by_name(nodes, "edge_177_gradients/conv1/BiasAdd_grad/BiasAddGrad:MEMCPYDtoH")
    assert copy["output_shapes"] is None
    assert json.loads(copy["params"]) == {"output_bytes": 256}

    ret = by_name(nodes, "_retval_gradients/conv1/BiasAdd_grad/BiasAddGrad_0_0")
    assert ret["device"] == "CPU:0" and ret["input_shapes"] == [[64, 1]]


def test_bad_line_is_a_format_error(tmp_path):
    bad = tmp_path / "bad.txt"
    lines = SEED.read_text().splitlines()
    bad.write_text("\n".join(lines[:3] + ["conv1/Conv2D, (128x3x224x224), GPU"] + lines[3:]) + "\n")
    with pytest.raises(TraceFormatError, match="line 4"):
        read_nodes(bad)
    shape = tmp_path / "shape.txt"
    shape.write_text("a, (3xfoo), (1), GPU, 0\n")
    with pytest.raises(TraceFormatError, match="line 1"):
        read_nodes(shape)
