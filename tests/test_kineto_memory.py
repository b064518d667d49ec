"""Issue 28 item 13: the Kineto reader's memory grows with a batch, not with the file.

Pass 1's link state (ops', calls' and activities' ids and intervals) is held in memory
up to `kineto.SPILL_BYTES`, then spilled to Parquet files in a temporary folder and
joined there by DuckDB within `kineto.LINK_MEMORY`; pass 2 reads each row's links back
in file order. So past those caps, peak RSS stops growing with the event count.

Not timed: two traces of tiny events (`bigtrace.kineto_tiny`: op, launch call, kernel;
the kernels at the end, so every link spans the file), each read in a fresh process that
reports its peak RSS (VmHWM), with SPILL_BYTES lowered to 1 MiB so both traces spill
(the caps then reached by the smaller one); the growth per extra event must stay under
BOUND. Before the spill (session 11) the reader grew ~75 B an event between these sizes
(its link state, ~60 B an event in `array('q')` columns, held to the end of the read),
and ~110 B an event from 600 k to 2 M events; before session 9 ~370."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bigtrace import kineto_tiny

ROOT = Path(__file__).parent.parent
# Bytes of peak RSS per extra event: measured ~25 with the spill (allocator noise:
# pass 1's decoding and pass 2's rows); the reader before it fails at ~75.
BOUND = 40

_CHILD = """
import json, sys
from pathlib import Path
import tracedb.formats.kineto as k
from tracedb.formats.base import ReadContext
k.SPILL_BYTES = 1 << 20  # (a reader without the spill ignores it)
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
    print(f"{per_event:.1f} B of peak RSS per extra event ({peaks})")
    assert per_event < BOUND, f"{per_event:.0f} B of peak RSS per extra event"
