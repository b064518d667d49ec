"""Whole `tracedb ingest` of one large file against the fastest library decoding its bytes
(issue 29), each format in the same process, interleaved, best of --repeat.

    python bench/bench_decoders.py [--mb 100] [--nsys-copies 200] [--megengine-copies 200] [--repeat 3]
                                   [--formats xspace,tf_stepstats,nsys,megengine] [--unique-ids] [--cli]

The files are made from the real traces we ship by repeating their elements
(`tests/bigtrace.py`; written uncompressed, so both sides read the same bytes):

  format        file                                  baseline (the decoder)
  xspace        JAX H200 XSpace, busiest GPU line      upb `XSpace.FromString` of the bytes
                repeated to --mb MB
  tf_stepstats  TF StepStats binary, node_stats        upb `StepStats.FromString`
                repeated to --mb MB
  nsys          the nvFuser H200 export with its       `sqlite3`: the very statements the
                kernels, runtime calls, copies and     reader runs (captured on a first
                NVTX ranges copied --nsys-copies times read), every row fetched
  megengine     the seed profile's graph copied        `msgspec.json.decode` of the bytes
                --megengine-copies times               into typed structs (`MgeProfile`:
                                                       the sections, operators, vars,
                                                       chunks and timings the reader uses)

`ingest` is `tracedb.ingest.ingest([run], fresh_warehouse, jobs=1)`: read, convert, write
Parquet, commit, publish the snapshot; with --cli also the command `tracedb ingest FILE
--jobs 1` in a fresh process (interpreter start-up and imports included; its CPU from
`getrusage(RUSAGE_CHILDREN)`). `--nsys-copies 0` / `--megengine-copies 1` time the shipped
files themselves, where the ingest's fixed cost (rollups, Parquet, Delta commit) dominates. Wall and CPU seconds (this process's, all threads)
are both printed, each the best of --repeat; on a shared machine read the CPU columns. The ratio ingest/baseline is the figure the issue
sets at <= 1.5. Kineto is `bench/bench_kineto_decode.py`'s (msgspec typed structs with
exact decimal times); TF text is `bench/bench_tf_text.py`'s (>= 3x `text_format.Parse`).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import bigtrace  # noqa: E402
import msgspec  # noqa: E402

from tracedb import process  # noqa: E402
from tracedb.ingest import ingest  # noqa: E402
from tracedb.proto import step_stats_pb2, xplane_pb2  # noqa: E402

process.own()  # read as `tracedb ingest` and its workers do: the GC paused and frozen around reads

DATA = ROOT / "tests" / "data"
XSPACE = DATA / "xspace_jax_h200" / "jax_h200.xplane.pb"
STEPSTATS = DATA / "tf_stepstats_gpu_streams" / "001_5e9237699abafb68.txt"
MEGENGINE = DATA / "megengine_graph_profile" / "004_825e28a4f520ddc2.txt"
NSYS = DATA / "nsys_nvfuser_h200" / "nvfuser_h200_report1.sqlite"
NSYS_GROWN = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS")


def _plain(make, dst: Path, *args) -> Path:
    """Run a bigtrace maker (which writes gzip) and leave the decompressed file at dst."""
    import gzip

    gz = dst.with_suffix(dst.suffix + ".gz")
    make(*args[:1], gz, *args[1:])
    with gzip.open(gz, "rb") as src, open(dst, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    gz.unlink()
    return dst


def unique_ids(path: Path) -> Path:
    """The XSpace at `path` rewritten with every event's `correlation_id`, `scope_range_id`
    and `cuda_graph_node_id` made its own (`--unique-ids`): repeated events otherwise repeat
    these stats' encodings, which the reader decodes once each (a real trace's differ)."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    for plane in space.planes:
        ids = {k for k, m in plane.stat_metadata.items()
               if m.name in ("correlation_id", "scope_range_id", "cuda_graph_node_id")}
        for line in plane.lines:
            for i, ev in enumerate(line.events):
                for st in ev.stats:
                    if st.metadata_id in ids and (which := st.WhichOneof("value")) in ("int64_value", "uint64_value"):
                        setattr(st, which, getattr(st, which) + 1_000_003 * i)
    path.write_bytes(space.SerializeToString())
    return path


