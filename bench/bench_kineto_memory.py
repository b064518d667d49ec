"""Peak memory of the streaming Kineto reader vs `json.load` on a large synthetic trace.

    python bench/bench_kineto_memory.py [--mb 256] [--gzip] [--keep PATH]

Synthesizes a Kineto trace of about --mb MB by replicating the events of
tests/data/kineto_h200_fp32 (timestamps shifted by the fixture's span, correlation /
External ids / flow ids / ProfilerStep numbers shifted so every replica links to its own
ops), then measures in separate subprocesses, each reporting its own peak RSS
(VmHWM from /proc/self/status, else ru_maxrss):

  - baseline: `json.load` of the file (what a non-streaming reader would hold),
  - reader:   `tracedb.formats.kineto.read` consuming every batch,
  - ingest:   the whole `tracedb ingest` of the file into a fresh warehouse,
  - idle:     the same imports doing nothing (the interpreter + pyarrow floor).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "data" / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"


def _shifter(events: list[dict]):
    """Returns shift(event, r) -> JSON text of the r-th replica of the event."""
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"]
    span = max(ts) - min(ts) + 1000.0  # µs; replicas follow each other on the timeline
    corrs = [e["args"]["correlation"] for e in events if "correlation" in e.get("args", {})]
    exts = [e["args"]["External id"] for e in events if "External id" in e.get("args", {})]
    ids = [e["id"] for e in events if isinstance(e.get("id"), int)]
    dc = max(corrs + ids) + 1
    de = max(exts) + 1
    di = max(ids) + 1

    def shift(e: dict, r: int) -> str:
        if r == 0:
            return json.dumps(e)
        e = dict(e)
        if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M":
            e["ts"] = round(e["ts"] + r * span, 3)
        if "args" in e:
            a = e["args"] = dict(e["args"])
            if "correlation" in a:
                a["correlation"] += r * dc
            if "External id" in a:
                a["External id"] += r * de
        if isinstance(e.get("id"), int):
            e["id"] += r * (dc if e.get("cat") == "ac2g" else di)
        name = e.get("name", "")
        if name.startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(name[13:]) + 3 * r}"
        return json.dumps(e)

    return shift


def synthesize(path: Path, mb: float, use_gzip: bool) -> int:
    doc = json.load(gzip.open(FIXTURE))
    events = doc.pop("traceEvents")
    body = [e for e in events if e.get("ph") != "M"]  # metadata events once, at the end
    meta_events = [e for e in events if e.get("ph") == "M"]
    shift = _shifter(events)
    target = int(mb * 1e6)
    head = json.dumps(doc)[:-1] + ', "traceEvents": [\n'
    opener = gzip.open if use_gzip else open
    written = replicas = 0
    with opener(path, "wt") as f:
        f.write(head)
        first = True
        while written < target:
            for e in body:
                s = shift(e, replicas)
                f.write(s if first else ",\n" + s)
                first = False
                written += len(s) + 2
            replicas += 1
        for e in meta_events:
            f.write(",\n" + json.dumps(e))
        f.write("\n]}\n")
    return replicas


_CHILD = {
    "idle": "import json, gzip; import tracedb.formats.kineto, pyarrow; out = {}",
    "baseline": (
        "import json; import tracedb.formats.kineto, pyarrow\n"
        "from tracedb.formats.base import open_trace\n"
        "with open_trace(path) as f: doc = json.load(f)\n"
        "out = {'events': len(doc['traceEvents'])}"
    ),
    "reader": (
        "import tracedb.formats.kineto as k, pyarrow\n"
        "from tracedb.formats.base import ReadContext\n"
        "from tracedb import process; process.own()  # as `tracedb ingest` reads\n"
        "rows = {}\n"
        "for t, b in k.read(path, ReadContext(run_id='bench', source_file=str(path))):\n"
        "    rows[t] = rows.get(t, 0) + b.num_rows\n"
        "out = rows"
    ),
    # The whole `tracedb ingest`: reader + parquet writer + catalog commit.
    "ingest": (
        "import tempfile, tracedb.formats.kineto, pyarrow\n"
        "from tracedb.ingest import ingest\n"
        "from tracedb import process; process.own()  # as `tracedb ingest` reads\n"
        "wh = Path(tempfile.mkdtemp()) / 'wh'\n"
        "s = ingest([path], wh, run_id='bench')\n"
        "assert s.ok, s.errors\n"
        "out = dict(s.runs[0].rows)"
    ),
}


# Peak RSS of this process image. ru_maxrss is not enough on Linux: a child inherits the
# parent's high-water mark across fork+exec, so a child of a big pytest process would
# report the parent's peak. VmHWM belongs to the exec'd image alone.
_PEAK_RSS = """
def peak_rss_mb():
    try:
        for line in open('/proc/self/status'):
            if line.startswith('VmHWM:'):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""


def measure(kind: str, path: Path) -> dict:
    code = (
        "import json, resource, sys, time\nfrom pathlib import Path\n"
        + _PEAK_RSS
        + f"path = Path({str(path)!r}); t0 = time.perf_counter()\n"
        + _CHILD[kind]
        + "\nout['seconds'] = round(time.perf_counter() - t0, 2)"
        "\nout['peak_rss_mb'] = peak_rss_mb()"
        "\nprint(json.dumps(out))"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{res.stderr}")
    return json.loads(res.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=256, help="size of the synthetic trace (decompressed MB)")
    ap.add_argument("--gzip", action="store_true", help="write the trace gzipped")
    ap.add_argument("--keep", type=Path, help="write the trace here and keep it")
    args = ap.parse_args()
    tmp = None
    if args.keep:
        path = args.keep
    else:
        tmp = tempfile.TemporaryDirectory()
        path = Path(tmp.name) / ("trace.json.gz" if args.gzip else "trace.json")
    t0 = time.perf_counter()
    replicas = synthesize(path, args.mb, args.gzip)
    print(f"synthesized {path.stat().st_size / 1e6:.0f} MB on disk ({replicas} replicas of the fixture)"
          f" in {time.perf_counter() - t0:.1f}s")
    idle = measure("idle", path)
    reader = measure("reader", path)
    full = measure("ingest", path)
    base = measure("baseline", path)
    print(f"idle interpreter + imports : peak RSS {idle['peak_rss_mb']:8.0f} MB")
    print(f"json.load (baseline)       : peak RSS {base['peak_rss_mb']:8.0f} MB"
          f"  {base['seconds']:6.1f}s  {base['events']} events")
    rows = {k: v for k, v in reader.items() if k not in ("seconds", "peak_rss_mb")}
    print(f"kineto.read (streaming)    : peak RSS {reader['peak_rss_mb']:8.0f} MB"
          f"  {reader['seconds']:6.1f}s  rows {rows}")
    print(f"tracedb ingest (to parquet): peak RSS {full['peak_rss_mb']:8.0f} MB  {full['seconds']:6.1f}s")
    print(f"ratio reader / json.load   : {reader['peak_rss_mb'] / base['peak_rss_mb']:.3f}")
    print(f"ratio ingest / json.load   : {full['peak_rss_mb'] / base['peak_rss_mb']:.3f}")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
