"""Ingest speed against plain parsing, in the same process, on the real traces we ship.

    python bench/bench_ingest.py [--repeat 5]

For each trace it times, best of --repeat:
  baseline   the plain parse a one-off script would do (protobuf text_format/ParseFromString
             for TF, json.load for Kineto, XSpace ParseFromString)
  read       tracedb's reader: parse + flatten into Arrow batches
  ingest     the whole `tracedb ingest` of that file into a fresh warehouse (parquet + catalog)
and prints the ratios read/baseline and ingest/baseline (lower is better; 1.0 = as fast as
just parsing). With HolisticTraceAnalysis installed it also times HTA's trace loader on the
Kineto trace, the usual way to get a PyTorch trace into a DataFrame.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracedb.formats import get_format  # noqa: E402
from tracedb.formats.base import ReadContext, read_all  # noqa: E402
from tracedb.ingest import ingest  # noqa: E402
from tracedb import process  # noqa: E402

process.own()  # read as `tracedb ingest` and its workers do: the GC paused and frozen around reads

DATA = ROOT / "tests" / "data"


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def tf_baseline(path: Path):
    from google.protobuf import text_format

    from tracedb.proto import run_metadata_pb2, step_stats_pb2

    text = read_all(path).decode()
    msg = run_metadata_pb2.RunMetadata() if text.lstrip().startswith("step_stats") else step_stats_pb2.StepStats()
    return lambda: text_format.Parse(text, msg.__class__(), allow_unknown_field=True)


def tf_binary(path: Path, tmp: Path) -> Path:
    from google.protobuf import text_format

    from tracedb.proto import run_metadata_pb2, step_stats_pb2

    text = read_all(path).decode()
    msg = run_metadata_pb2.RunMetadata() if text.lstrip().startswith("step_stats") else step_stats_pb2.StepStats()
    text_format.Parse(text, msg, allow_unknown_field=True)
    out = tmp / (path.stem + ".pb")
    out.write_bytes(msg.SerializeToString())
    return out


def tf_binary_baseline(path: Path):
    from tracedb.proto import run_metadata_pb2, step_stats_pb2

    data = path.read_bytes()
    cls = run_metadata_pb2.RunMetadata if "000_" in path.name else step_stats_pb2.StepStats
    return lambda: cls.FromString(data)


def kineto_baseline(path: Path):
    return lambda: json.load(gzip.open(path, "rt"))


def xspace_baseline(path: Path):
    from tracedb.proto import xplane_pb2

    data = path.read_bytes()
    return lambda: xplane_pb2.XSpace.FromString(data)


def reader(path: Path, fmt: str):
    mod = get_format(fmt)

    def run():
        rows = 0
        for _, batch in mod.read(path, ReadContext(run_id="bench", source_file=path.name)):
            rows += batch.num_rows
        return rows

    return run


def ingester(path: Path, tmp: Path):
    def run():
        wh = Path(tempfile.mkdtemp(dir=tmp))
        assert ingest([path], wh, run_id="bench").ok
        shutil.rmtree(wh)

    return run


def hta_loader(path: Path, tmp: Path):
    try:
        from hta.common.trace_parser import parse_trace_dataframe  # type: ignore
        from hta.configs.parser_config import ParserConfig  # type: ignore
    except ImportError:
        return None
    folder = tmp / "hta"
    folder.mkdir(exist_ok=True)
    shutil.copy(path, folder / "rank-0.json.gz")

    def run():
        import contextlib
        import io
        import logging

        logging.disable(logging.CRITICAL)  # HTA logs every parse
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            parse_trace_dataframe(str(folder / "rank-0.json.gz"), ParserConfig())
        logging.disable(logging.NOTSET)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tracedb-bench-"))
    cases = [
        ("TF RunMetadata text (292 nodes)", DATA / "tf_runmetadata_text/000_6b18107121892edf.txt", "tf_stepstats", tf_baseline),
        ("TF StepStats text (577 nodes, 755 kernels)", DATA / "tf_stepstats_gpu_streams/001_5e9237699abafb68.txt", "tf_stepstats", tf_baseline),
        ("TF StepStats binary", None, "tf_stepstats", tf_binary_baseline),
        ("Kineto JSON.gz (H200, 8.4k events)", DATA / "kineto_h200_fp32/kineto_h200_fp32.json.gz", "kineto", kineto_baseline),
        ("XSpace (JAX H200)", DATA / "xspace_jax_h200/jax_h200.xplane.pb", "xspace", xspace_baseline),
    ]
    cases[2] = (cases[2][0], tf_binary(cases[1][1], tmp), *cases[2][2:])
    print(f"best of {args.repeat}; ratios are tracedb time / baseline time\n")
    print(f"{'trace':44} {'baseline':>9} {'read':>9} {'ingest':>9} {'read/base':>10} {'ingest/base':>12}")
    for label, path, fmt, base in cases:
        try:
            get_format(fmt)
        except Exception:  # noqa: BLE001
            print(f"{label:44} (reader {fmt} not available)")
            continue
        b = best(base(path), args.repeat)
        r = best(reader(path, fmt), args.repeat)
        i = best(ingester(path, tmp), args.repeat)
        print(f"{label:44} {b*1e3:8.1f}ms {r*1e3:8.1f}ms {i*1e3:8.1f}ms {r/b:10.2f} {i/b:12.2f}")
        if fmt == "kineto":
            hta = hta_loader(path, tmp)
            if hta is None:
                print(f"{'  vs HTA loader':44} (pip install HolisticTraceAnalysis to compare)")
            else:
                h = best(hta, args.repeat)
                print(f"{'  HTA parse_trace_dataframe':44} {h*1e3:8.1f}ms {'':9} {'':9} {'ingest/HTA':>10} {i/h:12.2f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
