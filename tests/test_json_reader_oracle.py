"""The Kineto and Chrome-trace readers give the same tables as before their JSON decoding
was made faster (issue 12 item 4: msgspec, each event decoded once), on every JSON trace
in tests/data.

Two regression checks (despite the file names, neither is an oracle from the raw file:
both are the readers' own output, past or present; the independent oracles, plain `json`
on the raw traces, are tests/rawtrace.py's `kineto()` and `load_json_trace()` in
tests/test_format_kineto.py, tests/test_format_chrome_trace.py and the query tests):
- `data/json_reader_oracle.json` (past output): a hash of every table (rows as Python values), the row
  counts, the file's metadata and warnings, computed with the readers of commit 8e74452
  (standard-library `json`, two streaming passes) before the change. A deliberate change
  of a reader's rows changes these; regenerate with
  `python tests/test_json_reader_oracle.py > tests/data/json_reader_oracle.json` and say
  why in the commit.
- the same reader today, forced down the standard-library path (no msgspec, no decode
  once): both decodings must agree on every file, and on hand-made documents where
  msgspec and `json` differ (NaN, lone surrogates, control characters, a repeated
  `traceEvents` key), where the fast path has to step aside.
"""

from __future__ import annotations

import gc
import hashlib
import json
import sys
from pathlib import Path

import pytest

from kineto_regression import json_traces  # the one list of the JSON fixtures
from kineto_regression import key as _key

DATA = Path(__file__).parent / "data"
ORACLE = DATA / "json_reader_oracle.json"


def digest(path: Path) -> dict:
    """Hashes of what `formats.read` makes of the file (or its error)."""
    import pyarrow as pa

    from tracedb.errors import TraceFormatError
    from tracedb.formats import detect, read
    from tracedb.formats.base import ReadContext

    ctx = ReadContext(run_id="r", source_file=path.name)
    tables: dict[str, list] = {}
    try:
        for table, batch in read(path, ctx, detect(path).NAME):
            tables.setdefault(table, []).append(batch)
    except TraceFormatError as e:
        return {"error": str(e)}
    out = {t: f"{sum(b.num_rows for b in bs)}:" + hashlib.sha256(
        repr(pa.Table.from_batches(bs).to_pylist()).encode()).hexdigest()[:20] for t, bs in sorted(tables.items())}
    out["format"] = ctx.format
    out["metadata"] = hashlib.sha256(json.dumps(ctx.metadata, sort_keys=True, default=str).encode()).hexdigest()[:20]
    out["warnings"] = json.dumps(ctx.warnings, sort_keys=True)
    return out


@pytest.fixture
def stdlib_only(monkeypatch):
    """The readers as they were: the standard library's decoder, two streaming passes."""
    import msgspec

    from tracedb.formats import jsonstream

    def refuse(parse_float):
        def decode(*_):
            raise msgspec.DecodeError("forced: standard library path")
        return decode

    monkeypatch.setattr(jsonstream, "_msgspec_decoder", refuse)
    monkeypatch.setattr(jsonstream, "WHOLE_DECODE_BYTES", 0)


def test_oracle_covers_the_json_traces():
    expected = json.loads(ORACLE.read_text())
    assert sorted(expected) == [_key(p) for p in json_traces()]
    assert len(expected) >= 20  # the H200 fixtures, HTA's traces, fleet_dev, TF timelines


@pytest.mark.parametrize("path", json_traces(), ids=_key)
def test_tables_identical_to_the_reader_before_the_change(path):
    assert digest(path) == json.loads(ORACLE.read_text())[_key(path)]
    assert gc.get_freeze_count() == 0  # the decoded events were frozen only while read


def test_an_abandoned_read_unfreezes(monkeypatch):
    from tracedb import process
    from tracedb.formats import kineto
    from tracedb.formats.base import ReadContext

    monkeypatch.setattr(process, "OWN", True)  # as in `tracedb ingest` and its workers

    fixture = DATA / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"
    reader = kineto.read(fixture, ReadContext("r", "f"))
    next(reader)  # the fast path (kineto._fast) has read the whole file: nothing left frozen
    assert gc.get_freeze_count() == 0
    reader.close()
    monkeypatch.setattr(kineto, "_fast", lambda path, ctx: None)  # the general path freezes
    reader = kineto.read(fixture, ReadContext("r", "f"))
    next(reader)
    assert gc.get_freeze_count() > 0
    reader.close()
    assert gc.get_freeze_count() == 0


@pytest.fixture
def general_path(monkeypatch):
    """The Kineto reader without its fast path (`kineto._fast`): decoded once into dicts
    (Decimal numbers) when small, else streamed."""
    from tracedb.formats import kineto

    monkeypatch.setattr(kineto, "_fast", lambda path, ctx: None)


