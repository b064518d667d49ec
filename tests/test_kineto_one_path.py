"""The Kineto reader has one code path for every file size (issues 25 and 29): a file of
more than 8 MiB of JSON, which used to take a second, dict-based reader, is read by the
same typed-struct passes as a small one; only where pass 2's events come from differs
(kept from pass 1 for a file of up to `kineto.KEEP_CHARS`, decoded again for a larger one).

Scenario: the H200 fixture's events replicated three times (12 MB of JSON), each copy
moved on in time and given its own ids and step numbers, so every kernel links to its
own copy's op. Checked against `rawtrace.kineto` (plain `json` with `Decimal` numbers,
no tracedb code) and between the two sources of pass 2's events.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from collections import Counter
from decimal import Decimal
from pathlib import Path

import msgspec
import pytest

import rawtrace

FIXTURE = Path(__file__).parent / "data" / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"
COPIES = 3
ID_SHIFT = 10_000_000
STEP_SHIFT = 100
_STEP = re.compile(r"ProfilerStep#(\d+)$")


def _replicate(doc: dict, copies: int) -> dict:
    """`doc` with its events repeated `copies` times: copy r moved on by r spans of the
    trace (exact Decimal µs), its External ids, correlations and flow ids by r * ID_SHIFT,
    its ProfilerStep numbers by r * STEP_SHIFT; the `M` events once."""
    events = doc["traceEvents"]
    timed = [e for e in events if "ts" in e]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    out = [e for e in events if e.get("ph") == "M"]
    for r in range(copies):
        for e in events:
            if e.get("ph") == "M":
                continue
            e = copy.deepcopy(e)
            if "ts" in e:
                e["ts"] += r * span
            args = e.get("args") or {}
            for k in ("External id", "correlation"):
                if type(args.get(k)) is int:
                    args[k] += r * ID_SHIFT
            if type(e.get("id")) is int:
                e["id"] += r * ID_SHIFT
            m = _STEP.match(str(e.get("name")))
            if m:
                e["name"] = f"ProfilerStep#{int(m[1]) + r * STEP_SHIFT}"
            out.append(e)
    return {**doc, "traceEvents": out}


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> tuple[Path, dict]:
    with gzip.open(FIXTURE, "rt") as f:
        doc = _replicate(json.load(f, parse_float=Decimal), COPIES)
    path = tmp_path_factory.mktemp("kineto_one_path") / "replicated.json"
    path.write_bytes(msgspec.json.Encoder(decimal_format="number").encode(doc))  # Decimals as exact numbers
    return path, json.loads(path.read_text(), parse_float=Decimal)


def _tables(path: Path) -> dict[str, list[dict]]:
    from tracedb.formats import kineto
    from tracedb.formats.base import ReadContext

    out: dict[str, list[dict]] = {}
    for table, batch in kineto.read(path, ReadContext("r", "f")):
        out.setdefault(table, []).extend(batch.to_pylist())
    return out


def test_a_file_past_8_mib_matches_the_raw_json(big, monkeypatch):
    from tracedb.formats import kineto

    path, doc = big
    assert path.stat().st_size > kineto.KEEP_CHARS  # decoded twice, not kept
    monkeypatch.setattr(kineto, "SPILL_BYTES", 0)  # the link state spilled to disk and joined by DuckDB,
    monkeypatch.setattr(kineto, "SPILL_ROWS", 997)  # written and read back in many slices
    tables = _tables(path)
    want = rawtrace.kineto(doc)
    assert len(want.kernels) == COPIES * 1202 and len(want.nodes) == COPIES * 7245
    got_kernels = Counter((r["device"], r["stream"], r["kind"], r["name"], r["node_name"], r["start_ns"],
                           r["duration_ns"], r["step"], r["bytes"], r["copy_kind"], r["launch_start_ns"])
                          for r in tables["kernels"])
    assert got_kernels == Counter((a.device, a.stream, a.kind, a.name, a.node, a.start, a.dur, a.step, a.bytes,
                                   a.copy_kind, a.launch) for a in want.kernels)
    linked = [r for r in tables["kernels"] if r["launch_start_ns"] is not None]
    assert len(linked) == COPIES * 942 and {r["link"] for r in linked} == {"launch"}  # by the launch call's op
    ops = {e["args"]["External id"]: e["name"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op"}
    calls = [r for r in tables["runtime_calls"] if r["external_id"] in ops]
    assert len(calls) > COPIES * 900 and all(r["node_name"] == ops[r["external_id"]] for r in calls)
    got_nodes = Counter((r["node_name"], r["start_ns"], r["duration_ns"], r["step"]) for r in tables["nodes"])
    assert got_nodes == Counter((a.name, a.start, a.dur, a.step) for a in want.nodes)
    assert sorted((r["step"], r["start_ns"], r["start_ns"] + r["duration_ns"]) for r in tables["steps"]) == \
        sorted((n, s, e) for n, (s, e) in want.steps.items())
    assert max(r["start_ns"] for r in tables["nodes"]) > 1 << 53  # ns past a float's exact integers


def test_kept_and_decoded_again_give_the_same_tables(big, monkeypatch):
    """Pass 2 over pass 1's kept pieces and over a second decoding: the same rows, in the
    same order, in every table."""
    from tracedb.formats import kineto

    path, _ = big
    streams = []
    real = kineto.StructStream

    def counted(*a, **k):
        streams.append(1)
        return real(*a, **k)

    monkeypatch.setattr(kineto, "StructStream", counted)
    again = _tables(path)
    assert len(streams) == 2  # decoded twice
    monkeypatch.setattr(kineto, "KEEP_CHARS", 1 << 40)
    streams.clear()
    kept = _tables(path)
    assert len(streams) == 1  # decoded once, pass 2 over the kept pieces
    assert kept.keys() == again.keys() and len(kept) >= 6
    for t in kept:
        assert kept[t] == again[t], t
