"""The streaming TF binary, XSpace and MegEngine readers vs the whole-document readers
they replaced (issue 13): speed on the real traces, speed and peak memory on large ones.

    python bench/bench_stream.py [--repeat 5] [--mb 100] [--megengine-copies 200] [--batch-rows N]
                                 [--skip-speed] [--skip-large]

1. Speed, in this process, interleaved: every TF binary, XSpace and MegEngine seed or
   fixture (plain and gzipped), read by the streaming reader and by the whole-document
   oracle (`tests/whole_readers.py`: `ParseFromString` / `json.loads` of the whole file,
   then the same row code). CPU seconds, median of --repeat; ratio stream/whole.
2. Large traces made from the real ones (`tests/bigtrace.py`, gzipped): XSpace and TF
   StepStats of about --mb MB (real events / node_stats repeated), MegEngine with its
   graph copied --megengine-copies times. Each reader in its own subprocess: wall and
   CPU seconds, peak RSS (VmHWM) above the interpreter after imports and a read of a
   small file of the format (libraries' lazy set-up). A reader holds
   one batch of rows (65536; ~250 MB of Python objects for XSpace kernels) whatever the
   file; --batch-rows 2048 shrinks that floor to show the file's own share.
3. The MegEngine walk (`jsonstream.ObjectStream`, every entry three levels down) vs
   ijson (yajl2_c) when it is installed: one `kvitems` pass per section, and one pass
   of raw `ijson.parse` events (no objects built): CPU seconds on the large MegEngine file.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

import bigtrace  # noqa: E402
from google.protobuf import text_format  # noqa: E402
from whole_readers import megengine_whole, whole_protobuf  # noqa: E402

from tracedb.formats import jsonstream, megengine, tf_stepstats, xspace  # noqa: E402
from tracedb.formats.base import ReadContext  # noqa: E402
from tracedb.proto import run_metadata_pb2, step_stats_pb2  # noqa: E402

DATA = ROOT / "tests" / "data"
MEGENGINE = DATA / "megengine_graph_profile" / "004_825e28a4f520ddc2.txt"
XSPACE = DATA / "xspace_jax_h200" / "jax_h200.xplane.pb"
STEPSTATS = DATA / "tf_stepstats_gpu_streams" / "001_5e9237699abafb68.txt"
RUNMETA = DATA / "tf_runmetadata_text" / "000_6b18107121892edf.txt"


def _rows(read, path: Path) -> int:
    return sum(b.num_rows for _, b in read(path, ReadContext("bench", path.name)))


def _whole(mod):
    if mod is megengine:
        return megengine_whole

    def read(path, ctx):
        with whole_protobuf():
            yield from mod.read(path, ctx)
    return read


def inputs(tmp: Path) -> list[tuple[str, object, Path]]:
    out = []
    for label, src, cls in (("TF RunMetadata binary", RUNMETA, run_metadata_pb2.RunMetadata),
                            ("TF StepStats binary", STEPSTATS, step_stats_pb2.StepStats)):
        msg = cls()
        text_format.Parse(src.read_text(), msg)
        (tmp / f"{cls.__name__}.pb").write_bytes(msg.SerializeToString())
        out.append((label, tf_stepstats, tmp / f"{cls.__name__}.pb"))
    out.append(("XSpace (JAX H200)", xspace, XSPACE))
    out.append(("XSpace (JAX MLP folder)", xspace, next((DATA / "jax_profile_folder").rglob("*.xplane.pb"))))
    out.append(("MegEngine JSON", megengine, MEGENGINE))
    for label, mod, path in list(out):
        gz = tmp / (path.name + ".gz")
        gz.write_bytes(gzip.compress(path.read_bytes()))
        out.append((label + " .gz", mod, gz))
    return out


def speed(tmp: Path, repeat: int) -> None:
    print(f"{'trace':34} {'bytes':>9} {'rows':>7} {'whole':>9} {'stream':>9} {'stream/whole':>13}")
    for label, mod, path in inputs(tmp):
        whole, stream = _whole(mod), mod.read
        rows = _rows(stream, path)
        assert rows == _rows(whole, path)
        tw, ts = [], []
        for _ in range(repeat):
            for fn, out in ((whole, tw), (stream, ts)):
                t = time.process_time()
                _rows(fn, path)
                out.append(time.process_time() - t)
        w, s = statistics.median(tw), statistics.median(ts)
        print(f"{label:34} {path.stat().st_size:>9} {rows:>7} {w * 1e3:>7.1f}ms {s * 1e3:>7.1f}ms {s / w:>13.2f}")


_CHILD = """
import resource, sys, time
sys.path[:0] = [{tests!r}, {root!r}]
from pathlib import Path
from tracedb.formats import {mod} as mod
from tracedb.formats.base import ReadContext
import whole_readers
if {batch_rows}:  # a smaller row batch: what is left is the file's share
    from tracedb.formats import base
    init = base.BatchBuilder.__init__
    base.BatchBuilder.__init__ = lambda self, table, batch_rows=0, columns=None: init(self, table, {batch_rows}, columns)
    mod._BATCH_ROWS = {batch_rows}
