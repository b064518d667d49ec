"""HTA's analyses as canned SQL, checked against Holistic Trace Analysis itself.

HTA (`holistictraceanalysis`, the `test` extra) runs on the same trace folder. Its
TraceAnalysis drops each rank's last ProfilerStep by default (the last step is often cut
short), so the queries run with `step_to` = the last step but one. Where HTA differs, the
test shows why from the raw JSON (`rawtrace`, no tracedb code).
"""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from conftest import DATA
from rawtrace import KINETO_ACTIVITY, kineto_links, length, load_json_trace, rows, union, us_ns
from tracedb.ingest import ingest

pytestmark = [pytest.mark.slow,  # HTA parses each trace with pandas: seconds per file
              pytest.mark.filterwarnings("ignore:The inplace keyword")]  # inside HTA

TWO_RANKS = DATA / "hta_nccl_two_ranks"  # steps 551 and 552 of a 128-rank NCCL job
H200 = DATA / "kineto_h200_fp32"  # steps 1-3
ALEXNET = DATA / "hta_alexnet_ext_eq_corr"  # cuda_sync events, no ProfilerStep


def _hta(folder):
    logging.disable(logging.WARNING)  # HTA logs every file it parses
    try:
        from hta.trace_analysis import TraceAnalysis

        return TraceAnalysis(trace_dir=str(folder))
    finally:
        logging.disable(logging.NOTSET)


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    wh = tmp_path_factory.mktemp("hta") / "wh"
    for run, path in (("two_ranks", TWO_RANKS), ("h200", H200), ("alexnet", ALEXNET)):
        assert ingest([path], wh, run_id=run).ok
    return wh


@pytest.fixture(scope="module")
def hta_two_ranks():
    return _hta(TWO_RANKS)


def test_comm_comp_overlap_equals_htas(hta_two_ranks, wh):
    """Tolerance: none. HTA rounds the percentage to 2 decimals, as the query does; these
    traces have whole-µs timestamps, so HTA's µs arithmetic loses nothing here."""
    want = {int(r["rank"]): r["comp_comm_overlap_pctg"]
            for r in hta_two_ranks.get_comm_comp_overlap(visualize=False).to_dict("records")}
    got = rows("comm_comp_overlap", wh, run_id="two_ranks", step_to=551)
    assert {r["rank"]: r["overlap_pct"] for r in got} == want == {0: 11.81, 1: 20.05}
    # without the step window: both steps (HTA has no way to ask for that)
    assert [r["overlap_pct"] for r in rows("comm_comp_overlap", wh, run_id="two_ranks")] == [14.95, 19.93]


def test_kernel_type_breakdown_equals_htas(hta_two_ranks, wh):
    """Tolerance: none (whole-µs traces). HTA sums the per-rank table over ranks."""
    kernel_types, _ = hta_two_ranks.get_gpu_kernel_breakdown(visualize=False)
    want = {r["kernel_type"].lower(): int(r["sum"]) * 1000 for r in kernel_types.to_dict("records")}
    got = Counter()
    for r in rows("kernel_type_breakdown", wh, run_id="two_ranks", step_to=551):
        got[r["kernel_types"]] += r["time_ns"]
    assert dict(got) == want
    assert want["communication"] == 305_584_000 and want["computation overlapping communication"] == 56_747_000


def test_temporal_breakdown_equals_htas(hta_two_ranks, wh):
    want = {int(r["rank"]): (r["kernel_time(us)"] * 1000, r["idle_time(us)"] * 1000,
                             r["compute_time(us)"] * 1000, r["non_compute_time(us)"] * 1000,
                             r["idle_time_pctg"], r["compute_time_pctg"], r["non_compute_time_pctg"])
            for r in hta_two_ranks.get_temporal_breakdown(visualize=False).to_dict("records")}
    got = {r["rank"]: (r["span_ns"], r["idle_ns"], r["compute_ns"], r["non_compute_ns"],
                       r["idle_pct"], r["compute_pct"], r["non_compute_pct"])
           for r in rows("temporal_breakdown", wh, run_id="two_ranks", step_to=551)}
    assert got == want
    assert got[0][:2] == (600_058_000, 321_378_000)


