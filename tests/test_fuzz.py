"""Property-based tests (hypothesis): the real seed and fixture traces, mutated (truncated,
bytes flipped, regions spliced or duplicated, values changed to another type), fed to every
reader. Properties: only the project's own error types come out (TracedbError and its
subclasses, never `unexpected <Type>`); in an ingest, the run whose file failed keeps its
previous data and a good file of the same batch lands.

CI runs a bounded, derandomized number of examples (about a minute). A longer, random
run: `TRACEDB_FUZZ=long python -m pytest tests/test_fuzz.py` (100x the examples, with
hypothesis's example database in `.hypothesis/` so failures replay).
"""

from __future__ import annotations

import gzip
import os
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from google.protobuf import text_format
from hypothesis import strategies as st

from conftest import DATA, SCENARIOS, scenario
from tracedb import Warehouse, formats, schema
from tracedb.errors import TracedbError
from tracedb.formats.base import ReadContext
from tracedb.ingest import ingest
from tracedb.proto import run_metadata_pb2, step_stats_pb2
from tracedb.store import conform
from tracedb.validate import Validator

pytestmark = pytest.mark.slow

LONG = os.environ.get("TRACEDB_FUZZ") == "long"
SOURCES = {name: scenario(name) for name in SCENARIOS}
SOURCES["chrome_trace_tf_timeline"] = DATA / "chrome_trace_tf_timeline" / "timeline_step0.json"
# The TF seeds in binary protobuf form (the wire walker of `pbwire`), written on first use.
_BINARY = {"tf_runmetadata_binary": ("tf_runmetadata_text", run_metadata_pb2.RunMetadata),
           "tf_stepstats_binary": ("tf_stepstats_gpu_streams", step_stats_pb2.StepStats)}
_BINARY_DIR = tempfile.TemporaryDirectory(prefix="tracedb-fuzz-")
SOURCES.update({name: Path(_BINARY_DIR.name) / f"{name}.pb" for name in _BINARY})


def source(name: str) -> Path:
    path = SOURCES[name]
    if name in _BINARY and not path.exists():
        text, cls = _BINARY[name]
        msg = cls()
        text_format.Parse(scenario(text).read_text(), msg)
        path.write_bytes(msg.SerializeToString())
    return path
# Examples per source in CI: the TF text seeds take ~1.3 s a read (text_format), Kineto ~0.5 s.
BUDGET = {"tf_runmetadata_text": 4, "tf_stepstats_gpu_streams": 3, "kineto_h200_fp32": 8}


def examples(name: str) -> int:
    n = BUDGET.get(name, 25)
    return n * 100 if LONG else n


def fuzz_settings(n: int):
    return settings(max_examples=n, deadline=None, derandomize=not LONG, database=None if not LONG else settings.default.database,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_STRING_VALUE = re.compile(rb':\s*"[^"\\\n]{0,80}"')
# What a number or a string value becomes: other JSON / protobuf-text types and odd numbers.
REPLACEMENTS = [b'"x"', b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1", b"-9999999",
                b"99999999999999999999999999", b"1.5", b"[]", b"{}", b"null", b"true", b"[[[[1]]]]",
                b"-0", b"0", b"9223372036854775807", b'"\\u0000"', b'"zero"']


@st.composite
def mutations(draw, size: int):
    """A list of 1-3 edits, each (kind, args), applied in order to the decompressed bytes."""
    pos = st.integers(0, max(size - 1, 0))
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "splice", "duplicate", "retype", "restring"]))
        if kind == "truncate":
            edits.append((kind, draw(pos)))
        elif kind == "flip":
            edits.append((kind, [(draw(pos), draw(st.integers(1, 255))) for _ in range(draw(st.integers(1, 16)))]))
        elif kind in ("splice", "duplicate"):
            edits.append((kind, (draw(pos), draw(st.integers(1, 4096)), draw(pos))))
        else:
            edits.append((kind, (draw(pos), draw(st.sampled_from(REPLACEMENTS)))))
    return edits, draw(st.booleans()), draw(st.booleans())  # edits, gzip the result, flip a gzip byte


def apply(data: bytes, edits) -> bytes:
    for kind, args in edits:
        if not data:
            return data
        if kind == "truncate":
            data = data[: args % len(data)]
        elif kind == "flip":
            buf = bytearray(data)
            for p, x in args:
                buf[p % len(buf)] ^= x
            data = bytes(buf)
        elif kind == "splice":  # a region copied over another place
            a, n, b = args
            a, b = a % len(data), b % len(data)
            data = data[:b] + data[a:a + n] + data[b + n:]
        elif kind == "duplicate":  # a region repeated where it stands (a duplicated event)
            a, n, _ = args
            a %= len(data)
            data = data[:a + n] + data[a:a + n] + data[a + n:]
        else:
            p, new = args
            pattern = _NUMBER if kind == "retype" else _STRING_VALUE
            m = pattern.search(data, p % len(data)) or pattern.search(data)
            if m:
                new = new if kind == "retype" else b": " + new
                data = data[:m.start()] + new + data[m.end():]
    return data