def test_the_kineto_fast_path_is_taken_and_steps_aside(tmp_path):
    from tracedb.formats import kineto
    from tracedb.formats.base import ReadContext

    fixture = DATA / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"
    ctx = ReadContext("r", "f")
    batches = kineto._fast(fixture, ctx)
    assert batches is not None
    assert sum(b.num_rows for t, b in batches if t == "nodes") == 7245  # the fixture's cpu_op events
    assert ctx.metadata["kineto"]["baseTimeNanoseconds"] == 1790857026000000000
    odd = {  # the general path words each one's error, or reads what the fast one does not keep
        "no_ts": '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op", "dur": 1}]}',
        "name_not_text": '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": 5, "ts": 1, "dur": 1}]}',
        "args_list": '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op", "ts": 1, "dur": 1, "args": [1]}]}',
        "float_size": '{"traceEvents": [{"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpy", "ts": 1, "dur": 1, '
                      '"args": {"size": 1.5}}]}',
        "no_kineto": '{"traceEvents": [{"ph": "X", "cat": "mine", "name": "op", "ts": 1, "dur": 1}]}',
        "big": '{"baseTimeNanoseconds": 9223372036854775000, "traceEvents": [{"ph": "X", "cat": "cpu_op", '
               '"name": "op", "ts": 1, "dur": 1}]}',
    }
    for name, text in odd.items():
        p = tmp_path / f"{name}.json"
        p.write_text(text, encoding="utf-8")
        ctx = ReadContext("r", "f")
        assert kineto._fast(p, ctx) is None, name
        assert ctx.metadata == {} and ctx.warnings == {}, name


@pytest.mark.parametrize("texts", [
    ["26", "4796273132357.979", "4796273132395.79", "-1.5", "0", "1e3", "1.5e-1", "1790857026123456.789"],
    ["1.2345", "1.2335", "2.0005", "7"],  # more than 3 decimals: Arrow refuses, each rounds half-even
    ["99999999999999999999.5", "1"],  # past decimal(19, 3): converted one by one
])
def test_kineto_bulk_ns_is_exact(texts):
    from decimal import ROUND_HALF_EVEN, Decimal

    import msgspec

    from tracedb.formats.kineto import _ns

    raws = [msgspec.json.decode(b"[" + t.encode() + b"]", type=list[msgspec.Raw])[0] for t in texts]
    expected = [int((Decimal(t) * 1000).to_integral_value(ROUND_HALF_EVEN)) for t in texts]
    if max(abs(e) for e in expected) >= 1 << 63:
        with pytest.raises(OverflowError):
            _ns(raws)
        return
    assert list(_ns(raws)) == expected
    assert expected[:2] == {"26": [26000, 4796273132357979], "1.2345": [1234, 1234]}[texts[0]]


def kineto_traces() -> list[Path]:
    from tracedb.formats import detect

    return [p for p in json_traces() if detect(p).NAME == "kineto"]


@pytest.mark.parametrize("path", kineto_traces(), ids=_key)
def test_kineto_fast_path_matches_the_general_path(path, request):
    from tracedb.formats import kineto
    from tracedb.formats.base import ReadContext, open_trace
    from tracedb.formats.jsonstream import WHOLE_DECODE_BYTES

    with open_trace(path) as f:
        small = len(f.read()) <= WHOLE_DECODE_BYTES
    # every small Kineto trace here is a usual one: the fast path reads it (hta_nccl_allreduce, 9.3 MB, streams)
    assert (kineto._fast(path, ReadContext("r", "f")) is not None) == small
    fast = digest(path)
    request.getfixturevalue("general_path")
    assert digest(path) == fast


@pytest.mark.parametrize("path", json_traces(), ids=_key)
def test_fast_decoding_matches_the_standard_library_path(path, request):
    fast = digest(path)
    request.getfixturevalue("stdlib_only")
    assert digest(path) == fast


def test_the_fast_path_is_taken_and_steps_aside(tmp_path):
    from tracedb.formats.jsonstream import decode_whole

    fixture = DATA / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"
    whole = decode_whole(fixture, floats="decimal")
    assert whole is not None and len(whole.events) == 13317
    assert whole.meta["baseTimeNanoseconds"] == 1790857026000000000
    assert decode_whole(fixture, limit=1 << 20) is None  # 4.1 MB of JSON: streams
    odd = {
        "nan": '{"traceEvents": [{"ph": "X", "ts": NaN, "dur": 1}]}',
        "surrogate": '{"traceEvents": [{"ph": "X", "name": "\\ud800", "ts": 1, "dur": 1}]}',
        "control": '{"traceEvents": [{"ph": "X", "name": "a\tb", "ts": 1, "dur": 1}]}',
        "repeated": '{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}], "traceEvents": [{"ph": "X", "ts": 2, "dur": 1}]}',
        "bom": '\ufeff{"traceEvents": []}',
        "not_objects": '{"traceEvents": [1, 2]}',
    }
    for name, text in odd.items():
        p = tmp_path / f"{name}.json"
        p.write_text(text, encoding="utf-8")
        assert decode_whole(p) is None, name


