"""The whole `tracedb ingest` of a Kineto file against msgspec decoding the same bytes
into typed structs (issue 29's goal: within 1.5x).

    python bench/bench_kineto_decode.py [--file PATH] [--mb 40] [--rounds 3]

Baseline, timed in the same process: gunzip the file and decode its `traceEvents` with
`msgspec.json.Decoder` into a list of `Ev` structs (`ph`, `cat`, `name`, `pid`, `tid`,
`id`, `s`, `bp`, `args` as a dict) whose `ts` and `dur` are `decimal.Decimal` (msgspec
decodes JSON numbers into Decimal fields exactly, never through a binary float); the
top-level keys skipped. Ingest: `tracedb.ingest.ingest([file], fresh_warehouse)` (read,
convert, write Parquet, commit, snapshot). Rounds alternate the two; CPU seconds
(`time.process_time`, this process and its threads) and wall seconds, best and median.
Default input: the H200 fixture's events replicated to --mb MB of JSON
(`bench_kineto_memory.synthesize`; the reader decodes a file of up to 8 MiB once, a
larger one twice, one piece at a time), or --file (e.g. tests/data/hta_nccl_allreduce/rank-0.json.gz, the
largest Kineto fixture, 9.3 MB). Run it niced and give the machine's load (`uptime`).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tracedb.formats.base import open_trace  # noqa: E402
from tracedb.ingest import ingest  # noqa: E402


class Ev(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Decimal | None = None
    dur: Decimal | None = None
    id: Any = None
    s: Any = None
    bp: Any = None
    args: dict | None = None


class Doc(msgspec.Struct):
    traceEvents: list[Ev]


_DECODE = msgspec.json.Decoder(Doc).decode


def baseline(path: Path) -> int:
    with open_trace(path) as f:
        return len(_DECODE(f.read()).traceEvents)


def run_ingest(path: Path, tmp: Path, k: int) -> int:
    summary = ingest([path], tmp / f"wh{k}", run_id="bench")
    assert summary.ok, summary.errors
    return sum(summary.runs[0].rows.values())


def run_command(path: Path, tmp: Path, k: int) -> tuple[float, int]:
    """`tracedb ingest PATH --jobs 1` in a child process: its CPU seconds (user + system,
    the child's rusage) and the rows it reports."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([sys.executable, "-m", "tracedb", "ingest", str(path), "-w", str(tmp / f"wh{k}"),
                        "--run-id", "bench", "--jobs", "1"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise SystemExit(f"tracedb ingest failed: {p.stderr[-2000:]}")
    rows = int(p.stdout.rsplit(" file(s), ", 1)[1].split(" rows")[0])
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, rows


def timed(fn) -> tuple[float, float, Any]:
    c, w = time.process_time(), time.perf_counter()
    out = fn()
    return time.process_time() - c, time.perf_counter() - w, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", type=Path)
    ap.add_argument("--mb", type=float, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--command", action="store_true", help="time the tracedb ingest command, not the library call")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    try:
        path = args.file
        if path is None:
            from bench_kineto_memory import synthesize

            path = tmp / "trace.json"
            synthesize(path, args.mb, False)
        with open_trace(path) as f:
            size = len(f.read())
        base_c, base_w, ing_c, ing_w = [], [], [], []
        events = rows = 0
        for k in range(args.rounds):
            c, w, events = timed(lambda: baseline(path))
            base_c.append(c)
            base_w.append(w)
            if args.command:
                w = time.perf_counter()
                c, rows = run_command(path, tmp, k)
                w = time.perf_counter() - w
            else:
                c, w, rows = timed(lambda: run_ingest(path, tmp, k))
            ing_c.append(c)
            ing_w.append(w)
            shutil.rmtree(tmp / f"wh{k}", ignore_errors=True)
        print(f"{path.name}: {size / 1e6:.1f} MB of JSON, {events} events, {rows} rows, {args.rounds} rounds")
        for label, c, w in (("msgspec structs, Decimal ts/dur", base_c, base_w), ("tracedb ingest" + (" command" if args.command else ""), ing_c, ing_w)):
            print(f"  {label:32s} CPU best {min(c):6.2f} s median {statistics.median(c):6.2f} s | "
                  f"wall best {min(w):6.2f} s median {statistics.median(w):6.2f} s")
        print(f"  ratio ingest / msgspec: CPU best {min(ing_c) / min(base_c):.2f}x, "
              f"median {statistics.median(ing_c) / statistics.median(base_c):.2f}x; "
              f"wall best {min(ing_w) / min(base_w):.2f}x (goal 1.5x)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
