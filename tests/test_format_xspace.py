"""XSpace reader on a real JAX trace from an H200.

Expected numbers were worked out with a throwaway script that walks the raw protobuf wire
format by hand (varints, no generated classes): the GPU plane has one line
"Stream #14(Compute)" with 30 events summing 3,910,125,000 ps; the /host:CPU plane has
1 + 177 events, 20 of them MemoryAllocation/MemoryDeallocation (10 each, 335,545,600
bytes each way), the other 158 summing 73,314,496 ns; 5 cuGraphLaunch events carry
correlation ids 1..5.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from tracedb.errors import TraceFormatError
from tracedb.formats import detect, xspace
from tracedb.formats.base import ReadContext, read_head

FIXTURE = Path(__file__).parent / "data" / "xspace_jax_h200" / "jax_h200.xplane.pb"


def _read(path: Path, ctx: ReadContext | None = None) -> dict[str, pa.Table]:
    batches: dict[str, list] = {}
    for table, batch in xspace.read(path, ctx or ReadContext("run", path.name)):
        batches.setdefault(table, []).append(batch)
    return {t: pa.Table.from_batches(b) for t, b in batches.items()}


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    return _read(FIXTURE)


def test_sniff_and_detect():
    assert xspace.sniff(read_head(FIXTURE))
    assert detect(FIXTURE).NAME == "xspace"


def _ld(field: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([field << 3 | 2, len(payload)]) + payload


def test_sniff_rejects_stepstats_and_text():
    dev = _ld(1, b"/job:localhost/replica:0/task:0/device:GPU:0") + _ld(2, _ld(1, b"MatMul"))
    step_stats = _ld(1, dev)  # StepStats.dev_stats[0].device
    run_metadata = _ld(1, step_stats)  # RunMetadata.step_stats
    for head in (step_stats, run_metadata, b"step_stats {\n  dev_stats {", b"\ndev_stats {",
                 b'{"traceEvents": []}', b""):
        assert not xspace.sniff(head), head
    assert xspace.sniff(_ld(1, b"\x08\x07" + _ld(2, b"/device:GPU:3")))  # id then name


def test_kernels(tables):
    k = tables["kernels"].to_pylist()
    assert len(k) == 30
    assert {r["device"] for r in k} == {"GPU:0"}
    assert {r["device_raw"] for r in k} == {"/device:GPU:0"}
    assert {r["stream"] for r in k} == {14}
    assert {r["kind"] for r in k} == {"kernel"}
    assert sum(r["duration_ns"] for r in k) == 3_910_125  # 3.910125 ms
    first = k[0]
    # line timestamp 16,733,019 ns + offset 518,054,000 ps
    assert first["start_ns"] == 17_251_073 and first["duration_ns"] == 197_727
    assert first["name"] == "gemm_fusion_dot_general_4"
    assert first["node_name"] == "command_buffer_1"  # hlo_op, a ref_value stat
    assert first["correlation_id"] == 1
    assert first["grid"] == [512, 1, 1] and first["block"] == [256, 1, 1]
    assert first["registers_per_thread"] == 168 and first["shared_memory_bytes"] == 196640
    assert first["occupancy"] == 12.5
    params = json.loads(first["params"])
    assert params["hlo_module"] == "jit_f" and params["program_id"] == 1990
    assert sorted({r["correlation_id"] for r in k}) == [1, 2, 3, 4, 5]
    assert sorted({r["name"] for r in k}) == [
        "gemm_fusion_dot_general_4", "gemm_fusion_dot_general_5",
        "input_reduce_fusion", "input_reduce_fusion_1",
    ]


def test_host_nodes(tables):
    every = tables["nodes"].to_pylist()
    n = [r for r in every if r["device"] == "CPU:0"]  # the GPU rows are the device's XLA ops (test_flops)
    assert len(n) == 158 and len(every) == 158 + 30
    assert sum(r["duration_ns"] for r in n) == 73_314_496
    assert {r["thread_id"] for r in n} == {635, -4764611979263629758}
    # file order: the GPU plane (its 30 ops) comes before the host plane in this file
    assert [r["seq"] for r in n] == list(range(30, 188))
    assert sorted(r["seq"] for r in every) == list(range(188))
    assert n[0]["node_name"] == "<UNKNOWN>" and n[0]["start_ns"] == 17_204_285
    assert json.loads(n[0]["params"])["thread_name"] == "Host Threads/635"
    launches = [r for r in n if r["node_name"] == "cuGraphLaunch (CudaGraph:2)"]
    assert [r["correlation_id"] for r in launches] == [1, 2, 3, 4, 5]
    assert not any(r["node_name"].startswith("Memory") for r in n)


def test_allocations(tables):
    a = tables["allocations"].to_pylist()
    assert len(a) == 20
    assert {r["device"] for r in a} == {"GPU:0"} and {r["allocator"] for r in a} == {"GPU_0_bfc"}
    assert sum(r["bytes"] for r in a if r["kind"] == "alloc") == 335_545_600
    assert sum(r["bytes"] for r in a if r["kind"] == "free") == -335_545_600
    assert sum(r["kind"] == "alloc" for r in a) == 10


def test_metadata():
    ctx = ReadContext("run", FIXTURE.name)
    _read(FIXTURE, ctx)
    assert ctx.metadata["devices"]["GPU:0"]["gpu_device_name"] == "NVIDIA H200"
    assert ctx.metadata["xspace"]["hostnames"] == ["vm"]
    assert ctx.metadata["xspace"]["/host:metadata"]["jax_version"] == "0.11.2"


def test_truncated_is_a_format_error(tmp_path):
    data = FIXTURE.read_bytes()
    cut = tmp_path / "cut.xplane.pb"
    cut.write_bytes(data[: len(data) // 2])
    assert detect(cut).NAME == "xspace"  # the head still looks right
    with pytest.raises(TraceFormatError, match="truncated or corrupt XSpace"):
        _read(cut)
