"""pbtext's Plain messages, its line cache and the TF reader's node-by-node streaming,
against `text_format.Parse` (the oracle) and the binary reader (upb messages, the same rows).

`iter_plain` is what the TF reader calls: lines looked up in a per-message-type cache
(two generations), `_ITEM` for the rest of a piece from a line that is not one whole
item, elements of several streamed fields yielded as (parent, element). Each of those
paths is driven here: a cache of 8 lines that rolls over all the time, lines too long to
cache, several items on a line, the same line in two message types, the held nodes (a
thread id, a device named late) and a fallback to text_format in the middle of a device
after some of its nodes became rows.
"""

from __future__ import annotations

import weakref
from pathlib import Path

import pyarrow as pa
import pytest
from google.protobuf import text_format

from test_pbtext import STREAM, STREAMS, oracle, read_tables, small_text, split
from tracedb.formats import pbtext, tf_stepstats
from tracedb.proto import step_stats_pb2

NODES = "tracedb.tf.DeviceStepStats.node_stats"
DESC = step_stats_pb2.StepStats.DESCRIPTOR


def plain_devices(text, streams=(STREAM, NODES)) -> list[step_stats_pb2.DeviceStepStats]:
    """iter_plain's (parent, element) pairs put back together as upb DeviceStepStats."""
    devs, nodes = [], []
    for parent, element in pbtext.iter_plain(text, DESC, streams):
        if element.DESCRIPTOR.full_name == "tracedb.tf.DeviceStepStats":
            assert "node_stats" not in vars(element)  # streamed, not kept in it
            dev = pbtext.to_message(element, step_stats_pb2.DeviceStepStats())
            for n in nodes:
                pbtext.to_message(n, dev.node_stats.add())
            devs.append(dev)
            nodes = []
        else:
            assert parent.DESCRIPTOR.full_name == "tracedb.tf.DeviceStepStats"
            nodes.append(element)
    return devs


def test_plain_messages_read_like_upb_ones():
    """Unset fields read their defaults from the class, as upb's do; set ones are in vars()."""
    devs = [d for _, d in pbtext.iter_plain(small_text(), DESC, [STREAM])]
    node = devs[2].node_stats[0]  # the CPU device's _SOURCE: `memory_stats {}` and no output
    upb = oracle(small_text(), step_stats_pb2.StepStats).dev_stats[2].node_stats[0]
    assert node.node_name == upb.node_name == "_SOURCE"
    assert (node.thread_id, node.all_start_nanos, node.output, len(node.memory)) == (0, 0, (), 0)
    assert node.HasField("memory_stats") and upb.HasField("memory_stats")
    assert node.memory_stats.temp_memory_size == 0
    td = devs[2].node_stats[1].output[0].tensor_description
    assert not td.shape.HasField("unknown_rank") and td.shape.dim == () and td.dtype == 3  # DT_INT32
    assert not node.HasField("output") and node.output == ()
    empty = type(node)()
    assert not empty.HasField("memory_stats") and empty.memory_stats.persistent_memory_size == 0
    assert dict(devs[1].thread_names) == {} and devs[0].thread_names == {7: "tf_worker"}
    assert vars(empty) == {} and vars(empty.memory_stats) == {}  # the shared default stays empty


def test_node_streaming_gives_text_format_devices():
    text = STREAMS.read_text()
    got = plain_devices(text)
    _, want = split(oracle(text, step_stats_pb2.StepStats))
    assert len(got) == 7 and got == want
    # in 1 KiB chunks too (pieces cut inside devices and nodes)
    assert plain_devices(text[i:i + 1024] for i in range(0, len(text), 1024)) == want


def test_nodes_are_freed_as_they_are_read():
    """A node is garbage once the next one is read: the collector never sees a device's
    thousands of nodes (the point of yielding nodes, not devices)."""
    alive = []
    for _, element in pbtext.iter_plain(STREAMS.read_text(), DESC, (STREAM, NODES)):
        alive = [r for r in alive if r() is not None]
        assert len(alive) <= 1
        alive.append(weakref.ref(element))


@pytest.mark.parametrize("cache,longest", [(8, 160), (4096, 10), (1, 0)])
def test_small_caches_and_long_lines_read_the_same(monkeypatch, cache, longest):
    """A cache of 8 lines rolls into its previous generation every few lines (1: every
    line); lines over `longest` chars are tokenized each time."""
    monkeypatch.setattr(pbtext, "LINE_CACHE", cache)
    monkeypatch.setattr(pbtext, "_CACHED_LINE", longest)
    text = STREAMS.read_text()
    assert plain_devices(text) == split(oracle(text, step_stats_pb2.StepStats))[1]


def test_cache_generations(monkeypatch):
    """_learn keeps the lines it learns; a cache past LINE_CACHE lines becomes the
    previous generation (under the key None), whose lines are taken back when met again."""
    monkeypatch.setattr(pbtext, "LINE_CACHE", 4)
    table: dict = {"a": (pbtext._INT_FIELD, 0, 100)}
    cache: dict = {}
    lines = [f"a: {i}" for i in range(10)]
    for line in lines:
        assert pbtext._learn(line, table, cache) == (pbtext._SET, "a", int(line[3:]))
    prev = cache[None]
    assert set(prev) == set(lines[5:9]) and set(cache) == {None, lines[9]}
    assert pbtext._learn(lines[6], table, cache) is prev[lines[6]]  # from the previous generation
    assert lines[6] in cache
    tok = pbtext._learn(lines[0], table, cache)  # forgotten: tokenized again
    assert tok == (pbtext._SET, "a", 0) and lines[0] not in prev
    assert pbtext._learn("a: 1 a: 2", table, cache) is None  # not one item
    assert pbtext._learn("  # only a comment", table, cache) == (pbtext._NOTHING,)
    with pytest.raises(pbtext.Unsupported):
        pbtext._learn("a: 101", table, cache)  # out of the field's range: text_format says why


