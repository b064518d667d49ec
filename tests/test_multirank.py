"""One Kineto file per rank in a run folder is one multi-rank run; ranks stay apart."""

from __future__ import annotations

import gzip
import json

from conftest import scenario
from tracedb import catalog
from tracedb.ingest import ingest

KERNELS_PER_RANK = 1038  # kind = 'kernel' rows in the H200 fixture


def test_two_ranks_one_run(tmp_path):
    doc = json.loads(gzip.decompress(scenario("kineto_h200_fp32").read_bytes()))
    run = tmp_path / "runs" / "ddp_job"
    run.mkdir(parents=True)
    for rank in (0, 1):
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
        (run / f"rank{rank}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    wh = tmp_path / "wh"
    summary = ingest([tmp_path / "runs"], wh)
    assert summary.ok, summary.errors
    con = catalog.connect(wh)
    per_rank = con.execute(
        "SELECT rank, device, count(*) FROM kernels WHERE kind = 'kernel' GROUP BY ALL ORDER BY ALL").fetchall()
    assert per_rank == [(0, "GPU:0", KERNELS_PER_RANK), (1, "GPU:0", KERNELS_PER_RANK)]
    # both ranks' GPU:0 rows sit in the same device partition, in separate files
    files = sorted(p.name for p in (wh / "kernels" / "run_id=ddp_job" / "device=GPU%3A0").iterdir())
    assert len(files) == 2 and files[0] != files[1]
    meta = {json.loads(m)["distributed_info"]["rank"]: json.loads(m)
            for (m,) in con.execute("SELECT metadata FROM files ORDER BY path").fetchall()}
    assert sorted(meta) == [0, 1]
    assert meta[1]["device_properties"][0]["name"] == "NVIDIA H200"
    assert con.execute("SELECT source_files FROM runs").fetchone()[0] == ["rank0.json.gz", "rank1.json.gz"]


def _two_programs(run, names):
    """Two PyTorch traces of one program without distributedInfo: the fixture, and the
    fixture 5 s later with every GPU activity 10% slower (so their totals differ)."""
    import copy
    from decimal import Decimal

    from rawtrace import load_kineto_json

    a = load_kineto_json()
    b = copy.deepcopy(a)
    for e in b["traceEvents"]:
        if "ts" in e:
            e["ts"] += 5_000_000
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            e["dur"] = (e["dur"] * Decimal("1.1")).quantize(Decimal("0.001"))
    run.mkdir(parents=True)

    def plain(v):  # Decimal -> float: JSON numbers again (µs with 3 decimals fit exactly)
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return float(v) if isinstance(v, Decimal) else v

    for doc, name in zip((a, b), names):
        (run / name).write_bytes(gzip.compress(json.dumps(plain(doc)).encode()))
    # expected numbers from the files as written
    return tuple(load_kineto_json(run / name) for name in names)


def _per_rank_step(doc) -> dict:
    from rawtrace import kineto

    out: dict = {}
    for k in kineto(doc).kernels:
        if k.kind == "kernel" and k.step is not None:
            out[k.step] = out.get(k.step, 0) + k.dur
    return out


def test_several_traces_without_rank_keep_apart(tmp_path):
    # Two traces of one program were merged into the same steps with doubled totals.
    run = tmp_path / "runs" / "job"
    a, b = _two_programs(run, ["trace_a.json.gz", "trace_b.json.gz"])
    wh = tmp_path / "wh"
    summary = ingest([tmp_path / "runs"], wh)
    assert summary.ok, summary.errors
    assert [f.warning for f in summary.runs[0].files] == [
        f"no rank in the trace or its file name: rank {i} by file order, one per file" for i in (0, 1)]
    con = catalog.connect(wh)
    got: dict = {}
    for rank, step, ns in con.execute(
            "SELECT rank, step, sum(duration_ns) FROM kernels WHERE kind = 'kernel' AND step IS NOT NULL "
            "GROUP BY ALL ORDER BY ALL").fetchall():
        got.setdefault(rank, {})[step] = ns
    want_a, want_b = _per_rank_step(a), _per_rank_step(b)
    assert len(want_a) == 3 and want_a != want_b
    assert got == {0: want_a, 1: want_b}
    assert con.execute("SELECT path, json_extract(metadata, '$.rank')::INT FROM files ORDER BY path").fetchall() == [
        ("trace_a.json.gz", 0), ("trace_b.json.gz", 1)]
    con.close()
    # the report of that run against itself finds nothing
    from tracedb.report import build_report

    rep = build_report(wh, ["job"], ["job"])
    assert not rep.has_regression and not rep.with_status("improvement")


def test_rank_from_file_name(tmp_path):
    run = tmp_path / "runs" / "job"
    _two_programs(run, ["host_7.pt.trace.json.gz", "rank3.json.gz"])
    summary = ingest([tmp_path / "runs"], tmp_path / "wh")
    assert summary.ok and [f.warning for f in summary.runs[0].files] == [None, None]
    con = catalog.connect(tmp_path / "wh")
    assert con.execute("SELECT source_file, min(rank), max(rank) FROM kernels GROUP BY 1 ORDER BY 1").fetchall() == [
        ("host_7.pt.trace.json.gz", 7, 7), ("rank3.json.gz", 3, 3)]