@pytest.mark.parametrize("doc", [
    '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a\\ud800", "ts": 1.5, "dur": 2, "args": {"x": NaN}}]}',
    # fractional device and size args: pass 1 read them as text when it streamed
    '{"traceEvents": [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 5, "tid": 1, '
    '"args": {"correlation": 7}}, {"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpyAsync", "ts": 6, "dur": 5, '
    '"tid": 1, "args": {"correlation": 8, "size": 1.5}}, {"ph": "X", "cat": "kernel", "name": "k", "ts": 1.2345, '
    '"dur": 1e3, "args": {"device": 0.5, "correlation": 7}}, {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", '
    '"ts": 20, "dur": 2, "args": {"device": 0, "correlation": 8}}]}',
    '{"deviceProperties": [], "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op", "ts": 1.5, "dur": 2}], '
    '"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op2", "ts": 3, "dur": 1}]}',
])
def test_odd_documents_read_the_same_either_way(tmp_path, doc, request):
    p = tmp_path / "t.json"
    p.write_text(doc, encoding="utf-8")
    fast = digest(p)
    request.getfixturevalue("general_path")
    assert digest(p) == fast
    request.getfixturevalue("stdlib_only")
    assert digest(p) == fast


@pytest.mark.parametrize("times", [("1.5", "2", "3.25"), ("1.2345", "1e3", "2.0005"), ("7", "1.5E+1", "-0.5")])
def test_fast_path_event_times_match_the_general_path(tmp_path, times, request):
    """The fast path converts the times of the events other than cpu_ops in bulk
    (`kineto._event_times`: Arrow, exact to the ns); where Arrow refuses one (more than
    3 decimals), all are decoded as the general path decodes them (and rounded as it
    rounds): the same rows either way, and the fast path reads each document."""
    from tracedb.formats import kineto
    from tracedb.formats.base import ReadContext

    ts, dur, mem = times
    doc = ('{"baseTimeNanoseconds": 1000, "traceEvents": ['
           '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 0.5, "dur": 50, "args": {"External id": 1}}, '
           f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": {ts}, "dur": {dur}, '
           '"args": {"correlation": 7, "External id": 1}}, '
           f'{{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": {ts}, "dur": {dur}, '
           '"args": {"device": 0, "stream": 7, "correlation": 7}}, '
           f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 0, "dur": {dur}}}, '
           f'{{"ph": "X", "cat": "gpu_user_annotation", "name": "range", "pid": 0, "tid": 7, "ts": {ts}, "dur": {dur}, '
           '"args": {"device": 0, "stream": 7}}, '
           f'{{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": {mem}, "s": "t", '
           '"args": {"Device Type": 1, "Device Id": 0, "Addr": 9, "Bytes": 512, "Total Allocated": 512, "Total Reserved": 1024}}, '
           f'{{"ph": "X", "cat": "cuda_sync", "name": "sync", "pid": 0, "tid": 7, "ts": {mem}, "dur": {dur}, '
           '"args": {"device": 0, "stream": 7, "correlation": 7}}, '
           f'{{"ph": "i", "cat": "python_function", "name": "inst", "pid": 1, "tid": 1, "ts": {mem}, "s": "t"}}]}}')
    p = tmp_path / "t.json"
    p.write_text(doc, encoding="utf-8")
    batches = kineto._fast(p, ReadContext("r", "f"))
    assert batches is not None  # the fast path reads it
    assert {t for t, _ in batches} >= {"kernels", "runtime_calls", "annotations", "allocations", "events", "steps"}
    fast = digest(p)
    request.getfixturevalue("general_path")
    assert digest(p) == fast


