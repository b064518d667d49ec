"""Issue 28 item 13: the Kineto reader's memory grows with a batch, not with the file,
beyond the link state pass 1 must keep (about 60 B an event in `array('q')` columns:
ops, calls and activities by id, every op's interval for the enclosing-op sweep, which
turns its sorted rows into Python values a slice at a time).

Not timed: two traces of tiny events (`bigtrace.kineto_tiny`: op, launch call, kernel;
the kernels at the end, so every link spans the file), each read in a fresh process that
reports its peak RSS (VmHWM); the growth per extra event must stay under a generous
bound. Before this test the reader grew ~370 B an event on these traces: it held every
runtime call's row to the end (its flush check ran only after events other than
cpu_ops, and every 1024th event here is a cpu_op)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bigtrace import kineto_tiny

ROOT = Path(__file__).parent.parent
# Bytes of peak RSS per extra event: measured ~70-100 (the link state ~60); before the
# enclosing-op sweep went by slices ~235 at these sizes, and before session 9 ~370.
BOUND = 150

_CHILD = """
import json, sys
from pathlib import Path
import tracedb.formats.kineto as k
from tracedb.formats.base import ReadContext
rows = 0
for table, batch in k.read(Path(sys.argv[1]), ReadContext("r", "f")):
    rows += batch.num_rows
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"rows": rows, "peak_kb": peak}))
"""


def _peak(path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True,
                         env=env, check=True)
    return json.loads(out.stdout)


def test_reader_memory_grows_by_the_batch_not_by_the_file(tmp_path):
    if not Path("/proc/self/status").exists():
        import pytest
        pytest.skip("needs /proc (VmHWM)")
    small, large = 30_000, 200_000  # triples: 90 k and 600 k events
    peaks = {}
    for n in (small, large):
        path = tmp_path / f"tiny_{n}.json"
        kineto_tiny(path, n)
        peaks[n] = _peak(path)
        assert peaks[n]["rows"] == 3 * n  # every op, call and kernel landed
    per_event = (peaks[large]["peak_kb"] - peaks[small]["peak_kb"]) * 1024 / (3 * (large - small))
    assert per_event < BOUND, f"{per_event:.0f} B of peak RSS per extra event"
