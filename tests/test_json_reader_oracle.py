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
  `traceEvents` key), which the Kineto reader's struct decoding (`jsonstream.StructStream`)
  takes from the standard library event by event.
"""

from __future__ import annotations

import gc
import hashlib
import json
import sys
from pathlib import Path

import pytest

from kineto_regression import json_traces  # the one list of the JSON fixtures
from kineto_regression import RECORD, read_tables, sorted_digest
from kineto_regression import key as _key

DATA = Path(__file__).parent / "data"
ORACLE = DATA / "json_reader_oracle.json"
# Each file's digest by the fast path, as the test against the recorded oracle made it
# (its read is each file's costliest step; the comparison with the standard-library path
# takes it from here instead of reading the file that way again).
FAST: dict[Path, dict] = {}


def digest(path: Path, read: tuple | None = None) -> dict:
    """Hashes of what `formats.read` makes of the file (or its error). `read`: the file's
    `kineto_regression.read_tables`, when made already."""
    import pyarrow as pa

    tables, ctx = read or read_tables(path)
    if tables is None:
        return {"error": ctx}
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

    def refuse(*_):
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
    """Both past-output records, from one read of the file: this module's (commit 8e74452)
    and tests/kineto_regression.py's (main ecdab84, rows compared as sets)."""
    read = read_tables(path)
    FAST[path] = digest(path, read)
    assert FAST[path] == json.loads(ORACLE.read_text())[_key(path)]
    assert sorted_digest(path, read) == json.loads(RECORD.read_text())[_key(path)]
    assert gc.get_freeze_count() == 0  # the decoded events were frozen only while read


def test_an_abandoned_read_unfreezes(monkeypatch):
    from tracedb import process
    from tracedb.formats import chrome_trace, kineto
    from tracedb.formats.base import ReadContext

    monkeypatch.setattr(process, "OWN", True)  # as in `tracedb ingest` and its workers

    fixture = DATA / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"
    reader = kineto.read(fixture, ReadContext("r", "f"))
    next(reader)  # the Kineto reader made a kept file's batches before the first: nothing frozen
    assert gc.get_freeze_count() == 0
    reader.close()
    timeline = DATA / "chrome_trace_tf_timeline" / "timeline_step0.json"
    reader = chrome_trace.read(timeline, ReadContext("r", "f"))  # decoded once, frozen while read
    next(reader)
    assert gc.get_freeze_count() > 0
    reader.close()
    assert gc.get_freeze_count() == 0


def test_the_kineto_reader_reads_usual_files_and_names_odd_ones(tmp_path):
    """Every file takes the one path: the fixture reads; odd events get their one-line
    errors (as the dict-based reader of old worded them), or read where they are no
    error (a fractional `size` is no byte count; a file without Kineto events is
    handed to the generic Chrome-trace reader by `formats.read`)."""
    from tracedb.errors import TraceFormatError
    from tracedb.formats import kineto
    from tracedb.formats.base import ReadContext

    fixture = DATA / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"
    ctx = ReadContext("r", "f")
    batches = list(kineto.read(fixture, ctx))
    assert sum(b.num_rows for t, b in batches if t == "nodes") == 7245  # the fixture's cpu_op events
    assert ctx.metadata["kineto"]["baseTimeNanoseconds"] == 1790857026000000000
    odd = {
        "no_ts": ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op", "dur": 1}]}',
                  r"^cpu_op event #0 \('op'\) has no 'ts'$"),
        "null_dur": ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op", "ts": 1, "dur": null}]}',
                     r"^cpu_op event #0 \('op'\) has no 'dur'$"),
        "name_not_text": ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": 5, "ts": 1, "dur": 1}]}',
                          r"^cpu_op event #0 \('5'\): TypeError: the name is no string: 5$"),
        "args_list": ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op", "ts": 1, "dur": 1, "args": [1]}]}',
                      r"^cpu_op event #0 \('op'\): TypeError: 'args' is no JSON object: \[1\]$"),
        "nan_ts": ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op", "ts": NaN, "dur": 1}]}',
                   r"^cpu_op event #0 \('op'\) field ts: not a finite number: nan$"),
        "text_ts": ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op", "ts": "x", "dur": 1}]}',
                    r"^cpu_op event #0 \('op'\): not a number: 'x'$"),
        "no_kineto": ('{"traceEvents": [{"ph": "X", "cat": "mine", "name": "op", "ts": 1, "dur": 1}]}',
                      r"^no Kineto events"),
        "big": ('{"baseTimeNanoseconds": 9223372036854775000, "traceEvents": [{"ph": "X", "cat": "cpu_op", '
                '"name": "op", "ts": 1, "dur": 1}]}', r"int64|overflow"),
    }
    for name, (text, error) in odd.items():
        p = tmp_path / f"{name}.json"
        p.write_text(text, encoding="utf-8")
        with pytest.raises(TraceFormatError, match=error):
            list(kineto.read(p, ReadContext("r", "f")))
    p = tmp_path / "float_size.json"
    p.write_text('{"traceEvents": [{"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpy", "ts": 1, "dur": 1, '
                 '"args": {"size": 1.5, "correlation": 3}}, {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", '
                 '"ts": 1.5, "dur": 1, "args": {"device": 0, "correlation": 3}}]}', encoding="utf-8")
    tables = {t: b.to_pylist() for t, b in kineto.read(p, ReadContext("r", "f"))}
    assert tables["kernels"][0]["bytes"] is None and tables["kernels"][0]["launch_start_ns"] == 1000


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