def test_fast_path_op_params_and_steps_match_the_general_path(tmp_path, request):
    """The fast path's inline op params (a text tid joins them, replacing an args `tid` in
    place; non-ASCII and DEL text spelled by json; nested TensorList dims kept; only known
    args: NULL) and its node steps (one Arrow pass a step: before, between, inside, at the
    end of, and after the steps) read as the general path reads them."""
    from tracedb.formats import kineto
    from tracedb.formats.base import ReadContext

    def op(name, ts, dur, args, tid=1):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}

    events = [
        op("ProfilerStep#3", 10, 10, {}), op("ProfilerStep#4", 25, 10, {}),
        op("before", 1, 1, {"External id": 1, "x": 1.50}),
        op("in3", 12.5, 1, {"External id": 2, "tid": 7, "z": "caf\u00e9"}, tid="main"),
        op("gap", 21, 1, {"External id": 3, "Input Dims": [[2, 3], [[1], [2]]], "Input type": ["float", "TensorList"]}),
        op("end3", 20, 1, {"external id": 4, "Input Dims": [[1]], "Input type": ["c10::Half"]}),
        op("in4", 34.999, 0.001, {"External id": 5, "d": "a\u007fb", "n": None, "l": [1.0, 2, "x"]}),
        op("after", 40, 1, {"External id": 6}, tid="t2"),
        op("plain", 26, 1, {"External id": 7}),
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"baseTimeNanoseconds": 1000, "traceEvents": events}), encoding="utf-8")
    batches = kineto._fast(p, ReadContext("r", "f"))
    assert batches is not None  # the fast path reads it
    nodes = dict(batches)["nodes"].to_pydict()
    by_name = dict(zip(nodes["node_name"], zip(nodes["step"], nodes["params"])))
    assert by_name["before"] == (None, '{"x":1.5}')
    assert by_name["in3"] == (3, '{"tid":"main","z":"caf\\u00e9"}')
    assert by_name["gap"][0] is None and '"Input Dims":[[2,3],[[1],[2]]]' in by_name["gap"][1]
    assert by_name["end3"] == (None, None)
    assert by_name["in4"] == (4, '{"d":"a\\u007fb","n":null,"l":[1.0,2,"x"]}')  # json escapes DEL
    assert by_name["after"] == (None, '{"tid":"t2"}') and by_name["plain"] == (4, None)
    fast = digest(p)
    request.getfixturevalue("general_path")
    assert digest(p) == fast


@pytest.mark.parametrize("chunk", [1, 7, 40, 1 << 20])
def test_struct_chunks_give_the_events_of_one_decoding(tmp_path, chunk):
    """`decode_structs(chunk_bytes=...)` cuts the array at `},{` between events; text that
    holds `},{` inside a string or a nested value makes a piece invalid, and the rest is
    decoded in one call: the same events in every case, top-level array or object."""
    import msgspec

    from tracedb.formats.jsonstream import decode_structs
    from tracedb.formats.kineto import _Ev

    events = [
        {"ph": "X", "cat": "cpu_op", "name": "a}, {b", "ts": 1, "dur": 2, "args": {"l": [{"x": 1}, {"y": 2}]}},
        {"ph": "X", "cat": "cpu_op", "name": "c},{\"d", "ts": 3.25, "dur": 4, "args": {"o": {"p": {}}}},
        {"ph": "i", "name": "}, {", "ts": 5, "s": "g"},
    ] + [{"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": 10 + i, "dur": 1, "args": {"correlation": i}}
         for i in range(20)]
    for doc in ({"baseTimeNanoseconds": 7, "traceEvents": events}, events):
        path = tmp_path / "t.json"
        path.write_text(json.dumps(doc, indent=1 if chunk == 7 else None), encoding="utf-8")
        whole = decode_structs(path, _Ev)
        pieces = decode_structs(path, _Ev, chunk_bytes=chunk)
        assert pieces.meta == whole.meta and not isinstance(pieces.events, list)
        got = list(pieces.events)
        assert msgspec.json.encode(got) == msgspec.json.encode(whole.events)
        assert len(got) == 23 and got[1].name == 'c},{"d'


def test_struct_chunks_raise_at_a_bad_event_and_the_kineto_fast_path_steps_aside(tmp_path):
    import msgspec

    from tracedb.formats import kineto
    from tracedb.formats.base import ReadContext
    from tracedb.formats.jsonstream import decode_structs

    good = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "ts": i, "dur": 1} for i in range(50)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": good + [{"ph": "X", "name": {"not": "text"}, "ts": 1}]}))
    assert decode_structs(path, kineto._Ev) is not None  # any value decodes (name: Any)
    path.write_text(json.dumps({"traceEvents": good + [[1, 2]]}))  # an event that is no object
    assert decode_structs(path, kineto._Ev) is None
    pieces = decode_structs(path, kineto._Ev, chunk_bytes=64)
    assert len(good) > 40  # several pieces come before the bad one
    with pytest.raises(msgspec.DecodeError):
        list(pieces.events)
    ctx = ReadContext("r", "f")
    assert kineto._fast(path, ctx) is None and ctx.metadata == {}


if __name__ == "__main__":  # regenerate the oracle (see the module docstring)
    sys.path.insert(0, str(Path(__file__).parent.parent))
    print(json.dumps({_key(p): digest(p) for p in json_traces()}, indent=1, sort_keys=True))
