"""nccl_bandwidth against the raw JSON of a real NCCL trace (HTA has no bus bandwidth to
compare with): message bytes from the kernel's own Kineto args, nccl-tests' factors."""

from __future__ import annotations

from collections import defaultdict

from conftest import DATA
from rawtrace import load_json_trace, rows, us_ns
from tracedb.ingest import ingest

TRACE = DATA / "hta_nccl_allreduce" / "rank-0.json.gz"  # rank 0 of 2, all-reduce + broadcast
DTYPE_BYTES = {"Float": 4, "Long": 8}


def test_nccl_bandwidth_matches_raw(tmp_path):
    wh = tmp_path / "wh"
    assert ingest([TRACE], wh, run_id="ar").ok
    want = defaultdict(lambda: [0, 0])
    for e in load_json_trace(TRACE)["traceEvents"]:
        a = e.get("args") or {}
        if e.get("cat") == "kernel" and "Collective name" in a:
            size = max(a["In msg nelems"], a["Out msg nelems"]) * DTYPE_BYTES[a["dtype"]]
            w = want[(a["Collective name"], a["dtype"], size, a["Group size"])]
            w[0] += 1
            w[1] += us_ns(e["dur"])
    got = {(r["collective"], r["dtype"], r["message_bytes"], r["group_size"]): r
           for r in rows("nccl_bandwidth", wh, run_id="ar")}
    assert set(got) == set(want) and len(want) == 7
    for key, (n, ns) in want.items():
        r = got[key]
        factor = 2 * (key[3] - 1) / key[3] if key[0] == "allreduce" else 1
        assert (r["kernels"], r["total_ns"]) == (n, ns)
        assert r["algbw_gbps"] == round(key[2] * n / ns, 3)
        assert r["busbw_gbps"] == round(key[2] * n / ns * factor, 3)
    # the largest all-reduce (26,550,272 B x 3 in 7.21 ms) runs at 11.04 GB/s
    assert got[("allreduce", "Float", 26_550_272, 2)]["busbw_gbps"] == 11.04