@pytest.mark.parametrize("path", json_traces(), ids=_key)
def test_fast_decoding_matches_the_standard_library_path(path, request):
    fast = FAST.get(path) or digest(path)  # the test above read it (the same reader, the same file)
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
    assert "not a valid string" in fast.get("error", "not a valid string")  # (a lone surrogate: no UTF-8)
    request.getfixturevalue("stdlib_only")
    assert digest(p) == fast


@pytest.mark.parametrize("times", [("1.5", "2", "3.25"), ("1.2345", "1e3", "2.0005"), ("7", "1.5E+1", "-0.5")])
def test_event_times_in_bulk_are_exact(tmp_path, times, request):
    """The reader converts the times of the events other than cpu_ops in bulk
    (`kineto._event_times`: Arrow, exact to the ns); where Arrow refuses one (more than
    3 decimals), each is decoded exactly and rounded half-even: the times worked out
    from the text with `Decimal`, and the same rows from the standard library's decoding."""
    from decimal import ROUND_HALF_EVEN, Decimal

    def ns(text):
        return int((Decimal(text) * 1000).to_integral_value(ROUND_HALF_EVEN))

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
    batches = list(kineto.read(p, ReadContext("r", "f")))
    assert {t for t, _ in batches} >= {"kernels", "runtime_calls", "annotations", "allocations", "events", "steps"}
    tables = {t: b.to_pylist() for t, b in batches}
    for t in ("kernels", "runtime_calls"):
        assert (tables[t][0]["start_ns"], tables[t][0]["duration_ns"]) == (1000 + ns(ts), ns(dur)), t
    assert tables["allocations"][0]["ts_ns"] == 1000 + ns(mem)
    assert sorted(r["start_ns"] for r in tables["events"]) == [1000 + ns(mem)] * 2
    assert tables["steps"][0]["duration_ns"] == ns(dur)
    fast = digest(p)
    request.getfixturevalue("stdlib_only")
    assert digest(p) == fast