def test_temporal_breakdown_where_hta_counts_syncs(wh):
    """HTA is wrong on traces with cuda_sync events: its GPU events include them, and it
    calls 'Stream Wait Event' computation. The raw JSON shows both differences exactly."""
    [h] = _hta(ALEXNET).get_temporal_breakdown(visualize=False).to_dict("records")
    [r] = rows("temporal_breakdown", wh, run_id="alexnet")
    doc = load_json_trace(ALEXNET / "alexnet.json.gz")
    gpu = [e for e in doc["traceEvents"] if e.get("ph") == "X"
           and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")]
    iv = lambda es: [(us_ns(e["ts"]), us_ns(e["ts"]) + us_ns(e["dur"])) for e in es]  # noqa: E731
    with_syncs = iv(gpu)
    waits = iv(e for e in gpu if e["name"] == "Stream Wait Event")
    kernels = iv(e for e in gpu if e["cat"] == "kernel")
    span_with_syncs = max(e for _, e in with_syncs) - min(s for s, _ in with_syncs)
    assert h["kernel_time(us)"] * 1000 == span_with_syncs == 12_996_011_000
    assert r["span_ns"] == 12_920_244_000 < span_with_syncs  # the first sync precedes every kernel
    compute = [k for k, e in zip(kernels, (e for e in gpu if e["cat"] == "kernel"))
               if "Memcpy" not in e["name"] and "Memset" not in e["name"]]
    assert r["compute_ns"] == length(union(compute)) == 10_630_000
    assert h["compute_time(us)"] * 1000 == length(union(compute + waits)) == 10_637_000


def test_kernel_launch_stats_match_htas_within_its_rounding(wh):
    """HTA turns ns timestamps into whole µs before subtracting, so each of its figures may
    be off by up to 2 µs (two roundings); launches compared one by one, by correlation.
    HTA counts only cudaLaunchKernel(ExC), cudaMemcpyAsync and cudaMemsetAsync launches
    (the 78 cuLaunchKernel ones of this trace are missing from it)."""
    [df] = _hta(H200).get_cuda_kernel_launch_stats(visualize=False).values()
    want = {int(r["correlation"]): r for r in df.to_dict("records")}
    got = {r["correlation_id"]: r for r in rows("kernel_launch_stats", wh, run_id="h200", step_to=2)}
    hta_calls = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")
    assert set(want) == {c for c, r in got.items() if r["launch_call"] in hta_calls}
    assert len(want) == 576 and Counter(r["launch_call"] for r in got.values())["cuLaunchKernel"] == 52
    for c, h in want.items():
        r = got[c]
        assert abs(r["cpu_duration_ns"] / 1000 - h["cpu_duration"]) < 2
        assert abs(r["gpu_duration_ns"] / 1000 - h["gpu_duration"]) < 2
        assert abs(r["launch_delay_ns"] / 1000 - h["launch_delay"]) < 2


def test_idle_time_breakdown_equals_htas(hta_two_ranks, wh):
    """Tolerance: none (whole-µs traces). HTA lists categories with no gap as 0."""
    df, _ = hta_two_ranks.get_idle_time_breakdown(ranks=[0, 1], visualize=False)
    want = {(int(r["rank"]), int(r["stream"]), r["idle_category"]): int(r["idle_time"]) * 1000
            for r in df.to_dict("records") if r["idle_time"]}
    got = {(r["rank"], r["stream"], r["category"]): r["idle_ns"]
           for r in rows("idle_time_breakdown", wh, run_id="two_ranks", step_to=551) if r["idle_ns"]}
    assert got == want
    assert want[(0, 7, "host_wait")] == 213_825_000


def test_queue_length_summary_equals_htas(hta_two_ranks, wh):
    """Tolerance: the mean to 4 decimals (the query rounds); the rest exact."""
    summary = hta_two_ranks.get_queue_length_summary(ranks=[0, 1]).reset_index()
    summary.columns = ["_".join(c for c in col if c) for col in summary.columns]
    want = {(int(r["rank"]), int(r["stream"])): (
        int(r["queue_length_count"]), round(r["queue_length_mean"], 4), r["queue_length_min"],
        r["queue_length_25%"], r["queue_length_50%"], r["queue_length_75%"], r["queue_length_max"])
        for r in summary.to_dict("records")}
    got = {(r["rank"], r["stream"]): (r["changes"], r["mean"], r["min"], r["p25"], r["p50"], r["p75"], r["max"])
           for r in rows("queue_length", wh, run_id="two_ranks", step_to=551)}
    assert got == want
    assert got[(0, 7)][-1] == 76  # up to 76 kernels queued on rank 0's compute stream


def test_memory_bandwidth_summary_against_htas(wh):
    """Copies: equal to 3 decimals (count, mean, min, max). Memsets: HTA truncates
    timestamps and durations to whole µs, so this trace's sub-µs memsets last 0 µs, which
    HTA then stretches to 1 µs; its series of changes gains or loses a point where the
    stretched intervals meet. Min and max agree; the point count may differ by one."""
    summary = _hta(H200).get_memory_bw_summary(ranks=[0]).reset_index()
    summary.columns = ["_".join(c for c in col if c) for col in summary.columns]
    want = {r["name"]: (int(r["memory_bw_gbps_count"]), round(r["memory_bw_gbps_mean"], 3),
                        round(r["memory_bw_gbps_min"], 3), round(r["memory_bw_gbps_max"], 3))
            for r in summary.to_dict("records")}
    got = {r["copy_type"]: (r["points"], r["mean_gbps"], r["min_gbps"], r["max_gbps"])
           for r in rows("memory_bandwidth", wh, run_id="h200", step_to=2)}
    assert set(got) == set(want) == {"Memcpy DtoD", "Memset"}
    assert got["Memcpy DtoD"] == want["Memcpy DtoD"] == (24, 1852.711, 1683.108, 1924.103)
    (n, mean, lo, hi), (hn, hmean, hlo, hhi) = got["Memset"], want["Memset"]
    assert (lo, hi) == (hlo, hhi) and abs(n - hn) <= 1 and mean == pytest.approx(hmean, rel=0.02)


def test_stragglers_name_htas_straggler(hta_two_ranks, wh):
    """HTA's candidate (1 of 2 ranks) is the rank our query ranks first; the lateness is
    checked against the raw JSON: NCCL kernels matched across ranks by step (of the op
    that launched them), stream, name and order."""
    assert hta_two_ranks.get_potential_stragglers(num_candidates=1) == [1]
    got = rows("stragglers", wh, run_id="two_ranks", step_to=551)
    assert [r["rank"] for r in got] == [1, 0]
    starts = {}
    for rank in (0, 1):
        doc = load_json_trace(TWO_RANKS / f"rank-{rank}.json.gz")
        ev = doc["traceEvents"]
        step551 = next(e for e in ev if e.get("name") == "ProfilerStep#551")
        lo, hi = us_ns(step551["ts"]), us_ns(step551["ts"]) + us_ns(step551["dur"])
        kernels = [e for e in ev if e.get("ph") == "X" and e.get("cat") in KINETO_ACTIVITY]  # as kineto_links
        seen = Counter()
        calls = {c["args"]["correlation"]: us_ns(c["ts"]) for c in ev
                 if c.get("cat") == "cuda_runtime" and "correlation" in c.get("args", {})}
        for e, (_, _, op, _) in zip(kernels, kineto_links(doc)):
            # the launching op's step, else the launch call's (as the reader assigns steps)
            when = us_ns(ev[op]["ts"]) if op is not None else calls.get(e["args"]["correlation"])
            if "nccl" in e["name"] and when is not None and lo <= when < hi:
                key = (e["args"]["stream"], e["name"])
                seen[key] += 1
                starts.setdefault(key + (seen[key],), {})[rank] = us_ns(e["ts"])
    late = {r: [s[r] - min(s.values()) for s in starts.values() if r in s] for r in (0, 1)}
    by_rank = {r["rank"]: r for r in got}
    for rank in (0, 1):
        assert by_rank[rank]["collectives"] == len(late[rank])
        assert by_rank[rank]["mean_lateness_ns"] == round(sum(late[rank]) / len(late[rank]), 1)
        assert by_rank[rank]["max_lateness_ns"] == max(late[rank])
    assert by_rank[1]["times_last"] == 5 and by_rank[1]["max_lateness_ns"] == 164_191_000