def peak_mb():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
read = mod.read
if {whole!r}:
    if mod.NAME == 'megengine':
        read = whole_readers.megengine_whole
    else:
        patch = whole_readers.whole_protobuf()  # held: its exit restores pbwire
        patch.__enter__()
sum(b.num_rows for _, b in read(Path({warm!r}), ReadContext('bench', 'x')))  # libraries' lazy set-up
before = peak_mb()
t, c = time.perf_counter(), time.process_time()
rows = sum(b.num_rows for _, b in read(Path({path!r}), ReadContext('bench', 'x')))
print(rows, time.perf_counter() - t, time.process_time() - c, peak_mb() - before)
"""


def _child(mod: str, path: Path, warm: Path, whole: bool, batch_rows: int) -> tuple[int, float, float, float]:
    code = _CHILD.format(tests=str(ROOT / "tests"), root=str(ROOT), mod=mod, path=str(path), warm=str(warm),
                         whole=whole, batch_rows=batch_rows)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    rows, wall, cpu, peak = out.stdout.split()
    return int(rows), float(wall), float(cpu), float(peak)


def large(tmp: Path, mb: float, copies: int, batch_rows: int) -> Path:
    files = []
    p = tmp / "big.xplane.pb.gz"
    n, _ = bigtrace.xspace(XSPACE, p, mb)
    files.append(("XSpace", "xspace", p, n, XSPACE))
    p = tmp / "big.stepstats.pb.gz"
    n, _ = bigtrace.step_stats(STEPSTATS, p, mb)
    bigtrace.step_stats(STEPSTATS, tmp / "warm.stepstats.pb.gz", 0.1)
    files.append(("TF StepStats binary", "tf_stepstats", p, n, tmp / "warm.stepstats.pb.gz"))
    p = tmp / "big.megengine.json.gz"
    n = bigtrace.megengine(MEGENGINE, p, copies)
    files.append((f"MegEngine x{copies}", "megengine", p, n, MEGENGINE))
    print(f"\n{'large trace (gzipped)':26} {'MB':>7} {'gz MB':>6} {'rows':>9} "
          f"{'whole s':>8} {'stream s':>9} {'cpu ratio':>9} {'whole MB':>9} {'stream MB':>10} {'mem ratio':>9}")
    for label, mod, path, n, warm in files:
        rw, ww, cw, mw = _child(mod, path, warm, True, batch_rows)
        rs, ws, cs, ms = _child(mod, path, warm, False, batch_rows)
        assert rw == rs, (rw, rs)
        print(f"{label:26} {n / 1e6:>7.1f} {path.stat().st_size / 1e6:>6.1f} {rs:>9} {ww:>8.1f} {ws:>9.1f} "
              f"{cs / cw:>9.2f} {mw:>9.0f} {ms:>10.0f} {ms / mw:>9.2f}")
    return files[-1][2]


def ijson_walk(path: Path) -> None:
    t = time.process_time()
    n = sum(1 for _ in jsonstream.ObjectStream(path, 3))
    ours = time.process_time() - t
    print(f"\nMegEngine walk of {path.name}: jsonstream.ObjectStream {ours:.2f}s CPU ({n} items)")
    try:
        import ijson
    except ImportError:
        print("  ijson not installed: pip install ijson to compare")
        return
    maps = ["profiler.host", "profiler.device", "profiler.opr_footprint", "graph_exec.operator",
            "graph_exec.var", "graph_exec.mem_chunk"]
    t = time.process_time()
    for m in maps:
        with gzip.open(path) as f:
            for _ in ijson.kvitems(f, m, use_float=True):
                pass
    with gzip.open(path) as f:
        for _ in ijson.items(f, "graph_exec.comp_seq.item"):
            pass
    passes = time.process_time() - t
    t = time.process_time()
    with gzip.open(path) as f:
        for _ in ijson.parse(f, use_float=True):
            pass
    events = time.process_time() - t
    print(f"  ijson {ijson.__version__} ({ijson.backend}): kvitems a pass per section {passes:.2f}s "
          f"({passes / ours:.1f}x), raw parse events alone {events:.2f}s ({events / ours:.1f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--megengine-copies", type=int, default=200)
    ap.add_argument("--skip-large", action="store_true")
    ap.add_argument("--batch-rows", type=int, default=0,
                    help="rows a reader holds before it yields a batch (default: the readers' own, 65536)")
    ap.add_argument("--skip-speed", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_speed:
            speed(Path(tmp), args.repeat)
        if not args.skip_large:
            big = large(Path(tmp), args.mb, args.megengine_copies, args.batch_rows)
            ijson_walk(big)


if __name__ == "__main__":
    main()