def test_op_params_and_steps(tmp_path, request):
    """The reader's inline op params (a text tid joins them, replacing an args `tid` in
    place; non-ASCII and DEL text spelled by json; nested TensorList dims kept; only known
    args: NULL) and its node steps (one Arrow pass a step: before, between, inside, at the
    end of, and after the steps), the same from the standard library's decoding."""
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
    nodes = dict(kineto.read(p, ReadContext("r", "f")))["nodes"].to_pydict()
    by_name = dict(zip(nodes["node_name"], zip(nodes["step"], nodes["params"])))
    assert by_name["before"] == (None, '{"x":1.5}')
    assert by_name["in3"] == (3, '{"tid":"main","z":"caf\\u00e9"}')
    assert by_name["gap"][0] is None and '"Input Dims":[[2,3],[[1],[2]]]' in by_name["gap"][1]
    assert by_name["end3"] == (None, None)
    assert by_name["in4"] == (4, '{"d":"a\\u007fb","n":null,"l":[1.0,2,"x"]}')  # json escapes DEL
    assert by_name["after"] == (None, '{"tid":"t2"}') and by_name["plain"] == (4, None)
    fast = digest(p)
    request.getfixturevalue("stdlib_only")
    assert digest(p) == fast


@pytest.mark.parametrize("chunk", [1, 7, 40, 1 << 20])
def test_struct_stream_gives_the_events_of_one_decoding(tmp_path, chunk):
    """`StructStream` decodes the array a buffer's cut at a time; text that holds `},{`
    inside a string or a nested value makes a cut invalid, and the events around it are
    decoded one at a time: the same events in every case, top-level array or object."""
    import msgspec

    from tracedb.formats.jsonstream import StructStream
    from tracedb.formats.kineto import _F, _MSGSPEC_ENCODE, _Ev, _from_dict

    events = [
        {"ph": "X", "cat": "cpu_op", "name": "a}, {b", "ts": 1, "dur": 2, "args": {"l": [{"x": 1}, {"y": 2.5}]}},
        {"ph": "X", "cat": "cpu_op", "name": "c},{\"d", "ts": 3.25, "dur": 4, "args": {"o": {"p": {}}}},
        {"ph": "i", "name": "}, {", "ts": 5, "s": "g"},
    ] + [{"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": 10 + i, "dur": 1, "args": {"correlation": i}}
         for i in range(20)]
    whole = msgspec.json.Decoder(list[_Ev], float_hook=_F).decode(json.dumps(events))
    for doc in ({"baseTimeNanoseconds": 7, "traceEvents": events}, events):
        path = tmp_path / "t.json"
        path.write_text(json.dumps(doc, indent=1 if chunk == 7 else None), encoding="utf-8")
        stream = StructStream(path, _Ev, _F, _from_dict, chunk_chars=chunk)
        pieces = list(stream)
        got = [ev for piece in pieces for ev in piece]
        assert _MSGSPEC_ENCODE(got) == _MSGSPEC_ENCODE(whole)
        assert len(got) == 23 and got[1].name == 'c},{"d'
        assert (len(pieces) > 1) == (chunk < 1000)
        assert stream.meta == ({"baseTimeNanoseconds": 7} if isinstance(doc, dict) else {})


def test_struct_stream_raises_at_a_bad_event(tmp_path):
    from tracedb.errors import TraceFormatError
    from tracedb.formats import kineto
    from tracedb.formats.base import ReadContext
    from tracedb.formats.jsonstream import StructStream

    good = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "ts": i, "dur": 1} for i in range(50)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": good + [{"ph": "X", "name": {"not": "text"}, "ts": 1}]}))
    assert len([e for p in StructStream(path, kineto._Ev, kineto._F, kineto._from_dict) for e in p]) == 51
    path.write_text(json.dumps({"traceEvents": good + [[1, 2]]}))  # an event that is no object
    stream = iter(StructStream(path, kineto._Ev, kineto._F, kineto._from_dict, chunk_chars=64))
    assert len(next(stream)) < 50  # pieces come before the bad one
    with pytest.raises(TraceFormatError, match=r"^trace event #50 is not a JSON object$"):
        list(stream)
    ctx = ReadContext("r", "f")
    with pytest.raises(TraceFormatError, match=r"^trace event #50 is not a JSON object$"):
        list(kineto.read(path, ctx))


if __name__ == "__main__":  # regenerate the oracle (see the module docstring)
    sys.path.insert(0, str(Path(__file__).parent.parent))
    print(json.dumps({_key(p): digest(p) for p in json_traces()}, indent=1, sort_keys=True))
