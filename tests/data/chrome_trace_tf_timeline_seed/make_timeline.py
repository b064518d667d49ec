"""Regenerates timeline.json.gz: the Chrome JSON that TensorFlow's timeline tool
(`timeline.Timeline(step_stats).generate_chrome_trace_format()`) writes for the StepStats
seed tests/data/tf_stepstats_gpu_streams, without TensorFlow installed.

What it reproduces of the tool (tensorflow/python/client/timeline.py): pid 0 "Allocators",
then per device two pids, "<device> Compute" and "<device> Tensors"; one `X` event per
node_stats with cat "Op", ts/dur in µs (all_start_micros / all_end_rel_micros), tid from
greedy non-overlapping lanes; on GPU-tracer devices (`/stream:` or `/memcpy` in the name)
the node name is split `name:op` (so `a/b:Pack:MEMCPYDtoD` becomes op `Pack`, name `a/b`,
and the copy's kind is lost); elsewhere op and inputs come from the label
`name = Op(in0, in1)`. Event name = op, args = {name, op, input<i>}. Dataflow arrows and
memory counters are left out (the reader skips them).

    python tests/data/chrome_trace_tf_timeline_seed/make_timeline.py
"""

import gzip
import json
import re
from pathlib import Path

from google.protobuf import text_format

from tracedb.proto import step_stats_pb2

HERE = Path(__file__).parent
SEED = HERE.parent / "tf_stepstats_gpu_streams" / "001_5e9237699abafb68.txt"


def lanes(node_stats) -> list[int]:
    ends, out = [0], []
    for ns in node_stats:
        for i, end in enumerate(ends):
            if ns.all_start_micros > end:
                break
        else:
            i = len(ends)
            ends.append(0)
        ends[i] = ns.all_start_micros + ns.all_end_rel_micros
        out.append(i)
    return out


def main() -> None:
    stats = text_format.Parse(SEED.read_text(), step_stats_pb2.StepStats(), allow_unknown_field=True)
    meta = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "Allocators"}}]
    events = []
    for k, dev in enumerate(stats.dev_stats):
        pid = 1 + 2 * k
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": dev.device + " Compute"}})
        meta.append({"name": "process_name", "ph": "M", "pid": pid + 1, "args": {"name": dev.device + " Tensors"}})
        gpu_trace = "/stream:" in dev.device or "/memcpy" in dev.device
        for ns, tid in zip(dev.node_stats, lanes(dev.node_stats)):
            inputs = []
            if gpu_trace:
                name, op = (ns.node_name.split(":") + ["unknown"])[:2]
            else:
                name = ns.node_name
                m = re.match(r"(.*) = (.*)\((.*)\)", ns.timeline_label)
                op = m[2] if m else "unknown"
                inputs = m[3].split(", ") if m and m[3] else []
            args = {"name": name, "op": op, **{f"input{i}": x for i, x in enumerate(inputs)}}
            events.append({"ph": "X", "cat": "Op", "name": op, "pid": pid, "tid": tid,
                           "ts": ns.all_start_micros, "dur": ns.all_end_rel_micros, "args": args})
    doc = {"traceEvents": meta + events}
    (HERE / "timeline.json.gz").write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), mtime=0))


if __name__ == "__main__":
    main()
