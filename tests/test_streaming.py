"""Issue 13, "every reader streams": the TF binary and text, XSpace and MegEngine readers,
which parsed the whole document at once, now stream. Checked here against the whole-document
readers they replaced (tests/whole_readers.py: a regression check, past code, not an
oracle from the raw file; those are in the tests/test_format_*.py files): identical Arrow tables on
every seed and fixture in those formats (plain and gzipped, and with runs cut small so
every boundary case is met); errors that name the field path and the byte offset; a
gzip bomb stopped by TRACEDB_MAX_DECOMPRESSED_BYTES; and peak memory that does not grow
with the file (a subprocess reading traces of 10 and 40-80 MB made by repeating real events).
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from google.protobuf import text_format

import bigtrace
from conftest import DATA, scenario
from tracedb.errors import TraceFormatError
from tracedb.formats import megengine, pbwire, tf_stepstats, xspace
from tracedb.formats.base import ReadContext
from tracedb.proto import run_metadata_pb2, step_stats_pb2, xplane_pb2
from whole_readers import megengine_whole, whole_protobuf, whole_tf_text

ROOT = Path(__file__).resolve().parent.parent
XSPACE = scenario("xspace_jax_h200")
JAX_FOLDER = next((DATA / "jax_profile_folder").rglob("*.xplane.pb"))
TF_TEXT = {"tf_runmetadata_text": run_metadata_pb2.RunMetadata, "tf_stepstats_gpu_streams": step_stats_pb2.StepStats}


def tables(read, path: Path) -> tuple[dict[str, pa.Table], dict]:
    ctx = ReadContext(run_id="r", source_file=path.name)
    batches: dict[str, list] = {}
    for table, batch in read(path, ctx):
        batches.setdefault(table, []).append(batch)
    return {t: pa.Table.from_batches(b) for t, b in batches.items()}, ctx.metadata


def _binary(name: str) -> bytes:
    msg = TF_TEXT[name]()
    text_format.Parse(scenario(name).read_text(), msg)
    return msg.SerializeToString()


def protobuf_inputs(tmp: Path) -> list[tuple[object, Path]]:
    """(reader module, file) for every protobuf seed and fixture, plain and gzipped."""
    out = []
    for name in TF_TEXT:
        data = _binary(name)
        for suffix, blob in ((".pb", data), (".pb.gz", gzip.compress(data))):
            (tmp / (name + suffix)).write_bytes(blob)
            out.append((tf_stepstats, tmp / (name + suffix)))
    for src in (XSPACE, JAX_FOLDER):
        gz = tmp / (src.parent.name + "_" + src.name + ".gz")
        gz.write_bytes(gzip.compress(src.read_bytes()))
        out += [(xspace, src), (xspace, gz)]
    return out


# The whole-document readers' output (the oracle) of each input of a module-scoped
# folder: the same for every chunk size, read once, not once a chunk size.
WHOLE: dict[Path, tuple] = {}


@pytest.fixture(scope="module")
def protobuf_files(tmp_path_factory) -> list[tuple[object, Path]]:
    return protobuf_inputs(tmp_path_factory.mktemp("protobuf"))


@pytest.mark.parametrize("chunk", [pbwire.CHUNK_BYTES, 1, 700])
def test_protobuf_streaming_equals_the_whole_document_reader(protobuf_files, monkeypatch, chunk):
    monkeypatch.setattr(pbwire, "CHUNK_BYTES", chunk)  # 1: one element a parse
    for mod, path in protobuf_files:
        got, got_meta = tables(mod.read, path)
        if path not in WHOLE:
            with whole_protobuf():
                assert pbwire.index.__name__ == "_whole_index"  # the oracle is the one reading
                WHOLE[path] = tables(mod.read, path)
        want, want_meta = WHOLE[path]
        assert got.keys() == want.keys() and sum(t.num_rows for t in got.values()) > 0, path
        for t in want:
            assert got[t].equals(want[t]), (path.name, t)
        assert got_meta == want_meta, path.name


def _tf_text_inputs(tmp: Path) -> list[Path]:
    """Every TF text seed, plain and gzipped, plus variants: non-ASCII text (characters cut
    by the chunks), syntax outside pbtext's subset in the last device (text_format takes
    over after some devices streamed), bad UTF-8 late in the file, a truncated gzip."""
    out = []
    for name in TF_TEXT:
        text = scenario(name).read_text()
        variants = {
            "": text,
            "_utf8": text.replace('timeline_label: "', 'timeline_label: "é✓𝄞 ', 40),
            "_hex": text[: text.rindex("all_end_rel_micros: ")] + "all_end_rel_micros: 0x7"
            + text[text.rindex("all_end_rel_micros: ") + len("all_end_rel_micros: 1"):],
        }
        for var, body in variants.items():
            assert var == "" or body != text
            data = body.encode()
            for suffix, blob in ((".txt", data), (".txt.gz", gzip.compress(data))):
                (tmp / (name + var + suffix)).write_bytes(blob)
                out.append(tmp / (name + var + suffix))
        data = text.encode()
        at = data.rindex(b'node_name: "') + 12
        (tmp / (name + "_bad_utf8.txt")).write_bytes(data[:at] + b"\xff" + data[at:])
        (tmp / (name + "_cut.txt.gz")).write_bytes(gzip.compress(data)[:-100])
        out += [tmp / (name + "_bad_utf8.txt"), tmp / (name + "_cut.txt.gz")]
    return out


def _tables_or_error(path: Path) -> tuple:
    try:
        return tables(tf_stepstats.read, path)
    except TraceFormatError as e:
        return str(e), None


@pytest.fixture(scope="module")
def tf_text_files(tmp_path_factory) -> list[Path]:
    return _tf_text_inputs(tmp_path_factory.mktemp("tf_text"))


@pytest.mark.parametrize("chunk", [tf_stepstats.CHUNK_BYTES, 4099, pytest.param(3, marks=pytest.mark.slow)])
def test_tf_text_in_chunks_equals_the_whole_text_reader(tf_text_files, monkeypatch, chunk):
    """Small and odd chunk sizes cut tokens, lines and UTF-8 characters (3 bytes: every
    2- and 4-byte character, on the inputs that hold non-ASCII text or bad UTF-8: ~10x
    the CPU of the others a file); the tables (or the error message) are those of the
    whole-text reader. (tests/test_pbtext_chunks.py cuts pbtext's input at every char.)"""
    monkeypatch.setattr(tf_stepstats, "CHUNK_BYTES", chunk)
    errors = 0
    inputs = tf_text_files
    if chunk < 4:
        inputs = [p for p in inputs if "_utf8" in p.name]
    for path in inputs:
        got = _tables_or_error(path)
        if path not in WHOLE:
            with whole_tf_text():
                assert tf_stepstats._text_chunks.__name__ == "_whole_text_chunks"  # the oracle is the one reading
                WHOLE[path] = _tables_or_error(path)
        want = WHOLE[path]
        if want[1] is None:
            errors += 1
            assert got == want, path.name
            continue
        assert got[0].keys() == want[0].keys() and sum(t.num_rows for t in got[0].values()) > 0, path.name
        for t in want[0]:
            assert got[0][t].equals(want[0][t]), (path.name, t)
        assert got[1] == want[1], path.name
    assert errors == (2 if chunk < 4 else 4)  # bad UTF-8 (and the cut gzip), of each seed


def test_tf_text_chunks_decode_like_the_whole_text(tmp_path, monkeypatch):
    """UTF-8 characters cut by chunks of 1-5 bytes decode whole; bad bytes get the message
    `bytes.decode` gives for the whole file (position counted from its start)."""
    good = "dev_stats { device: \"é✓𝄞\" }\n".encode() * 20
    cases = [good, good[:-3] + b"\xff" + good[-3:], good + "✓".encode()[:2], good[:100] + b"\xc3(" + good[100:]]
    for data in cases:
        path = tmp_path / "t.txt"
        path.write_bytes(data)
        try:
            want = data.decode("utf-8")
        except UnicodeDecodeError as e:
            want = f"bad or truncated TF text protobuf: {e}"
        for chunk in range(1, 6):
            monkeypatch.setattr(tf_stepstats, "CHUNK_BYTES", chunk)
            try:
                got = "".join(tf_stepstats._text_chunks(path))
            except TraceFormatError as e:
                got = str(e)
            assert got == want, (chunk, data[-8:])


def _rebuild(spec: pbwire.Spec, node: pbwire.Node, streamed: dict) -> object:
    msg = spec.cls()
    msg.CopyFrom(node.header)
    if spec.stream:
        for e in streamed.get(id(node), []):  # an `elements` class's message: the same bytes
            getattr(msg, spec.stream[1]).add().ParseFromString(e.SerializeToString())
    for fn, sub in spec.nested.items():
        field = spec.cls.DESCRIPTOR.fields_by_number[fn]
        for child in node.children:
            part = _rebuild(sub, child, streamed)
            if field.is_repeated:
                getattr(msg, field.name).add().CopyFrom(part)
            else:
                getattr(msg, field.name).MergeFrom(part)
    return msg


@pytest.mark.parametrize("chunk", [pbwire.CHUNK_BYTES, 1])
def test_index_and_stream_give_back_what_ParseFromString_gives(tmp_path, monkeypatch, chunk):
    """Field by field: the headers of pass 1 plus the elements of pass 2 rebuild the very
    message protobuf parses from the whole file."""
    monkeypatch.setattr(pbwire, "CHUNK_BYTES", chunk)
    cases = [(xspace._SPACE, XSPACE.read_bytes()), (xspace._SPACE, JAX_FOLDER.read_bytes()),
             (tf_stepstats._STEP_STATS, _binary("tf_stepstats_gpu_streams")),
             (tf_stepstats._STEP_STATS, _binary("tf_runmetadata_text")[4:])]  # RunMetadata's step_stats
    for spec, data in cases:
        path = tmp_path / "t.pb"
        path.write_bytes(data)
        with open(path, "rb") as f:
            tree = pbwire.index(f, spec, "x")
        streamed: dict = {}
        with open(path, "rb") as f:
            for node, elements in pbwire.stream(f, spec, tree, "x"):
                streamed.setdefault(id(node), []).extend(elements)
        assert _rebuild(spec, tree, streamed) == spec.cls.FromString(data)


def test_runmetadata_prefix_is_its_step_stats():
    """The case above reads RunMetadata's one field (step_stats) by skipping its 4-byte header."""
    data = _binary("tf_runmetadata_text")
    msg = run_metadata_pb2.RunMetadata.FromString(data)
    assert step_stats_pb2.StepStats.FromString(data[4:]) == msg.step_stats
    assert len(msg.step_stats.dev_stats) == 2


def _megengine_variants(tmp: Path) -> list[Path]:
    doc = json.loads(scenario("megengine_graph_profile").read_text())
    out = [scenario("megengine_graph_profile")]
    gz = tmp / "profile.json.gz"
    gz.write_bytes(gzip.compress(out[0].read_bytes()))
    out.append(gz)
    # Sections in the other order: operators come before what they need and wait for it.
    rev = {k: dict(reversed(list(v.items()))) for k, v in reversed(list(doc.items()))}
    (tmp / "reversed.json").write_text(json.dumps(rev, indent=1))
    out.append(tmp / "reversed.json")
    return out


def test_megengine_streaming_equals_the_whole_document_reader(tmp_path):
    for path in _megengine_variants(tmp_path):
        got, _ = tables(megengine.read, path)
        want, _ = tables(megengine_whole, path)
        assert got.keys() == want.keys() == {"nodes", "kernels", "tensors", "allocations"}
        for t in want:
            assert got[t].equals(want[t]), (path.name, t)
    # and the numbers the seed holds: 240 operators, 234 profiled on the device, 299 vars, 104 chunks
    assert {t: v.num_rows for t, v in got.items()} == {"nodes": 240, "kernels": 234, "tensors": 299, "allocations": 104}


# ---------------------------------------------------------------- errors


def _read(mod, path: Path) -> int:
    return sum(b.num_rows for _, b in mod.read(path, ReadContext("r", path.name)))


def test_truncated_protobuf_names_the_field_and_offset(tmp_path):
    data = XSPACE.read_bytes()
    cut = tmp_path / "cut.xplane.pb"
    cut.write_bytes(data[:len(data) // 2])
    with pytest.raises(TraceFormatError, match=r"^truncated or corrupt XSpace protobuf: truncated: "
                                               r"planes(\[\d+\]\.\w+)*\[\d+\] \(\d+ bytes from byte \d+\) runs past "
                                               rf"the end of the file \({len(data) // 2} bytes\)$"):
        _read(xspace, cut)
    gz = tmp_path / "cut.xplane.pb.gz"
    gz.write_bytes(gzip.compress(data[:len(data) // 2]))
    with pytest.raises(TraceFormatError, match=r"^truncated or corrupt XSpace protobuf: truncated: the file ends "
                                               r"inside planes\[\d+\].* \(\d+ bytes from byte \d+\)$"):
        _read(xspace, gz)
    stats = _binary("tf_stepstats_gpu_streams")
    cut.write_bytes(stats[:-1])
    with pytest.raises(TraceFormatError, match=r"^bad or truncated TF binary protobuf: truncated: dev_stats\[6\] "
                                               r"\(\d+ bytes from byte \d+\) runs past the end of the file"):
        _read(tf_stepstats, cut)


def test_corrupt_element_names_its_index_and_offset(tmp_path):
    """One GPU event with an invalid wire type: the error names that event and where it is."""
    data = XSPACE.read_bytes()
    space = xplane_pb2.XSpace.FromString(data)
    pi = next(i for i, p in enumerate(space.planes) if p.name == "/device:GPU:0")
    event = space.planes[pi].lines[0].events[5].SerializeToString()
    at = data.find(event)
    assert at > 0 and data.find(event, at + 1) < 0
    bad = bytearray(data)
    bad[at] = 0x0F  # field 1, wire type 7: no such wire type
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(bytes(bad))
    with pytest.raises(TraceFormatError) as err:
        _read(xspace, path)
    m = re.fullmatch(rf"truncated or corrupt XSpace protobuf: bad or truncated planes\[{pi}\]\.lines\[0\]\.events\[5\] "
                     r"\(.+\) at byte (\d+)", str(err.value))
    assert m, str(err.value)
    assert at - 3 <= int(m[1]) < at  # the event's tag, before its length and payload
    with whole_protobuf(), pytest.raises(Exception):  # the oracle refuses it too
        _read(xspace, path)


def _bomb_xspace(pad_mb: int) -> bytes:
    """The fixture plus an unknown field of `pad_mb` MB of zeros: a valid XSpace that
    gzips to well under 1 MB."""
    pad = (15 << 3 | 2).to_bytes(1, "little") + pbwire.varint_bytes(pad_mb << 20)
    return gzip.compress(XSPACE.read_bytes() + pad + bytes(pad_mb << 20), compresslevel=9)


@pytest.mark.parametrize("mod,blob", [
    (xspace, lambda: _bomb_xspace(64)),
    (tf_stepstats, lambda: gzip.compress(_binary("tf_stepstats_gpu_streams") + b"\x7a" + pbwire.varint_bytes(64 << 20)
                                         + bytes(64 << 20), compresslevel=9)),
])
def test_binary_gzip_bomb_stops_at_the_decompressed_limit(tmp_path, monkeypatch, mod, blob):
    path = tmp_path / "bomb.pb.gz"
    path.write_bytes(blob())
    assert path.stat().st_size < 1 << 20
    monkeypatch.setenv("TRACEDB_MAX_DECOMPRESSED_BYTES", "8M")
    with pytest.raises(TraceFormatError, match=r"decompresses to more than 8 MiB \(a gzip bomb\?\); stopped after "
                                               r"\d+ bytes; raise TRACEDB_MAX_DECOMPRESSED_BYTES to read it"):
        _read(mod, path)
    monkeypatch.setenv("TRACEDB_MAX_DECOMPRESSED_BYTES", "128M")  # under the limit it reads
    assert _read(mod, path) > 0


# ---------------------------------------------------------------- bounded memory

# A reader holds one batch of rows before it yields it (65536 rows: ~150 MB of Python
# objects for XSpace kernels), a fixed cost whatever the file. The subprocess cuts the
# batch to 2048 rows so that what is measured is what the file's size costs.
_PEAK = """
import resource, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from tracedb.formats import base, {mod}
from tracedb.formats.base import ReadContext
init = base.BatchBuilder.__init__
base.BatchBuilder.__init__ = lambda self, table, batch_rows=65536, columns=None, annotate=True: init(self, table, 2048, columns, annotate)
{mod}._BATCH_ROWS = 2048
def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
def read(path):
    return sum(b.num_rows for _, b in {mod}.read(Path(path), ReadContext("r", "x")))
read({warm!r})  # first use: libraries' lazy set-up, not the file's share
before = rss_kb()
rows = read({path!r})
print(rows, before, rss_kb())
"""


def _peak(mod: str, path: Path, warm: Path) -> tuple[int, int]:
    """(rows, peak RSS growth in bytes) of reading `path` in a fresh interpreter, after
    reading `warm` (a small file of the format, several batches long: the libraries'
    lazy set-up and one full batch are then in the baseline)."""
    code = _PEAK.format(root=str(ROOT), mod=mod, path=str(path), warm=str(warm))
    out = subprocess.run([sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rows, before, after = map(int, out.stdout.split())
    return rows, (after - before) * 1024


@pytest.mark.slow
@pytest.mark.parametrize("mod", ["xspace", "tf_stepstats", "tf_text", "megengine"])
def test_peak_memory_does_not_grow_with_the_file(tmp_path, mod):
    """A trace 4-8x larger (10 -> 40 MB XSpace (the slowest to read), 10 -> 80 MB for the
    others (TF text: the seed's devices repeated); gzipped to 0.1-10 MB; real events
    repeated, or for MegEngine, whose rows join the whole graph, the seed padded with
    whitespace) reads in the same memory: peak RSS grows by a small fraction of the added
    bytes, and stays under half the file (which the whole-document readers held, plus
    its messages or JSON objects: several times the file; bench/bench_stream.py)."""
    small, big, warm = tmp_path / "small.gz", tmp_path / "big.gz", tmp_path / "warm.gz"
    if mod == "xspace":
        bigtrace.xspace(XSPACE, warm, 2)
        (small_bytes, _), (big_bytes, _) = (bigtrace.xspace(XSPACE, p, mb) for p, mb in ((small, 10), (big, 40)))
    elif mod == "tf_stepstats":
        src = scenario("tf_stepstats_gpu_streams")
        bigtrace.step_stats(src, warm, 2)
        (small_bytes, _), (big_bytes, _) = (bigtrace.step_stats(src, p, mb) for p, mb in ((small, 10), (big, 80)))
    elif mod == "tf_text":
        src = scenario("tf_stepstats_gpu_streams")
        bigtrace.step_stats_text(src, warm, 2)
        (small_bytes, _), (big_bytes, _) = (bigtrace.step_stats_text(src, p, mb) for p, mb in ((small, 10), (big, 80)))
        mod = "tf_stepstats"
    else:
        text = scenario("megengine_graph_profile").read_bytes()
        bigtrace.padded_json(text, warm, 2)
        small_bytes, big_bytes = (bigtrace.padded_json(text, p, mb) for p, mb in ((small, 10), (big, 80)))
    assert big_bytes > 3.5 * small_bytes and big.stat().st_size < big_bytes / 7
    rows_small, peak_small = _peak(mod, small, warm)
    rows_big, peak_big = _peak(mod, big, warm)
    assert rows_big >= rows_small > 0 and (mod == "megengine" or rows_big > 3.5 * rows_small)
    assert peak_big - peak_small < (big_bytes - small_bytes) / 4, (peak_small, peak_big, big_bytes)
    assert peak_big < big_bytes / 2, (peak_big, big_bytes)
