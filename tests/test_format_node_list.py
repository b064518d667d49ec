"""Plain node-name list reader, on the real seed list.

Expected numbers come from `str.split("\n")` on the seed (2467 lines, no blank ones, the
last without a trailing newline), not from the reader.
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
SEED = DATA / "node_name_list" / "003_5bf2854c930b1b8f.txt"
MINE = (megengine, node_dump, node_list)


def read_nodes(path: Path) -> list[dict]:
    batches = [b for _, b in node_list.read(path, ReadContext(run_id="r", source_file=path.name))]
    return pa.Table.from_batches(batches).to_pylist()


def test_sniff_from_content_not_name(tmp_path):
    anon = tmp_path / "trace.bin"
    shutil.copy(SEED, anon)
    assert detect(anon) is node_list


def test_random_and_empty_claimed_by_none(tmp_path):
    for head in (b"", b"\n\n", random.Random(65536).randbytes(65536), random.Random(100).randbytes(100)):
        assert not any(m.sniff(head) for m in MINE)
    empty = tmp_path / "trace.bin"
    empty.write_bytes(b"")
    with pytest.raises(TraceFormatError):
        detect(empty)


def test_sniff_is_conservative():
    for head in (
        b'{"traceEvents": []}\n',
        json.dumps({"a": 1}, indent=1).encode(),
        b"node_stats {\n  node_name: \"x\"\n}\n",
        b"a,b\n1,2\n",
        b"hello world\nsecond line\n",
        b"single_name\n",
        b"123\n456\n",
        read_head(DATA / "tf_runmetadata_text" / "000_6b18107121892edf.txt"),
        read_head(DATA / "xspace_jax_h200" / "jax_h200.xplane.pb"),
        read_head(DATA / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"),
        read_head(DATA / "node_shape_dump" / "002_11cf062b29f34b60.txt"),
        read_head(DATA / "megengine_graph_profile" / "004_825e28a4f520ddc2.txt"),
    ):
        assert not node_list.sniff(head), head[:40]
    assert node_list.sniff(b"a/b\nc:0\n")


def test_nodes_in_file_order():
    nodes = read_nodes(SEED)
    assert len(nodes) == 2467
    assert [n["seq"] for n in nodes] == list(range(2467))
    assert nodes[0]["node_name"] == (
        "gradient_tape/resnet50/conv1_conv/Conv2D/Conv2DBackpropFilter-0-PermConstNHWCToNCHW-LayoutOptimizer")
    assert nodes[-1]["node_name"] == nodes[0]["node_name"] + "/clone_1"
    assert nodes[19]["node_name"] == "Cast"
    assert {(n["device"], n["device_raw"], n["start_ns"], n["duration_ns"], n["op_type"]) for n in nodes} == {
        ("UNKNOWN:0", None, None, None, None)}


def test_bad_line_is_a_format_error(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("a/b\nc/d\n" + "x\n" * 5 + "not a name\n")
    with pytest.raises(TraceFormatError, match="line 8"):
        read_nodes(bad)