class MgeTiming(msgspec.Struct):
    start: float
    kern: float
    end: float


class MgeFootprint(msgspec.Struct):
    computation: float | None = None
    memory: int | None = None
    in_shapes: list[list[int]] | None = None
    out_shapes: list[list[int]] | None = None
    param: dict[str, Any] | None = None


class MgeOperator(msgspec.Struct):
    id: str
    name: str
    type: str
    input: list[str]
    output: list[str]
    extra: dict[str, Any] | None = None


class MgeLayout(msgspec.Struct):
    dtype: str | None = None
    shape: list[int] | None = None


class MgeMemPlan(msgspec.Struct):
    layout: MgeLayout | None = None
    mem_chunk_id: str | None = None
    offset_byte: int | None = None


class MgeInferTag(msgspec.Struct):
    inferred_result: Any = None


class MgeVar(msgspec.Struct):
    id: str
    name: str
    comp_node: str | None = None
    dev_ptr: int | None = None
    mem_plan: MgeMemPlan | None = None
    static_infer_tags: dict[str, MgeInferTag] | None = None
    flag: list[str] | None = None


class MgeChunk(msgspec.Struct):
    id: str
    size: int
    owner_var: str | None = None
    dev_ptr: int | None = None


class MgeProfiler(msgspec.Struct):
    host: dict[str, dict[str, MgeTiming]]
    device: dict[str, dict[str, MgeTiming]]
    opr_footprint: dict[str, MgeFootprint | None]


class MgeGraph(msgspec.Struct):
    operator: dict[str, MgeOperator]
    var: dict[str, MgeVar]
    mem_chunk: dict[str, MgeChunk]
    comp_seq: list[str]


class MgeProfile(msgspec.Struct):
    """A MegEngine graph profile as typed records: what the reader turns into rows."""
    profiler: MgeProfiler
    graph_exec: MgeGraph


_MGE = msgspec.json.Decoder(MgeProfile)


def grow_nsys(dst: Path, copies: int) -> Path:
    """The nvFuser export with the rows of NSYS_GROWN copied `copies` times, times shifted
    past the trace's end and correlation ids past the largest, so each copy is whole."""
    shutil.copy(NSYS, dst)
    con = sqlite3.connect(dst)
    span = max(con.execute(f'SELECT max("end") FROM "{t}"').fetchone()[0] or 0 for t in NSYS_GROWN) + 1
    corr = max(con.execute(f'SELECT max(correlationId) FROM "{t}"').fetchone()[0] or 0
               for t in NSYS_GROWN if t.startswith("CUPTI")) + 1
    for t in NSYS_GROWN:
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
        for k in range(1, copies + 1):
            shifted = [f'"{c}" + {k * span}' if c in ("start", "end") else
                       f'"{c}" + {k * corr}' if c == "correlationId" else f'"{c}"' for c in cols]
            names = ", ".join(f'"{c}"' for c in cols)
            con.execute(f'INSERT INTO "{t}" ({names}) SELECT {", ".join(shifted)} FROM "{t}" WHERE "start" < {span}')
    con.commit()
    con.close()
    return dst


def nsys_statements(path: Path) -> list[str]:
    """The SQL the nsys reader runs on `path` (captured from one ingest)."""
    seen: list[str] = []
    real = sqlite3.connect

    def tracing(*a, **kw):
        con = real(*a, **kw)
        con.set_trace_callback(seen.append)
        return con

    sqlite3.connect = tracing
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "run"
            run.mkdir()
            (run / path.name).symlink_to(path)
            assert ingest([run], Path(tmp) / "wh", jobs=1).ok
    finally:
        sqlite3.connect = real
    return [s for s in seen if s.lstrip().upper().startswith("SELECT")]