def read_all_rows(path: Path) -> int:
    """What ingest does with a file, short of writing it: detect, read, validate, conform."""
    mod = formats.detect(path)
    checks = Validator()
    rows = 0
    for table, batch in mod.read(path, ReadContext("fuzz", path.name)):
        rows += conform(checks.check(table, batch), table, {"run_id": "fuzz"}).num_rows
    checks.finish()
    return rows


def _mutated_file(folder: Path, name: str, edits, gz: bool, flip_gz: bool) -> Path:
    src = source(name)
    with gzip.open(src) if src.suffix == ".gz" else open(src, "rb") as f:
        data = apply(f.read(), edits)
    if gz:
        data = gzip.compress(data, compresslevel=1)
        if flip_gz and len(data) > 20:
            i = 10 + (sum(data[:64]) % (len(data) - 20))
            data = data[:i] + bytes([data[i] ^ 0x5A]) + data[i + 1:]
    path = folder / (name + (".gz" if gz else ".bin"))
    path.write_bytes(data)
    return path


def _source_size(name: str) -> int:
    p = source(name)
    return len(gzip.decompress(p.read_bytes())) if p.suffix == ".gz" else p.stat().st_size


def _fuzz_reader(name: str):
    @fuzz_settings(examples(name))
    @given(m=mutations(_source_size(name)))
    def test(m):
        edits, gz, flip_gz = m
        with tempfile.TemporaryDirectory() as tmp:
            path = _mutated_file(Path(tmp), name, edits, gz, flip_gz)
            try:
                read_all_rows(path)
            except TracedbError as e:
                msg = str(e)
                assert msg and "\n" not in msg.strip(), msg
    return test


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_mutated_traces_raise_only_tracedb_errors(name):
    _fuzz_reader(name)()


# ---- ingest: the warehouse is unchanged on error, good files land ------------------------

GOOD = "chrome_trace_tf_timeline"
TARGETS = ["megengine_graph_profile", "node_shape_dump", "xspace_jax_h200", "chrome_trace_tf_timeline"]


def _run_state(wh: Path, run_id: str) -> list:
    return Warehouse(wh).sql(
        "SELECT 'nodes' t, count(*) n, sum(hash(node_name, start_ns, duration_ns)) h FROM nodes WHERE run_id = $r "
        "UNION ALL SELECT 'kernels', count(*), sum(hash(name, start_ns, duration_ns)) FROM kernels WHERE run_id = $r "
        "UNION ALL SELECT 'tensors', count(*), sum(hash(node_name, slot)) FROM tensors WHERE run_id = $r "
        "UNION ALL SELECT 'allocations', count(*), sum(hash(ts_ns, bytes)) FROM allocations WHERE run_id = $r "
        "ORDER BY t", r=run_id).to_pylist()


@pytest.fixture(scope="module")
def expected_good_rows():
    return read_all_rows(SOURCES[GOOD])


@pytest.mark.parametrize("target", TARGETS)
def test_failed_file_keeps_the_previous_run_and_good_file_lands(target, expected_good_rows):
    @fuzz_settings(3 * 30 if LONG else 3)
    @given(m=mutations(_source_size(target)))
    def test(m):
        edits, gz, flip_gz = m
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            wh = tmp / "wh"
            assert ingest([SOURCES[target]], wh, run_id="victim").ok
            before = _run_state(wh, "victim")
            runs = tmp / "runs"
            (runs / "victim").mkdir(parents=True)
            (runs / "good").mkdir()
            _mutated_file(runs / "victim", target, edits, gz, flip_gz)
            (runs / "good" / SOURCES[GOOD].name).write_bytes(SOURCES[GOOD].read_bytes())
            summary = ingest([runs], wh)
            by_run = {r.run_id: r for r in summary.runs}
            assert by_run["good"].files[0].ok
            assert sum(by_run["good"].rows.values()) == expected_good_rows
            assert sum(r["n"] for r in _run_state(wh, "good")) == expected_good_rows
            if not by_run["victim"].files:
                # Since the 'layout' merge a file no reader claims (the mutation left it
                # empty, or without any format's head) is skipped, not read: the run is no
                # run, and the previous one stays as it was.
                assert by_run["victim"].skipped
                assert _run_state(wh, "victim") == before
                return
            victim = by_run["victim"].files[0]
            if not victim.ok:
                assert not victim.error.startswith("unexpected"), victim.error
                assert _run_state(wh, "victim") == before
    test()


def test_the_mutations_do_something():
    """The strategies reach the readers' error paths: a truncated seed fails, a flipped one differs."""
    data = SOURCES["megengine_graph_profile"].read_bytes()
    assert apply(data, [("truncate", 1000)]) == data[:1000]
    assert apply(data, [("duplicate", (10, 5, 0))]) == data[:15] + data[10:15] + data[15:]
    assert apply(b'{"a": 12, "b": "x"}', [("retype", (0, b"NaN"))]) == b'{"a": NaN, "b": "x"}'
    assert apply(b'{"a": 12, "b": "x"}', [("restring", (0, b"[]"))]) == b'{"a": 12, "b": []}'
    with tempfile.TemporaryDirectory() as tmp:
        path = _mutated_file(Path(tmp), "megengine_graph_profile", [("truncate", 1000)], False, False)
        with pytest.raises(TracedbError, match="not valid JSON"):
            read_all_rows(path)
    assert schema.TABLES  # the tables conform checks against
