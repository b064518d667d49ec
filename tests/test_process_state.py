"""Library calls change nothing process-global (issue 25 item 3): a notebook that calls
`Warehouse.ingest` and `Warehouse.query` keeps its import system, its GC and its warning
filters as they were, and may import pandas afterwards.

Each check runs in a fresh interpreter, as a notebook's kernel is: the test's own process
has run other tests' CLI commands in-process. The GC's switches are watched by wrapping
the `gc` module's functions there (the standard library's, not tracedb's), so a pause
that a read undoes before it returns is seen too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import DATA, scenario

ROOT = Path(__file__).resolve().parents[1]

NOTEBOOK = r"""
import gc, json, sys, warnings
calls = []
for name in ("disable", "enable", "freeze", "unfreeze", "set_threshold"):
    def wrap(*a, _f=getattr(gc, name), _n=name):
        calls.append(_n)
        return _f(*a)
    setattr(gc, name, wrap)

def state():
    return {"meta_path": [repr(f) for f in sys.meta_path], "filters": [repr(f) for f in warnings.filters],
            "gc_enabled": gc.isenabled(), "frozen": gc.get_freeze_count(), "threshold": list(gc.get_threshold())}

before = state()
import tracedb
wh = tracedb.Warehouse(sys.argv[1])
ok = wh.ingest(*sys.argv[2:], jobs=1).ok
rows = wh.query("top_kernels", limit=3).num_rows
during = state()
import pandas  # pyarrow was not told that pandas is absent
df = wh.sql("SELECT run_id, count(*) AS n FROM kernels GROUP BY run_id").to_pandas()
print(json.dumps({"ok": ok, "rows": rows, "before": before, "after": during, "gc_calls": calls,
                  "pandas_rows": len(df)}))
"""


def _fresh_interpreter(script: str, tmp_path) -> tuple[subprocess.CompletedProcess, dict]:
    """Run a notebook-like script in a fresh interpreter over a new warehouse and the Kineto
    and TF traces; its last stdout line is JSON."""
    traces = [scenario("kineto_h200_fp32"), scenario("tf_stepstats_gpu_streams")]
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path / "wh"), *map(str, traces)],
                       capture_output=True, text=True, timeout=600, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return r, json.loads(r.stdout.strip().splitlines()[-1])


def test_ingest_and_query_leave_the_process_as_they_found_it(tmp_path):
    # Kineto JSON: decoded once (gc_frozen) and read with the GC paused (gc_paused) in
    # tracedb's own processes; the TF trace: the rollups' DuckDB path too
    r, got = _fresh_interpreter(NOTEBOOK, tmp_path)
    assert got["ok"] and got["rows"] == 3
    assert got["gc_calls"] == []  # never disabled, frozen or retuned, not even for a while
    before, after = got["before"], got["after"]
    for key in ("gc_enabled", "frozen", "threshold"):
        assert after[key] == before[key], key
    # the libraries tracedb imports add their own (six's importer, numpy's filters): none is tracedb's
    for key in ("meta_path", "filters"):
        added = [e for e in after[key] if e not in before[key]]
        assert not [e for e in added if "tracedb" in e or "DB-API" in e], (key, added)
        assert [e for e in before[key] if e not in after[key]] == [], key
    assert got["pandas_rows"] == 2
    assert "Arrow output on a DB-API result" not in r.stderr  # nothing silenced, nothing shown


WORKERS = r"""
import json, sys
from multiprocessing import forkserver

def state():
    return {"preload": list(forkserver._forkserver._preload_modules)}

before = state()
import tracedb
summary = tracedb.Warehouse(sys.argv[1]).ingest(*sys.argv[2:], jobs=2)
print(json.dumps({"ok": summary.ok, "runs": len(summary.runs), "before": before, "after": state()}))
"""


def test_ingest_with_workers_leaves_the_forkserver_settings_alone(tmp_path):
    # `Warehouse.ingest(jobs=2)` reads in worker processes from the forkserver: the process's
    # one forkserver keeps the preload list the notebook had (['__main__'] by default); with
    # tracedb's list a later forkserver child of the notebook's own would import
    # `tracedb.arrow_no_pandas` and find no pandas. (Starting any process from a context
    # fixes the default start method, multiprocessing's own doing: `spawn.get_preparation_data`.)
    _, got = _fresh_interpreter(WORKERS, tmp_path)
    assert got["ok"] and got["runs"] == 2
    assert got["after"] == got["before"]
    assert "tracedb.arrow_no_pandas" not in got["after"]["preload"]
