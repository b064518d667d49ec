"""Pass 1 of a Kineto file past `kineto.KEEP_CHARS` decodes the events as `_Ev1` (args:
only the keys pass 1 reads), pass 2 decodes them again in full; a smaller file's pass 1
decodes full `_Ev`s and keeps them for pass 2. Both must give the same tables and the
same errors: every Kineto fixture and a file of odd events are read with KEEP_CHARS 0
(the lean type from the second piece on, in pieces of a few events) and with every piece
kept. Also: a node batch whose shapes are converted to Arrow a few pieces at a time
names the row and column Arrow refuses as a whole-batch conversion did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracedb.errors import TraceFormatError

DATA = Path(__file__).parent / "data"
FIXTURES = sorted(p for d in DATA.iterdir() if d.name.startswith(("hta_", "kineto_"))
                  for p in d.iterdir() if p.name.endswith((".json", ".json.gz")))


def _read(path: Path) -> dict[str, list[dict]] | str:
    from tracedb.formats import kineto
    from tracedb.formats.base import ReadContext

    out: dict[str, list[dict]] = {}
    try:
        for table, batch in kineto.read(path, ReadContext("r", "f")):
            out.setdefault(table, []).extend(batch.to_pylist())
    except TraceFormatError as e:
        return f"error: {e}"
    return out


def _both(path: Path, monkeypatch, chunk: int = 700) -> tuple[object, object]:
    from tracedb.formats import kineto

    monkeypatch.setattr(kineto, "CHUNK_CHARS", chunk)  # many pieces
    monkeypatch.setattr(kineto, "KEEP_CHARS", 1 << 40)
    kept = _read(path)
    monkeypatch.setattr(kineto, "KEEP_CHARS", 0)
    lean = _read(path)
    return kept, lean


def test_the_fixtures_read_the_same_with_a_lean_pass_1(monkeypatch):
    assert len(FIXTURES) >= 12
    for path in FIXTURES:
        kept, lean = _both(path, monkeypatch, 8192)
        assert isinstance(kept, dict) and sum(map(len, kept.values())) > 10, path
        assert kept == lean, path


def _op(k: int, args, **extra) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": f"aten::op{k}", "pid": 1, "tid": 7,
            "ts": 1000 + 10 * k, "dur": 5, "args": args, **extra}


def _doc(events: list[dict]) -> dict:
    return {"baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": events}


def _odd_events() -> list[dict]:
    ev = [_op(k, {"External id": k, "Record function id": k, "Input Dims": [[2, k]], "Input type": ["float"]})
          for k in range(40)]
    ev += [_op(40, {"external id": 40}), _op(41, None), _op(42, {}), _op(43, []),  # (no args: [] and None)
           _op(44, {"External id": None, "external id": 44, "Input Dims": [[1], [2, [3]]]})]
    ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 7, "ts": 1101,
            "dur": 2, "args": {"External id": 5, "correlation": 900, "size": "64"}},
           {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 3, "ts": 1200, "dur": 3,
            "args": {"External id": 5, "correlation": 900, "device": 0, "stream": 3, "grid": [1, 1, 1]}},
           {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 3, "ts": 1210, "dur": 3,
            "args": {"correlation": 901, "device": 1.5, "bytes": 8}},
           {"ph": "X", "cat": "cuda_sync", "name": "sync", "pid": 0, "tid": 3, "ts": 1220, "dur": 1,
            "args": {"correlation": 900, "device": 0, "stream": 3}},
           {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 7, "ts": 1230,
            "args": {"Bytes": 64, "Device Type": 1, "Device Id": 0, "Addr": 9, "Total Allocated": 64}},
           {"ph": "X", "cat": "python_function", "name": "f", "pid": 1, "tid": 7, "ts": 1240, "dur": 1,
            "args": ["not", "an", "object", 1.5]},
           {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 7, "ts": 990,
            "dur": 600, "args": {"External id": 99}}]
    return ev


@pytest.mark.parametrize("case", ["plain", "nan_time", "list_args_op", "str_args_op", "non_str_name",
                                  "activity_list_args"])
def test_odd_events_read_the_same_with_a_lean_pass_1(case, tmp_path, monkeypatch):
    events = _odd_events()
    if case == "nan_time":  # the standard library decodes that piece (msgspec refuses NaN)
        events[30]["dur"] = float("nan")
    elif case == "list_args_op":
        events[35]["args"] = [1, 2]
    elif case == "str_args_op":  # (the standard library decodes that piece for `_Ev1`)
        events[34]["args"] = "x"
    elif case == "non_str_name":
        events[36]["name"] = 17
    elif case == "activity_list_args":
        events[46]["args"] = ["x"]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(_doc(events)))  # (json writes NaN as NaN)
    kept, lean = _both(path, monkeypatch)
    assert kept == lean
    if case == "plain":
        assert len(kept["nodes"]) == 45 and len(kept["kernels"]) == 2 and len(kept["allocations"]) == 1
        [kernel] = [r for r in kept["kernels"] if r["name"] == "k"]
        assert kernel["node_name"] == "aten::op10" and kernel["link"] == "launch"  # its call (900) in op10
        [op] = [r for r in kept["nodes"] if r["node_name"] == "aten::op44"]
        assert op["correlation_id"] == 44 and op["input_shapes"] == [[1], None]
    else:
        assert isinstance(kept, str) and kept.startswith("error: ")
        assert {"nan_time": "#30", "list_args_op": "#35", "str_args_op": "#34", "non_str_name": "#36",
                "activity_list_args": "#46"}[case] in kept


def test_a_shape_arrow_refuses_is_named_by_its_row(tmp_path, monkeypatch):
    from tracedb.formats import kineto

    monkeypatch.setattr(kineto, "CHUNK_CHARS", 700)
    monkeypatch.setattr(kineto, "SEAL_OPS", 8)  # converted a few pieces at a time
    events = [_op(k, {"External id": k, "Input Dims": [[2, 3]], "Input type": ["float"]}) for k in range(60)]
    events[50]["args"]["Input Dims"] = [[1 << 64]]  # past int64: pieces before it were converted
    path = tmp_path / "big_dim.json"
    path.write_text(json.dumps(_doc(events)))
    got = _read(path)
    assert isinstance(got, str) and "nodes row #50 (seq 50, node_name 'aten::op50'): field input_shapes" in got, got