def test_several_items_on_a_line():
    """A line that is not one whole item sends the rest of its piece to _ITEM; the fast path
    finishes and gives text_format's message."""
    text = small_text()
    text = text.replace("dim {\n            size: 20\n          }", "dim { size: 20 } dim { size: 3 }", 2)
    text = text.replace("op_end_rel_micros: 1\n", "op_end_rel_micros: 1 op_start_rel_micros: 2 # c\n", 1)
    text = text.replace("node_stats {\n", "node_stats\n{\n", 3)
    assert text.count("dim { size: 20 } dim { size: 3 }") == 2
    want = split(oracle(text, step_stats_pb2.StepStats))[1]
    assert plain_devices(text) == want
    assert plain_devices(text[i:i + 100] for i in range(0, len(text), 100)) == want


def test_a_line_means_what_its_message_type_says():
    """Lines are cached per message type: `thread_id: 5` is a field of a node and unknown
    (skipped) in a device; `timeline_label: 3` is unknown in a device and wrong in a node."""
    text = ('dev_stats {\ndevice: "/job:a"\nthread_id: 5\ntimeline_label: 3\nnode_stats {\nthread_id: 5\n}\n'
            'other {\nthread_id: 5\n}\n}\n')  # the same lines, no indent, in three message types
    (dev,) = plain_devices(text)
    assert dev == split(oracle(text, step_stats_pb2.StepStats))[1][0]
    assert dev.node_stats[0].thread_id == 5 and dev.device == "/job:a"
    with pytest.raises(pbtext.Unsupported):
        plain_devices(text.replace("node_stats {\n", "node_stats {\ntimeline_label: 3\n"))


def _tables(path: Path) -> dict[str, pa.Table]:
    return read_tables(path)


def _binary_copy(text: str, tmp_path: Path) -> Path:
    pb = tmp_path / "oracle.pb"
    pb.write_bytes(oracle(text, step_stats_pb2.StepStats).SerializeToString())
    return pb


def _threads_text() -> str:
    """Seed 001 with thread ids on a third of the job nodes and their names (which
    text_format writes after the nodes, as TF does): those nodes wait for their device."""
    msg = oracle(STREAMS.read_text(), step_stats_pb2.StepStats)
    for dev in msg.dev_stats:
        if dev.device.startswith("/job"):
            for i, n in enumerate(dev.node_stats):
                if i % 3 == 1:
                    n.thread_id = 100 + i % 4
            for t in range(100, 104):
                dev.thread_names[t] = f"worker{t}"
    return text_format.MessageToString(msg)


def test_held_nodes_read_like_the_binary(tmp_path):
    text = _threads_text()
    p = tmp_path / "threads.txt"
    p.write_text(text)
    got, want = _tables(p), _tables(_binary_copy(text, tmp_path))
    assert got.keys() == want.keys() and all(got[t].equals(want[t]) for t in want)
    names = [n for n in got["nodes"].column("params").to_pylist() if n and "thread_name" in n]
    assert len(names) == 7 + 185  # nodes 1, 4, 7, ... of the 21 + 556 job nodes
    # devices named after their nodes (a stream's and the CPU's): all their nodes wait
    late = text
    for dev in ("/device:GPU:0/stream:15", "/job:localhost/replica:0/task:0/device:CPU:0"):
        line = f'  device: "{dev}"\n'
        at = late.index(line)
        end = late.index("\n}\ndev_stats {\n", at) + 1
        late = late[:at] + late[at + len(line):end] + line + late[end:]
    assert late != text and sorted(late) == sorted(text)
    p.write_text(late)
    want = _tables(_binary_copy(late, tmp_path))
    got = _tables(p)
    assert all(got[t].equals(want[t]) for t in want) and got.keys() == want.keys()
    assert got["nodes"].num_rows == 21 + 556 and got["kernels"].num_rows == 8 + 8 + 739


def test_fallback_in_the_middle_of_a_device(tmp_path, monkeypatch):
    """text_format takes over at a hex number in the 300th node of the big job device,
    after its first nodes became rows: the nodes not yet yielded come from it, once."""
    text = STREAMS.read_text()
    start = text.index('device: "/job:localhost/replica:0/task:0/device:GPU:0"')
    at = start
    for _ in range(300):
        at = text.index("node_stats {", at + 1)
    at = text.index("all_end_rel_micros: ", at)
    end = text.index("\n", at)
    text = text[:at] + "all_end_rel_micros: 0x" + format(int(text[at + 20:end]), "x") + text[end:]
    p = tmp_path / "hex.txt"
    p.write_text(text)
    seen = []
    real = tf_stepstats._parse_text
    monkeypatch.setattr(tf_stepstats, "_parse_text", lambda *a: (seen.append("fallback"), real(*a))[1])
    for dev, nodes in tf_stepstats._text_dev_stats(p, step_stats_pb2.StepStats):
        seen.append((dev.device, len(nodes)))
    fell = seen.index("fallback")
    gpu = "/job:localhost/replica:0/task:0/device:GPU:0"
    assert seen[fell - 1] == (gpu, 1) and seen[fell + 1] == (gpu, 556 - 299)  # 299 before, the rest after
    assert sum(n for d, n in seen[:fell] if d == gpu) == 299
    got, want = _tables(p), _tables(_binary_copy(text, tmp_path))
    assert all(got[t].equals(want[t]) for t in want) and got.keys() == want.keys()