def decode_nsys(path: Path, statements: list[str]) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return sum(len(con.execute(s).fetchall()) for s in statements)
    finally:
        con.close()


def ingest_once(path: Path) -> float:
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        run = Path(tmp) / "run"
        run.mkdir()
        (run / path.name).symlink_to(path)
        start, cpu = time.perf_counter(), time.process_time()
        summary = ingest([run], Path(tmp) / "wh", jobs=1)
        took = time.perf_counter() - start, time.process_time() - cpu
        assert summary.ok, summary.errors
        return took


def cli_once(path: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of the command `tracedb ingest FILE --jobs 1` in a fresh process."""
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        cmd = [sys.executable, "-m", "tracedb", "ingest", str(path), "-w", str(Path(tmp) / "wh"), "--run-id", "r",
               "--jobs", "1", "-q"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def timed(fn) -> tuple[float, float]:
    """(wall, CPU) seconds of fn(): CPU is this process's, all its threads (DuckDB's too)."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--nsys-copies", type=int, default=200)
    ap.add_argument("--megengine-copies", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--formats", default="xspace,tf_stepstats,nsys,megengine",
                    help="comma-separated: which of the formats to make and time")
    ap.add_argument("--cli", action="store_true", help="also time the `tracedb ingest` command (a fresh process)")
    ap.add_argument("--unique-ids", action="store_true",
                    help="XSpace: give every repeated event its own correlation / scope ids (`unique_ids`)")
    args = ap.parse_args()
    want = set(args.formats.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        makers = {
            "xspace": lambda: (unique_ids if args.unique_ids else Path)(
                _plain(bigtrace.xspace, tmp / "big.xplane.pb", XSPACE, args.mb)),
            "tf_stepstats": lambda: _plain(bigtrace.step_stats, tmp / "big.stepstats.pb", STEPSTATS, args.mb),
            "nsys": lambda: grow_nsys(tmp / "big.sqlite", args.nsys_copies),
            "megengine": lambda: _plain(bigtrace.megengine, tmp / "big.megengine.json", MEGENGINE,
                                        args.megengine_copies),
        }
        files = {fmt: make() for fmt, make in makers.items() if fmt in want}
        statements = nsys_statements(files["nsys"]) if "nsys" in files else []
        decoders = {
            "xspace": lambda p: xplane_pb2.XSpace.FromString(p.read_bytes()),
            "tf_stepstats": lambda p: step_stats_pb2.StepStats.FromString(p.read_bytes()),
            "nsys": lambda p: decode_nsys(p, statements),
            "megengine": lambda p: _MGE.decode(p.read_bytes()),
        }
        print(f"{'format':<13} {'MB':>7} {'decode s':>9} {'ingest s':>9} {'ratio':>6}   "
              f"{'decode CPU':>10} {'ingest CPU':>10} {'CPU ratio':>9}"
              + (f"   {'CLI s':>7} {'CLI CPU':>7} {'ratio':>6}" if args.cli else "")
              + "   (goal <= 1.5; best of --repeat)")
        for fmt, path in files.items():
            base, whole, cli = [], [], []
            for _ in range(args.repeat):  # interleaved: a load change hits both
                base.append(timed(lambda: decoders[fmt](path)))
                whole.append(ingest_once(path))
                if args.cli:
                    cli.append(cli_once(path))
            (b, bc), (w, wc) = [tuple(map(min, zip(*t))) for t in (base, whole)]
            line = (f"{fmt:<13} {path.stat().st_size / 1e6:7.1f} {b:9.3f} {w:9.3f} {w / b:6.2f}   "
                    f"{bc:10.3f} {wc:10.3f} {wc / bc:9.2f}")
            if cli:
                c, cc = map(min, zip(*cli))
                line += f"   {c:7.3f} {cc:7.3f} {cc / bc:6.2f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
