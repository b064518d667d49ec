"""TF StepStats text: tracedb's reader and whole ingest vs `text_format.Parse` alone.

    python bench/bench_tf_text.py [--mb 17] [--repeat 3] [--shift]

Builds a StepStats text of about --mb MB by repeating the LSTM seed trace
(tests/data/tf_stepstats_gpu_streams, 1.4 MB: `dev_stats` is a repeated top-level field,
so the concatenation is one valid StepStats; with --shift each copy's timestamps are moved
on, as in a trace of many steps, so that their lines do not repeat: pbtext caches lines),
then times, interleaved, best of --repeat:
  baseline    google.protobuf.text_format.Parse of the decoded text (what a script would do)
  pbtext      tracedb.formats.pbtext alone on the whole text (one string), as the reader
              calls it (`iter_plain`: Plain messages, each NodeExecStats yielded)
  pbtext_cut  pbtext fed 1 MiB chunks (cut into pieces after brace-ended lines)
  read_whole  tf_stepstats.read as before it streamed: the whole file decoded to one string
  read        tf_stepstats.read: file -> Arrow batches, the text read 1 MiB at a time
  ingest      tracedb.ingest.ingest into a fresh warehouse (parquet + catalog)
  ingest_more the same into an existing warehouse as a new run (a nightly job's case:
              the lake's tables exist; each repetition adds a run, so its snapshot grows by one)
and prints each as MB/s and as speed-up over the baseline (higher is better).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from google.protobuf import text_format  # noqa: E402

from tracedb.formats import pbtext, tf_stepstats  # noqa: E402
from tracedb.formats.base import ReadContext, read_all  # noqa: E402
from tracedb.ingest import ingest  # noqa: E402
from tracedb.proto import step_stats_pb2  # noqa: E402

SEED = ROOT / "tests" / "data" / "tf_stepstats_gpu_streams" / "001_5e9237699abafb68.txt"


_TIMESTAMP = re.compile(rb"^(\s*(?:all_start_micros|scheduled_micros|alloc_micros): )(\d+)$", re.M)


def build(mb: float, out: Path, shift: bool = False) -> Path:
    seed = SEED.read_bytes()
    copies = max(1, round(mb * 1e6 / len(seed)))
    with open(out, "wb") as f:
        for k in range(copies):
            f.write(_TIMESTAMP.sub(lambda m: m[1] + b"%d" % (int(m[2]) + k * 1_000_003), seed) if shift else seed)
    return out


def run(path: Path, repeat: int) -> dict[str, float]:
    text = path.read_text()
    work = Path(tempfile.mkdtemp(prefix="bench_tf_"))

    def baseline():
        text_format.Parse(text, step_stats_pb2.StepStats(), allow_unknown_field=True)

    def fast():
        for _ in pbtext.iter_plain(text, step_stats_pb2.StepStats.DESCRIPTOR, tf_stepstats._STREAMS):
            pass

    def fast_chunks():
        chunks = (text[i:i + (1 << 20)] for i in range(0, len(text), 1 << 20))
        for _ in pbtext.iter_plain(chunks, step_stats_pb2.StepStats.DESCRIPTOR, tf_stepstats._STREAMS):
            pass

    def read():
        for _ in tf_stepstats.read(path, ReadContext("bench", path.name)):
            pass

    def read_whole():
        saved = tf_stepstats._text_chunks
        tf_stepstats._text_chunks = lambda p: read_all(p).decode("utf-8")  # a str: one piece
        try:
            read()
        finally:
            tf_stepstats._text_chunks = saved

    def whole_ingest():
        wh = work / "wh"
        shutil.rmtree(wh, ignore_errors=True)
        assert ingest([path], wh, run_id="bench").ok

    more = iter(range(1 << 30))
    assert ingest([SEED], work / "existing", run_id="seed").ok  # made once, untimed

    def ingest_more():
        assert ingest([path], work / "existing", run_id=f"bench{next(more)}").ok

    fns = {"baseline": baseline, "pbtext": fast, "pbtext_cut": fast_chunks, "read_whole": read_whole,
           "read": read, "ingest": whole_ingest, "ingest_more": ingest_more}
    best = {k: float("inf") for k in fns}
    for _ in range(repeat):  # interleaved, so load on the machine hits all alike
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t)
    shutil.rmtree(work, ignore_errors=True)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=17)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shift", action="store_true", help="timestamps moved on in each copy")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = build(args.mb, Path(d) / "stepstats.txt", args.shift)
        size = path.stat().st_size / 1e6
        best = run(path, args.repeat)
    print(f"TF StepStats text, {size:.1f} MB{' (timestamps shifted)' if args.shift else ''}, best of {args.repeat}")
    print(f"{'':11} {'seconds':>8} {'MB/s':>7} {'x baseline':>11}")
    for k, t in best.items():
        print(f"{k:11} {t:8.2f} {size / t:7.1f} {best['baseline'] / t:11.2f}")


if __name__ == "__main__":
    main()
