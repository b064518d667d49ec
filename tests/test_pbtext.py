"""The descriptor-driven text-format reader against `text_format.Parse`, the oracle.

The fast path must give text_format's message wherever it finishes, and give up
(`Unsupported`, so the reader falls back to text_format) on everything else: bad input
then gets text_format's own error message.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path

import pyarrow as pa
import pytest
from google.protobuf import text_format

from tracedb.errors import TraceFormatError
from tracedb.formats import pbtext, tf_stepstats
from tracedb.formats.base import ReadContext
from tracedb.proto import run_metadata_pb2, step_stats_pb2

DATA = Path(__file__).parent / "data"
RUNMETA = DATA / "tf_runmetadata_text" / "000_6b18107121892edf.txt"
STREAMS = DATA / "tf_stepstats_gpu_streams" / "001_5e9237699abafb68.txt"
STREAM = "tracedb.tf.StepStats.dev_stats"


def oracle(text: str, cls):
    msg = cls()
    text_format.Parse(text, msg, allow_unknown_field=True)
    return msg


def fast(text: str, cls):
    """(root without streamed dev_stats, streamed dev_stats) from pbtext."""
    root = cls()
    devs = list(pbtext.iter_stream(text, root, STREAM))
    return root, devs


def split(msg):
    """An oracle message as (root without dev_stats, dev_stats)."""
    stats = msg.step_stats if isinstance(msg, run_metadata_pb2.RunMetadata) else msg
    devs = [type(d)() for d in stats.dev_stats]
    for d, src in zip(devs, stats.dev_stats):
        d.CopyFrom(src)
    del stats.dev_stats[:]
    return msg, devs


def read_tables(path: Path) -> dict[str, pa.Table]:
    batches: dict[str, list[pa.RecordBatch]] = {}
    for table, batch in tf_stepstats.read(path, ReadContext("run", path.name)):
        batches.setdefault(table, []).append(batch)
    return {t: pa.Table.from_batches(b) for t, b in batches.items()}


@functools.cache
def small_text() -> str:
    """Seed 001 cut to its first 12 node_stats per device (~15 KB): every field kind it has."""
    msg = oracle(STREAMS.read_text(), step_stats_pb2.StepStats)
    for dev in msg.dev_stats:
        del dev.node_stats[12:]
    msg.dev_stats[0].thread_names[7] = "tf_worker"  # a map field too
    return text_format.MessageToString(msg)


@pytest.mark.parametrize("path,cls", [(RUNMETA, run_metadata_pb2.RunMetadata),
                                      (STREAMS, step_stats_pb2.StepStats)])
def test_seed_traces_take_the_fast_path_and_equal_text_format(path, cls):
    text = path.read_text()
    root, devs = fast(text, cls)  # raises Unsupported if it gave up
    want_root, want_devs = split(oracle(text, cls))
    assert len(devs) == len(want_devs) == (2 if cls is run_metadata_pb2.RunMetadata else 7)
    assert devs == want_devs
    assert root == want_root


@pytest.mark.parametrize("path,cls", [(RUNMETA, run_metadata_pb2.RunMetadata),
                                      (STREAMS, step_stats_pb2.StepStats)])
def test_tables_equal_those_of_text_format(path, cls, tmp_path):
    # The binary copy is read through text_format.Parse + ParseFromString: the old reader.
    pb = tmp_path / "oracle.pb"
    pb.write_bytes(oracle(path.read_text(), cls).SerializeToString())
    got, want = read_tables(path), read_tables(pb)
    assert got.keys() == want.keys()
    for table in want:
        assert got[table].equals(want[table]), table


# Rewritings of valid text outside the fast subset: text_format reads them all the same.
REWRITES = {
    "angle brackets": lambda t: t.replace("node_stats {", "node_stats <", 1).replace(
        "\n  }\n  node_stats", "\n  >\n  node_stats", 1),
    "hex int": lambda t: t.replace("all_end_rel_micros: 1\n", "all_end_rel_micros: 0x1\n", 1),
    "octal int": lambda t: t.replace("all_end_rel_micros: 1\n", "all_end_rel_micros: 01\n", 1),
    "list": lambda t: t.replace("node_stats {", "node_stats: [{", 1).replace(
        "\n  }\n  node_stats", "\n  }]\n  node_stats", 1),
    "comments": lambda t: "# head\n" + t.replace("\n", "  # c\n", 40),
    "escapes": lambda t: t.replace('node_name: "', 'node_name: "\\x41\\101\\"', 3),
    "single quotes": lambda t: t.replace('device: "', "device: '", 1).replace('"\n', "'\n", 1),
    "separators": lambda t: t.replace("all_end_rel_micros: 1\n", "all_end_rel_micros: 1;\n", 1),
    "adjacent strings": lambda t: t.replace('node_name: "', 'node_name: "a" "', 1),
    "newline before colon": lambda t: t.replace("all_start_micros:", "all_start_micros\n:", 1),
    "unknown fields": lambda t: t.replace("node_stats {", 'node_stats {\n newer: 1.5 other { x: "y" z: [1] }', 2),
    # the fast path has yielded the first devices when it meets this: the rest come from text_format
    "hex int in the last device": lambda t: t[: t.rindex("all_end_rel_micros: ")] + "all_end_rel_micros: 0x7"
    + t[t.rindex("all_end_rel_micros: ") + len("all_end_rel_micros: 1"):],
    "bool and enum by number": lambda t: t.replace("dtype: DT_FLOAT", "dtype: 1", 2),
}


@pytest.mark.parametrize("name", sorted(REWRITES))
def test_outside_the_subset_reads_like_text_format(name, tmp_path):
    text = REWRITES[name](small_text())
    assert text != small_text()
    want_root, want_devs = split(oracle(text, step_stats_pb2.StepStats))
    p = tmp_path / "t.txt"
    p.write_text(text)
    pb = tmp_path / "t.pb"
    pb.write_bytes(oracle(text, step_stats_pb2.StepStats).SerializeToString())
    got, want = read_tables(p), read_tables(pb)
    assert all(got[t].equals(want[t]) for t in want) and got.keys() == want.keys()
    try:
        root, devs = fast(text, step_stats_pb2.StepStats)
    except pbtext.Unsupported:
        return
    assert (root, devs) == (want_root, want_devs)


BAD = {
    "truncated": lambda t: t[: len(t) // 2],
    "extra close": lambda t: t + "}\n",
    "duplicate scalar": lambda t: t.replace("all_end_rel_micros: 1\n", "all_end_rel_micros: 1\nall_end_rel_micros: 2\n", 1),
    "duplicate message": lambda t: t.replace("memory_stats {", "memory_stats {\n}\nmemory_stats {", 1),
    "string for int": lambda t: t.replace("all_end_rel_micros: 1\n", 'all_end_rel_micros: "1"\n', 1),
    "int32 out of range": lambda t: t.replace("output {", "output {\nslot: 4294967296", 1),
    "uint32 negative": lambda t: t.replace("node_stats {", "node_stats {\nthread_id: -1", 1),
    "unknown enum": lambda t: t.replace("dtype: DT_FLOAT", "dtype: DT_NOPE", 1),
    "scalar as message": lambda t: t.replace("output {", "output {\nslot { }", 1),
    "message as scalar": lambda t: t.replace("memory_stats {", "memory_stats: 3\nx {", 1),
    "missing colon": lambda t: t.replace("all_end_rel_micros: 1\n", "all_end_rel_micros 1\n", 1),
    "bad utf-8 escape": lambda t: t.replace('node_name: "', 'node_name: "\\377', 1),
    "unterminated string": lambda t: t.replace('node_name: "', 'node_name: "x\n', 1),
    "number run-on": lambda t: t.replace("all_end_rel_micros: 1\n", "all_end_rel_micros: 1abc\n", 1),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_text_gives_text_format_error(name, tmp_path):
    text = BAD[name](small_text())
    assert text != small_text()
    with pytest.raises(text_format.ParseError) as want:
        oracle(text, step_stats_pb2.StepStats)
    with pytest.raises(pbtext.Unsupported):
        fast(text, step_stats_pb2.StepStats)
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(TraceFormatError) as got:
        read_tables(p)
    assert str(got.value) == f"bad or truncated TF text protobuf: {want.value}"
    assert "\n" not in str(got.value)


def test_random_edits_never_disagree_with_text_format():
    """Delete, duplicate or insert one char at 200 random places: wherever the fast path
    finishes, text_format gives the same message; wherever text_format fails, it gives up."""
    base = small_text()
    rng = random.Random(12)
    finished = 0
    for _ in range(200):
        i = rng.randrange(len(base))
        op = rng.choice(["del", "dup", "ins"])
        if op == "del":
            text = base[:i] + base[i + 1:]
        elif op == "dup":
            text = base[:i] + base[i] + base[i:]
        else:
            text = base[:i] + rng.choice('{}<>:"\\# \n0a-.[],;') + base[i:]
        try:
            want = split(oracle(text, step_stats_pb2.StepStats))
        except text_format.ParseError:
            want = None
        try:
            got = fast(text, step_stats_pb2.StepStats)
        except pbtext.Unsupported:
            continue
        finished += 1
        assert want is not None and got == want, (op, i, text[max(0, i - 40):i + 40])
    assert finished > 40  # most edits (in names, numbers, strings) stay in the subset


def test_streaming_yields_each_device_as_it_closes():
    text = STREAMS.read_text()
    it = pbtext.iter_stream(text, step_stats_pb2.StepStats(), STREAM)
    first = next(it)
    # Counted with grep: the file's first device is stream:15 (8 node_stats), the last stream:13 (739).
    assert first.device == "/device:GPU:0/stream:15" and len(first.node_stats) == 8
    rest = list(it)
    assert len(rest) == 6 and rest[-1].device == "/device:GPU:0/stream:13" and len(rest[-1].node_stats) == 739


def test_oneof_fields_fall_back():
    """Our protos have no oneof; a parser given one leaves it to text_format (which checks
    that two members are not both set) instead of skipping it as an unknown field."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="pbtext_oneof_test.proto", package="t", syntax="proto3")
    m = fdp.message_type.add(name="M")
    m.oneof_decl.add(name="choice")
    m.field.add(name="a", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL, oneof_index=0)
    m.field.add(name="items", number=3, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED, type_name=".t.M")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("t.M"))
    got = list(pbtext.iter_stream("items { } items { items { } }", cls(), "t.M.items"))
    assert len(got) == 2 and len(got[1].items) == 1  # a nested `items` stays in its element
    with pytest.raises(pbtext.Unsupported):
        list(pbtext.iter_stream("items { a: 1 }", cls(), "t.M.items"))


def test_fields_named_like_plain_attributes_fall_back():
    """A field called `HasField` would hide what a Plain message needs: left to
    text_format, the others read fast."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="pbtext_names_test.proto", package="t", syntax="proto3")
    m = fdp.message_type.add(name="N")
    for number, name in enumerate(["HasField", "ok"], 1):
        m.field.add(name=name, number=number, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    m.field.add(name="items", number=4, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED, type_name=".t.N")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("t.N"))
    (got,) = pbtext.iter_stream("items { ok: 3 }", cls(), "t.N.items")
    assert got.ok == 3
    with pytest.raises(pbtext.Unsupported):
        list(pbtext.iter_stream("items { HasField: 1 }", cls(), "t.N.items"))
