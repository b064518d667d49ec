"""One Kineto file per rank in a run folder is one multi-rank run; ranks stay apart."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict

import pytest

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
    # both ranks' rows sit in the run's one kernels file (the ingest merged the two ranks'),
    # each rank's in the order its trace gave them
    import pyarrow.parquet as pq

    from tracedb.lake import Lake

    [path] = Lake(wh).live_files("kernels")[0]
    rows = pq.read_table(wh / path, columns=["rank", "device", "kind"]).to_pylist()
    assert sum(r["kind"] == "kernel" and r["device"] == "GPU:0" for r in rows) == 2 * KERNELS_PER_RANK
    assert {r["rank"] for r in rows} == {0, 1}
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


# ---- per-step figures per rank (issue 11 #3): step_times, gpu_busy_idle, kernel_steps,
# fleet_trend and the report never merge two ranks' steps.

def _raw_steps(doc) -> dict:
    """Per step of one file, from its raw JSON (rawtrace, no tracedb code): host step time
    (the ProfilerStep#N marker's span, issue 24 item 3), device step time (first GPU activity to the next step's
    first; the last step: to its own last end), busy time (union of the step's GPU
    intervals), GPU kernel time, kernel and host op counts."""
    import rawtrace

    t = rawtrace.kineto(doc)
    host, gpu, kernel_ns, kernels = defaultdict(list), defaultdict(list), defaultdict(int), defaultdict(int)
    for n in t.nodes:
        host[n.step].append((n.start, n.end))
    for k in t.kernels:
        gpu[k.step].append((k.start, k.end))
        if k.kind == "kernel":
            kernel_ns[k.step] += k.dur
            kernels[k.step] += 1
    steps = sorted(s for s in gpu if s is not None)
    first = {s: min(b for b, _ in gpu[s]) for s in steps}
    islands = rawtrace.union(k_ for v in gpu.values() for k_ in v)  # every GPU interval of the file
    last_end = max(e for _, e in islands)
    out, windows = {}, {}
    for i, s in enumerate(steps):
        nxt = first[steps[i + 1]] if i + 1 < len(steps) else max(e for _, e in gpu[s])
        # gpu_busy_idle's window: to the next step's first activity (the last: the device's last end)
        w = (first[s], first[steps[i + 1]] if i + 1 < len(steps) else last_end)
        windows[s] = (w[1] - w[0], rawtrace.intersect(w, islands))
        out[s] = {"host_step_ns": t.steps[s][1] - t.steps[s][0],
                  "device_step_ns": nxt - first[s],
                  "device_busy_ns": rawtrace.length(rawtrace.union(gpu[s])),
                  "gpu_kernel_ns": kernel_ns[s], "kernels": kernels[s], "nodes": len(host[s])}
    return out, windows


STEP_COLUMNS = ("host_step_ns", "device_step_ns", "device_busy_ns", "gpu_kernel_ns", "kernels", "nodes")


@pytest.fixture(scope="module")
def two_rank_wh(tmp_path_factory):
    """Run `job`: rank0 = the H200 fixture, rank1 = the fixture 5 s later with GPU work 10%
    slower; run `twins`: the fixture copied twice as rank0/rank1; run `single`: the fixture
    alone (no rank)."""
    tmp = tmp_path_factory.mktemp("ranks")
    a, b = _two_programs(tmp / "runs" / "job", ["rank0.json.gz", "rank1.json.gz"])
    twins = tmp / "runs" / "twins"
    twins.mkdir()
    src = scenario("kineto_h200_fp32")
    for name in ("rank0.json.gz", "rank1.json.gz"):
        shutil.copy(src, twins / name)
    (tmp / "runs" / "single").mkdir()
    shutil.copy(src, tmp / "runs" / "single" / "trace.json.gz")
    wh = tmp / "wh"
    summary = ingest([tmp / "runs"], wh)
    assert summary.ok, summary.errors
    (sa, wa), (sb, wb) = _raw_steps(a), _raw_steps(b)
    return wh, {0: sa, 1: sb}, {0: wa, 1: wb}


def test_step_times_per_rank_equal_each_files_own(two_rank_wh):
    from rawtrace import rows

    wh, want, windows = two_rank_wh
    got = {}
    for r in rows("step_times", wh, run_id="job"):
        if r["step"] is not None:
            got.setdefault(r["rank"], {})[r["step"]] = {c: r[c] for c in STEP_COLUMNS}
    assert want[0] != want[1] and sorted(want[0]) == [1, 2, 3]
    assert got == want
    # the numbers behind it: ~21 ms host steps, ~63 ms device steps; rank 1's kernels
    # last 10% longer (same starts, so the same device step time)
    assert [round(want[0][s]["host_step_ns"] / 1e6) for s in (1, 2, 3)] == [22, 21, 21]
    assert [round(want[r][s]["device_step_ns"] / 1e6) for r in (0, 1) for s in (1, 2, 3)] == [63] * 6
    assert [want[1][s]["gpu_kernel_ns"] / want[0][s]["gpu_kernel_ns"] for s in (1, 2, 3)] == [
        pytest.approx(1.1, abs=1e-4)] * 3
    # gpu_busy_idle's windows are per rank too (busy: all of the rank's GPU activity
    # clipped to the window, so rank 1's longer kernels spill into the next window)
    busy = {(r["rank"], r["step"]): (r["device_step_ns"], r["busy_ns"])
            for r in rows("gpu_busy_idle", wh, run_id="job") if r["step"] is not None}
    assert busy == {(rank, s): win for rank, ws in windows.items() for s, win in ws.items()}
    assert [busy[(0, s)][1] for s in (1, 2, 3)] == [want[0][s]["device_busy_ns"] for s in (1, 2, 3)]
    # kernel_steps: each rank's GPU kernel time per step
    ks = defaultdict(int)
    for r in rows("kernel_steps", wh, run_id="job", kind="kernel"):
        if r["step"] is not None:
            ks[(r["rank"], r["step"])] += r["total_ns"]
    assert dict(ks) == {(rank, s): v["gpu_kernel_ns"] for rank, steps in want.items() for s, v in steps.items()}


def test_single_trace_rank_null_and_twins(two_rank_wh):
    from rawtrace import rows

    wh, want, _ = two_rank_wh
    single = [r for r in rows("step_times", wh, run_id="single") if r["step"] is not None]
    assert [r["rank"] for r in single] == [None] * 3
    assert {r["step"]: {c: r[c] for c in STEP_COLUMNS} for r in single} == want[0]
    twins = [r for r in rows("step_times", wh, run_id="twins") if r["step"] is not None]
    assert [(r["rank"], r["step"]) for r in twins] == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)]
    assert [{c: r[c] for c in STEP_COLUMNS} for r in twins] == [want[0][s] for s in (1, 2, 3)] * 2
    # fleet_trend: 3 steps per run, means over every rank's steps
    trend = {r["run_id"]: r for r in rows("fleet_trend", wh)}
    for run, ranks in (("single", [0]), ("twins", [0, 0]), ("job", [0, 1])):
        vals = [want[rank][s] for rank in ranks for s in (1, 2, 3)]
        assert trend[run]["steps"] == 3
        for col, key in (("mean_host_step_ns", "host_step_ns"), ("mean_device_step_ns", "device_step_ns")):
            assert trend[run][col] == pytest.approx(sum(v[key] for v in vals) / len(vals), abs=0.051)


def test_report_samples_per_rank(two_rank_wh):
    from tracedb.report import build_report
    from tracedb.report import metrics as M

    wh, want, _ = two_rank_wh
    rep = build_report(wh, ["single"], ["twins"])
    kt = next(m for m in rep.metrics if m.kind == M.KERNEL_TIME and m.device == "GPU:0")
    per_step = [float(want[0][s]["gpu_kernel_ns"]) for s in (1, 2, 3)]
    assert kt.base.runs == {"single": per_step}
    assert kt.cand.runs == {"twins": per_step * 2}  # 6 samples, never 3 doubled ones
    dev = next(m for m in rep.metrics if m.kind == M.DEVICE_STEP and m.device == "GPU:0")
    assert dev.cand.runs["twins"] == [float(want[0][s]["device_step_ns"]) for s in (1, 2, 3)] * 2
    host = next(m for m in rep.metrics if m.kind == M.HOST_STEP)
    assert host.cand.runs["twins"] == [float(want[0][s]["host_step_ns"]) for s in (1, 2, 3)] * 2
    assert not rep.has_regression and not rep.with_status("improvement")


@pytest.mark.parametrize("base,cand", [("twins", "twins"), ("job", "job"), ("single", "twins"), ("twins", "single")])
def test_report_cli_of_ranked_runs_exits_0(two_rank_wh, base, cand):
    from typer.testing import CliRunner

    from tracedb.cli import app

    wh, _, _ = two_rank_wh
    r = CliRunner().invoke(app, ["report", "-w", str(wh), "-b", base, "-c", cand])
    assert r.exit_code == 0, r.output
