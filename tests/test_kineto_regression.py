"""The JSON readers' tables, checked two ways on every Kineto / Chrome-trace file in
tests/data: against their own past output (`kineto_regression.py`: a labelled
regression record of main ecdab84, order-free; each file is compared with it in
tests/test_json_reader_oracle.py, from the one read that module's own record needs,
not from a second read here), and, for the hand-written edge trace,
against numbers worked out from the raw JSON with `json` + `Decimal` (an oracle sharing
no code with the readers): nanoseconds past 2^53 exact, more than 3 decimals rounded
half-even."""

from __future__ import annotations

import json
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path


from kineto_regression import RECORD, json_traces, key

EDGE = Path(__file__).parent / "data" / "kineto_edge_times" / "absolute_epoch_us.json"


def test_record_covers_every_json_trace():
    assert sorted(json.loads(RECORD.read_text())) == [key(p) for p in json_traces()]


def _ns(text: str) -> int:
    return int((Decimal(text) * 1000).to_integral_value(ROUND_HALF_EVEN))


def test_edge_times_exact_from_the_raw_json():
    from tracedb.formats import kineto
    from tracedb.formats.base import ReadContext

    raw = json.loads(EDGE.read_text(), parse_float=str, parse_int=str)["traceEvents"]
    want: dict[str, set] = {"nodes": set(), "kernels": set(), "runtime_calls": set(), "allocations": set()}
    table = {"cpu_op": "nodes", "kernel": "kernels", "gpu_memcpy": "kernels", "cuda_runtime": "runtime_calls"}
    for ev in raw:
        t = "allocations" if ev.get("name") == "[memory]" else table.get(ev.get("cat"))
        if t == "allocations":
            want[t].add((_ns(ev["ts"]), None))
        elif t:
            want[t].add((_ns(ev["ts"]), _ns(ev["dur"])))
    got: dict[str, set] = {t: set() for t in want}
    for t, batch in kineto.read(EDGE, ReadContext("r", "f")):
        if t in got:
            d = batch.to_pydict()
            starts = d["ts_ns"] if t == "allocations" else d["start_ns"]
            durs = d.get("duration_ns", [None] * len(starts))
            got[t] |= set(zip(starts, durs))
    assert got == want
    assert max(s for s, _ in got["nodes"]) > 1 << 60  # past 2^53: no float holds these
    assert (1790857026123456789, 10000) in got["nodes"]  # 10.0005 µs -> 10000 ns (half-even)
